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
missing or wrong.

Two ways to reach the APIs, one set of steps (``provision``, ``check``): ``Cli`` runs
``kubectl`` and ``gcloud`` as the admin is logged in (this script's command line); ``Rest``
calls the Kubernetes and Cloud Storage JSON APIs directly with the pod's own credentials (the
service account token, the metadata server's Google token), which is how the Hub provisions a
user before the first spawn (deploy/z2jh/provision-values.yaml: a ``pre_spawn_hook`` that
imports this file).
"""

from __future__ import annotations

import argparse
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

ROLE = "roles/storage.objectUser"
SLUG_MAX_LENGTH = 48  # kubespawner/spawner.py _expand_user_properties: _slug_max_length

Run = Callable[..., subprocess.CompletedProcess]


class ProvisionError(RuntimeError):
    """A step failed; the message names the call and what the service said."""


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


class Tools(Protocol):
    """What provision and check need of the Kubernetes and Cloud Storage APIs."""

    def apply_account(self, account: dict) -> None: ...
    def account(self, namespace: str, name: str) -> dict | None: ...
    def create_folder(self, folder: str) -> None: ...  # an existing folder is fine
    def add_binding(self, folder: str, member: str, role: str) -> None: ...
    def folder_policy(self, folder: str) -> dict | None: ...  # None: no such folder


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, input=stdin, capture_output=True, text=True, check=False)


def project_number(project: str, run: Run = run) -> str:
    done = run("gcloud", "projects", "describe", project, "--format=value(projectNumber)")
    if done.returncode != 0 or not done.stdout.strip():
        sys.exit(f"gcloud projects describe {project} failed: {done.stderr.strip()}")
    return done.stdout.strip()


class Cli:
    """``kubectl`` and ``gcloud`` on PATH, as the admin is logged in."""

    def __init__(self, run: Run = run) -> None:
        self.run = run

    def _ok(self, *command: str, stdin: str | None = None,
            tolerate: str = "") -> subprocess.CompletedProcess:
        done = self.run(*command, stdin=stdin)
        if done.returncode != 0 and not (tolerate and tolerate in done.stderr.lower()):
            raise ProvisionError(f"{' '.join(command)} failed: {done.stderr.strip()}")
        return done

    def apply_account(self, account: dict) -> None:
        self._ok("kubectl", "apply", "-f", "-", stdin=json.dumps(account))

    def account(self, namespace: str, name: str) -> dict | None:
        done = self.run("kubectl", "-n", namespace, "get", "serviceaccount", name, "-o", "json")
        return json.loads(done.stdout) if done.returncode == 0 else None

    def create_folder(self, folder: str) -> None:
        self._ok("gcloud", "storage", "managed-folders", "create", folder,
                 tolerate="already exists")

    def add_binding(self, folder: str, member: str, role: str) -> None:
        self._ok("gcloud", "storage", "managed-folders", "add-iam-policy-binding", folder,
                 f"--member={member}", f"--role={role}")

    def folder_policy(self, folder: str) -> dict | None:
        done = self.run("gcloud", "storage", "managed-folders", "get-iam-policy", folder,
                        "--format=json")
        return json.loads(done.stdout) if done.returncode == 0 else None


class Rest:
    """The Kubernetes API (``kube_url``, bearer ``kube_token``) and the Cloud Storage JSON API
    (``storage_url``, bearer ``google_token()``) over HTTPS, standard library only (the Hub's
    image has no Google libraries). ``in_cluster()`` builds it from the pod's credentials."""

    def __init__(self, kube_url: str, kube_token: str, storage_url: str,
                 google_token: Callable[[], str], ca_file: str | None = None) -> None:
        self.kube_url, self.kube_token = kube_url.rstrip("/"), kube_token
        self.storage_url, self.google_token = storage_url.rstrip("/"), google_token
        self.context = ssl.create_default_context(cafile=ca_file) if ca_file else None

    @classmethod
    def in_cluster(cls) -> Rest:
        secrets = "/var/run/secrets/kubernetes.io/serviceaccount"
        with open(f"{secrets}/token") as f:
            token = f.read().strip()

        def google_token() -> str:  # the GKE metadata server: the pod's Workload Identity
            request = urllib.request.Request(
                "http://metadata.google.internal/computeMetadata/v1/instance/"
                "service-accounts/default/token", headers={"Metadata-Flavor": "Google"})
            with urllib.request.urlopen(request, timeout=10) as reply:
                return json.load(reply)["access_token"]

        return cls("https://kubernetes.default.svc", token, "https://storage.googleapis.com",
                   google_token, ca_file=f"{secrets}/ca.crt")

    def _call(self, method: str, url: str, token: str, body: object = None,
              content_type: str = "application/json") -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {token}", "Content-Type": content_type,
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as reply:
                return reply.status, json.load(reply)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def _kube(self, method: str, path: str, body: object = None,
              content_type: str = "application/json") -> tuple[int, dict]:
        return self._call(method, self.kube_url + path, self.kube_token, body, content_type)

    def _folder_url(self, folder: str) -> str:
        bucket, _, name = folder.removeprefix("gs://").partition("/")
        return (f"{self.storage_url}/storage/v1/b/{bucket}/managedFolders/"
                f"{urllib.parse.quote(name, safe='')}")

    def apply_account(self, account: dict) -> None:
        meta = account["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts"
        code, reply = self._kube("POST", path, account)
        if code == 409:  # exists: make it what it should be
            code, reply = self._kube("PATCH", f"{path}/{meta['name']}", account,
                                     "application/merge-patch+json")
        if code >= 300:
            raise ProvisionError(f"ServiceAccount {meta['namespace']}/{meta['name']}: "
                                 f"{code} {reply.get('message')}")

    def account(self, namespace: str, name: str) -> dict | None:
        code, reply = self._kube("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")
        return reply if code == 200 else None

    def create_folder(self, folder: str) -> None:
        bucket, _, name = folder.removeprefix("gs://").partition("/")
        code, reply = self._call("POST", f"{self.storage_url}/storage/v1/b/{bucket}/managedFolders",
                                 self.google_token(), {"name": name})
        if code >= 300 and code != 409:
            raise ProvisionError(f"managed folder {folder}: {code} {reply.get('error')}")

    def add_binding(self, folder: str, member: str, role: str) -> None:
        policy = self.folder_policy(folder)
        if policy is None:
            raise ProvisionError(f"managed folder {folder} does not exist")
        bindings = policy.setdefault("bindings", [])
        entry = next((b for b in bindings if b.get("role") == role), None)
        if entry is None:
            bindings.append({"role": role, "members": [member]})
        elif member in entry.setdefault("members", []):
            return
        else:
            entry["members"].append(member)
        code, reply = self._call("PUT", f"{self._folder_url(folder)}/iam", self.google_token(),
                                 policy)
        if code >= 300:
            raise ProvisionError(f"IAM policy of {folder}: {code} {reply.get('error')}")

    def folder_policy(self, folder: str) -> dict | None:
        code, reply = self._call("GET", f"{self._folder_url(folder)}/iam", self.google_token())
        return reply if code == 200 else None


def provision(user: HubUser, tools: Tools) -> None:
    """The service account, then the folder, then the folder's grant (ProvisionError)."""
    tools.apply_account(user.service_account())
    tools.create_folder(user.folder)
    tools.add_binding(user.folder, user.member, ROLE)


def check(user: HubUser, tools: Tools) -> list[tuple[str, bool, str]]:
    """(part, ok, detail) for the service account, the folder and its binding."""
    found = tools.account(user.namespace, user.account)
    if found is None:
        account = (False, f"{user.namespace}/{user.account} missing")
    elif found.get("automountServiceAccountToken") is not False:
        account = (False, f"{user.account} mounts a Kubernetes API token: set "
                   "automountServiceAccountToken: false")
    else:
        account = (True, f"{user.namespace}/{user.account}")
    policy = tools.folder_policy(user.folder)
    if policy is None:
        folder = (False, f"{user.folder} missing")
        binding = (False, "no folder, no binding")
    else:
        folder = (True, user.folder)
        members = [m for b in policy.get("bindings", []) if b.get("role") == ROLE
                   for m in b.get("members", [])]
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
    tools = Cli()
    if args.action == "provision":
        try:
            provision(user, tools)
        except ProvisionError as exc:
            sys.exit(str(exc))
        print(f"provisioned {user.username!r}: service account {user.namespace}/{user.account}, "
              f"folder {user.folder}")
        return 0
    results = check(user, tools)
    for part, ok, detail in results:
        print(f"{'ok  ' if ok else 'FAIL'} {part}: {detail}")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
