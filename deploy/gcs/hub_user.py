#!/usr/bin/env python3
"""JupyterHub (z2jh): provision one Hub user for jupyter-gkeresume end to end, or check it.

    python deploy/gcs/hub_user.py provision PROJECT BUCKET HUB_NAMESPACE USERNAME
    python deploy/gcs/hub_user.py check PROJECT BUCKET HUB_NAMESPACE USERNAME

USERNAME is the Hub user's name as the Hub has it (``Alice``, ``alice@example.com``).
deploy/z2jh/values.yaml runs that user's pod as the Kubernetes service account
``gkeresume-{username}`` with ``GKERESUME_STORE=gs://BUCKET/hub/{username}``, where KubeSpawner
expands ``{username}`` to its safe slug (``Alice`` -> ``alice---3bc51062``). The names here come
from KubeSpawner's own function (``kubespawner.slugs.safe_slug``, max length 48, as
``KubeSpawner._expand_user_properties`` calls it): install the Hub's version,
``pip install jupyterhub-kubespawner==X.Y.Z``, so the slug is the one the Hub computes.

``provision`` (idempotent) creates, in order: the service account (no Kubernetes API token
mounted: it exists for Workload Identity only), the user's managed folder, and the folder's
IAM binding ``roles/storage.objectUser`` for that service account's Workload Identity
principal. ``check`` reads each back and prints one line per part; exit status 1 if any is
missing or wrong. Both run ``kubectl`` and ``gcloud`` as the admin is logged in.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

ROLE = "roles/storage.objectUser"
SLUG_MAX_LENGTH = 48  # kubespawner/spawner.py _expand_user_properties: _slug_max_length

Run = Callable[..., subprocess.CompletedProcess]


@dataclass(frozen=True)
class HubUser:
    """Every name one Hub user's pod and grant use."""

    username: str
    slug: str
    namespace: str
    account: str
    folder: str
    member: str

    @classmethod
    def of(cls, username: str, project: str, number: str, bucket: str,
           namespace: str) -> HubUser:
        from kubespawner.slugs import safe_slug

        slug = safe_slug(username, max_length=SLUG_MAX_LENGTH)
        account = f"gkeresume-{slug}"
        pool = f"projects/{number}/locations/global/workloadIdentityPools/{project}.svc.id.goog"
        return cls(username, slug, namespace, account, f"gs://{bucket}/hub/{slug}/",
                   f"principal://iam.googleapis.com/{pool}/subject/ns/{namespace}/sa/{account}")

    def service_account(self) -> dict:
        return {"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": self.account, "namespace": self.namespace,
                             "annotations": {"hub.jupyter.org/username": self.username}},
                "automountServiceAccountToken": False}


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, input=stdin, capture_output=True, text=True, check=False)


def project_number(project: str, run: Run = run) -> str:
    done = run("gcloud", "projects", "describe", project, "--format=value(projectNumber)")
    if done.returncode != 0 or not done.stdout.strip():
        sys.exit(f"gcloud projects describe {project} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def provision(user: HubUser, run: Run = run) -> None:
    steps = [
        (("kubectl", "apply", "-f", "-"), json.dumps(user.service_account())),
        (("gcloud", "storage", "managed-folders", "create", user.folder), None),
        (("gcloud", "storage", "managed-folders", "add-iam-policy-binding", user.folder,
          f"--member={user.member}", f"--role={ROLE}"), None),
    ]
    for command, stdin in steps:
        done = run(*command, stdin=stdin)
        if done.returncode != 0 and "already exists" not in done.stderr.lower():
            sys.exit(f"{' '.join(command)} failed: {done.stderr.strip()}")
    print(f"provisioned {user.username!r}: service account {user.namespace}/{user.account}, "
          f"folder {user.folder}")


def check(user: HubUser, run: Run = run) -> list[tuple[str, bool, str]]:
    """(part, ok, detail) for the service account, the folder and its binding."""
    done = run("kubectl", "-n", user.namespace, "get", "serviceaccount", user.account,
               "-o", "json")
    if done.returncode != 0:
        account = (False, f"{user.namespace}/{user.account} missing: {done.stderr.strip()}")
    elif json.loads(done.stdout).get("automountServiceAccountToken") is not False:
        account = (False, f"{user.account} mounts a Kubernetes API token: set "
                   "automountServiceAccountToken: false")
    else:
        account = (True, f"{user.namespace}/{user.account}")
    done = run("gcloud", "storage", "managed-folders", "get-iam-policy", user.folder,
               "--format=json")
    if done.returncode != 0:
        folder = (False, f"{user.folder} missing: {done.stderr.strip()}")
        binding = (False, "no folder, no binding")
    else:
        folder = (True, user.folder)
        members = [m for b in json.loads(done.stdout).get("bindings", [])
                   if b.get("role") == ROLE for m in b.get("members", [])]
        binding = ((True, f"{ROLE} for {user.member}") if user.member in members else
                   (False, f"{user.member} lacks {ROLE} on {user.folder}"))
    return [("service account", *account), ("managed folder", *folder),
            ("IAM binding", *binding)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["provision", "check"])
    for name in ("project", "bucket", "namespace", "username"):
        parser.add_argument(name)
    args = parser.parse_args(argv)
    user = HubUser.of(args.username, args.project, project_number(args.project), args.bucket,
                      args.namespace)
    if args.action == "provision":
        provision(user)
        return 0
    results = check(user)
    for part, ok, detail in results:
        print(f"{'ok  ' if ok else 'FAIL'} {part}: {detail}")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
