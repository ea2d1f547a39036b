"""deploy/gcs's provisioning scripts through the real ``gcloud`` and ``kubectl`` of the Google
Cloud CLI (on these machines and CI's), every endpoint pointed at the loopback stand-ins of
tests/cloud_standins.py: nothing leaves the machine, and a command the tools do not accept
(a flag, a resource name, a field) fails the test as it would fail the admin.
(tests/test_deploy.py runs the same scripts against recording stand-ins, in milliseconds.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cloud_standins import PROJECT_NUMBER, LoopbackCloud

ROOT = Path(__file__).resolve().parents[1]
GCS = ROOT / "deploy" / "gcs"
POOL = f"projects/{PROJECT_NUMBER}/locations/global/workloadIdentityPools/proj.svc.id.goog"

pytestmark = pytest.mark.skipif(not (shutil.which("gcloud") and shutil.which("kubectl")),
                                reason="the Google Cloud CLI is not installed")


@pytest.fixture
def cloud(tmp_path):
    with LoopbackCloud() as cloud:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CLOUDSDK_", "KUBECONFIG", "GOOGLE_"))}
        cloud.env = {**env, **cloud.gcloud_env(tmp_path), **cloud.kubeconfig(tmp_path)}
        yield cloud


def run(cloud: LoopbackCloud, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=cloud.env, capture_output=True, text=True, timeout=180,
                          check=False)


@pytest.mark.timeout(600)
def test_grant_namespace_through_the_real_gcloud(cloud):
    """``gcloud projects describe`` and ``gcloud storage managed-folders create`` /
    ``add-iam-policy-binding`` as the script spells them."""
    done = run(cloud, "bash", str(GCS / "grant-namespace.sh"), "proj", "bkt", "team-a")
    assert done.returncode == 0, done.stderr
    assert cloud.folders["gs://bkt/kf/team-a/"]["bindings"] == [
        {"role": "roles/storage.objectUser",
         "members": [f"principalSet://iam.googleapis.com/{POOL}/namespace/team-a"]}]
    assert "POST /storage/v1/b/bkt/managedFolders" in cloud.requests


@pytest.mark.timeout(600)
def test_hub_user_provision_and_check_through_the_real_tools(cloud):
    """hub_user.py's ``check`` fails on a user nobody provisioned, ``provision`` (twice:
    ``kubectl apply`` finds the account unchanged, the folder's 409 is "already exists")
    makes the service account without a token, the managed folder and its binding, and
    ``check`` then passes (that it fails on a mounted token: tests/test_deploy.py)."""

    def hub_user(action: str) -> subprocess.CompletedProcess:
        return run(cloud, sys.executable, str(GCS / "hub_user.py"), action, "proj", "bkt",
                   "jhub", "Alice")

    done = hub_user("check")
    assert done.returncode == 1 and done.stdout.count("FAIL") == 3, done.stdout + done.stderr
    for _ in range(2):
        done = hub_user("provision")
        assert done.returncode == 0, done.stderr
    done = hub_user("check")
    assert done.returncode == 0 and done.stdout.count("ok  ") == 3, done.stdout + done.stderr
    account = cloud.accounts["jhub/gkeresume-alice---3bc51062"]
    assert account["automountServiceAccountToken"] is False
    assert account["metadata"]["annotations"]["hub.jupyter.org/username"] == "Alice"
    member = f"principal://iam.googleapis.com/{POOL}/subject/ns/jhub/sa/gkeresume-alice---3bc51062"
    assert cloud.folders["gs://bkt/hub/alice---3bc51062/"]["bindings"] == [
        {"role": "roles/storage.objectUser", "members": [member]}]
    # the second apply found the account and left it (unchanged: nothing to patch)
    assert cloud.requests.count("POST /api/v1/namespaces/jhub/serviceaccounts") == 1


def test_the_stand_in_refuses_what_strict_apply_refuses(cloud, tmp_path):
    """A field ServiceAccount does not have fails ``kubectl apply`` (server-side strict field
    validation, as kubectl 1.27+ asks for): the stand-in would catch a typo in the script."""
    bad = {"apiVersion": "v1", "kind": "ServiceAccount",
           "metadata": {"name": "x", "namespace": "jhub"}, "automountToken": False}
    done = subprocess.run(["kubectl", "apply", "-f", "-"], input=json.dumps(bad), env=cloud.env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "automountToken" in done.stderr
    assert "jhub/x" not in cloud.accounts


def test_the_hubs_pre_spawn_hook_provisions_the_user(tmp_path, monkeypatch):
    """deploy/z2jh/provision-values.yaml's hub.extraConfig, executed as z2jh's jupyterhub_config
    executes extraConfig snippets (``c`` in scope), sets ``c.KubeSpawner.pre_spawn_hook``
    (jupyterhub's Spawner trait, awaited with the spawner before each start:
    jupyterhub/spawner.py ``run_pre_spawn_hook``). Run for a spawner of user ``Alice`` in
    ``jhub``, with ``Rest.in_cluster`` pointed at the loopback stand-ins, it makes what
    ``hub_user.py check`` then finds complete: the same steps as the admin's command line.
    Twice: a spawn of a provisioned user re-asserts it (409, then a merge patch)."""
    import asyncio
    from types import SimpleNamespace

    import yaml
    from kubespawner import KubeSpawner
    from traitlets.config import Config

    values = yaml.safe_load((ROOT / "deploy" / "z2jh" / "provision-values.yaml").read_text())
    hub = values["hub"]
    [mount] = [f["mountPath"] for f in hub["extraFiles"].values()]
    assert Path(mount).name == "hub_user.py"
    monkeypatch.syspath_prepend(str(GCS))  # where the chart mounts it: mount's folder
    for name, value in hub["extraEnv"].items():
        monkeypatch.setenv(name, {"PROJECT": "proj", "NUMBER": PROJECT_NUMBER,
                                  "BUCKET": "bkt"}[value])
    import hub_user

    with LoopbackCloud() as cloud:
        rest = hub_user.Rest(cloud.url, "hub-token", cloud.url, lambda: "google-token")
        monkeypatch.setattr(hub_user.Rest, "in_cluster", classmethod(lambda cls: rest))
        c = Config()
        [snippet] = hub["extraConfig"].values()
        exec(compile(snippet, "extraConfig", "exec"), {"c": c})
        hook = c.KubeSpawner.pre_spawn_hook
        assert "pre_spawn_hook" in KubeSpawner.class_trait_names(config=True)
        spawner = SimpleNamespace(user=SimpleNamespace(name="Alice"), namespace="jhub")
        asyncio.run(hook(spawner))
        asyncio.run(hook(spawner))
        user = hub_user.HubUser.of("Alice", "proj", PROJECT_NUMBER, "bkt", "jhub")
        assert all(ok for _, ok, _ in hub_user.check(user, rest)), hub_user.check(user, rest)
        assert cloud.requests.count("PATCH /api/v1/namespaces/jhub/serviceaccounts/"
                                    "gkeresume-alice---3bc51062") == 1
        assert cloud.folders["gs://bkt/hub/alice---3bc51062/"]["bindings"] == [
            {"role": "roles/storage.objectUser", "members": [user.member]}]
