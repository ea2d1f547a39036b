"""``jupyter gkeresume doctor``: what the product will do in this pod, each part proven.

``run_checks(inputs)`` returns one ``Check`` per part, in this order, each ``ok`` or not with a
one-line ``detail``; nothing here raises for a part that fails (the failure is the check's
detail), and nothing is changed except one create-only test object, written and removed.

- ``workspace``: the resolved id and where it came from (``workspace.resolve_workspace``);
- ``store``: the URL, and that this workspace's folder takes a create-only write
  (``SnapshotStore.probe_write``);
- ``credentials``: what the object store client authenticates with: the metadata server
  (Workload Identity), a key file, none (anonymous: fails unless the store took the write,
  as an emulator does); not needed for a local directory;
- ``release``: the backend (``jupyterhub``, ``kubeflow-notebook``, ``kubeflow-workspace``,
  ``none``) and whether this pod may release itself (``ReleaseBackend.may_release``: the Hub
  token's scopes, or a SelfSubjectAccessReview for patching its Notebook/Workspace);
- ``base_url``: what the server serves under, against Kubeflow's ``NB_PREFIX`` (the route
  Kubeflow does not strip) or JupyterHub's ``JUPYTERHUB_SERVICE_PREFIX``;
- ``key``: the signing key's id, where it came from, and whether it also signs another
  workspace (``signing.key_warnings``);
- ``shutdown``: the checkpoint budget against what the pod is known to get, and any Istio sidecar
  drain it can see in the downward API's annotations file (``podinfo_dir``/annotations, when the
  admin mounts it). It cannot see the pod's ``terminationGracePeriodSeconds`` (the downward API
  does not expose it) nor KubeSpawner's ``delete_grace_period``: the detail says what it assumed;
- ``idle``: the idle timeout and what counts as activity.
"""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from .credentials import mask
from .errors import GkeResumeError
from .idle import ACTIVITY_KINDS
from .platform import Platform, detect
from .release import ReleaseBackend
from .snapshot.signing import key_warnings, load_signing_key
from .snapshot.store import NO_CREDENTIALS_ADVICE, SnapshotStore
from .workspace import resolve_store_url, resolve_workspace

KUBERNETES_GRACE_SECONDS = 30.0  # terminationGracePeriodSeconds' default (and Notebooks v2's)
ISTIO_DRAIN_SECONDS = 5.0  # pilot-agent terminationDrainDuration's default
ISTIO_STATUS = "sidecar.istio.io/status"  # set on pods the sidecar was injected into
ISTIO_CONFIG = "proxy.istio.io/config"
DRAIN_RE = re.compile(r"terminationDrainDuration:\s*['\"]?(\d+(?:\.\d+)?)s")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class DoctorInputs:
    """What the doctor looks at besides the environment: the ``c.GkeResume`` settings' values,
    the server's ``base_url`` as configured (None: not set), the release backend built from the
    same config, the key file given on the command line, the downward API folder."""

    workspace_id: str
    store_url: str
    backend: ReleaseBackend
    release_backend_setting: str
    base_url: str | None
    shutdown_budget: float
    idle_timeout: float
    idle_pause_busy: bool
    key_file: str | None = None
    podinfo_dir: str = "/etc/podinfo"


def run_checks(inputs: DoctorInputs) -> list[Check]:
    """Every check, in the documented order (``credentials`` and ``key`` need an open store:
    without one, the failed ``workspace`` or ``store`` check stands for them)."""
    platform = detect()
    checks: list[Check] = []
    store = None
    try:
        workspace, source = resolve_workspace(inputs.workspace_id or None)
    except GkeResumeError as exc:
        checks.append(Check("workspace", False, str(exc)))
    else:
        checks.append(Check("workspace", True, f"{workspace} (from {source}; platform "
                                               f"{platform.name})"))
        try:
            store = SnapshotStore(resolve_store_url(inputs.store_url or None), workspace)
        except GkeResumeError as exc:
            checks.append(Check("store", False, str(exc)))
    if store is not None:
        checks.append(_store(store))
        checks.append(_credentials(store, store_ok=checks[-1].ok))
    checks.append(_release(inputs, platform))
    checks.append(_base_url(inputs.base_url, os.environ))
    if store is not None:
        checks.append(_key(store, inputs.key_file))
    checks.append(_shutdown(inputs, platform))
    checks.append(_idle(inputs))
    return checks


def to_json(checks: list[Check]) -> dict[str, Any]:
    return {"checks": [asdict(c) for c in checks]}


def _store(store: SnapshotStore) -> Check:
    url = mask(store.url)
    try:
        store.probe_write()
    except GkeResumeError as exc:
        return Check("store", False, f"{url}: {exc}")
    return Check("store", True, f"{url}: writable (a create-only test object was written and "
                                f"removed under {store.workspace}/records/)")


def _credentials(store: SnapshotStore, *, store_ok: bool) -> Check:
    if store.backend.local:
        return Check("credentials", True, "not needed: the store is a local directory")
    client = getattr(store.fs, "credentials", None)  # gcsfs: GoogleCredentials
    if client is None:
        return Check("credentials", store_ok, f"{type(store.fs).__name__}: its own (not a GCS "
                                              "client: not inspected)")
    kind = _credential_kind(client)
    if kind != "none":
        return Check("credentials", True, kind)
    if store_ok:
        return Check("credentials", True, "none (anonymous access), and the store accepted it "
                                          "(an emulator or a public bucket)")
    return Check("credentials", False, f"none: gcsfs fell back to anonymous access. "
                                       f"{NO_CREDENTIALS_ADVICE}")


def _credential_kind(client: Any) -> str:
    """What a gcsfs ``GoogleCredentials`` authenticates with, in words."""
    credentials = getattr(client, "credentials", None)
    if credentials is None:
        return "none"
    module = type(credentials).__module__
    if module.startswith("google.auth.compute_engine"):
        return "metadata server (Workload Identity, or the node's service account)"
    key_file = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "")
    if module.startswith("google.oauth2.service_account"):
        return f"service account key file {key_file}"
    if module.startswith(("google.auth.external_account", "google.auth.identity_pool")):
        return f"workload identity federation config {key_file}"
    return f"{getattr(client, 'method', '?')}: {type(credentials).__name__}"


def _release(inputs: DoctorInputs, platform: Platform) -> Check:
    backend = inputs.backend
    how = (f"auto: platform {platform.name}" if inputs.release_backend_setting == "auto"
           else "configured")
    try:
        allowed, evidence = asyncio.run(backend.may_release())
    except GkeResumeError as exc:
        return Check("release", False, f"backend {backend.name} ({how}): {exc}")
    except NotImplementedError:  # a site's own ReleaseBackend subclass
        return Check("release", False, f"backend {backend.name} ({how}): cannot say whether "
                                       "this pod may release itself (no may_release)")
    if backend.name == "none" and platform.name != "local" and how != "configured":
        allowed = False  # detected a platform, yet nothing to release it with
        evidence += (f"; on {platform.name} a pause then keeps the pod and its GPU "
                     "(is KUBERNETES_SERVICE_HOST or the Hub's API token missing?)")
    return Check("release", allowed, f"backend {backend.name} ({how}): {evidence}")


def _normalized(prefix: str) -> str:
    return "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"


def _base_url(configured: str | None, env: dict[str, str]) -> Check:
    base_url = _normalized(configured or "/")
    for variable, platform in (("NB_PREFIX", "Kubeflow"),
                               ("JUPYTERHUB_SERVICE_PREFIX", "JupyterHub")):
        prefix = env.get(variable)
        if not prefix:
            continue
        if platform == "JupyterHub" and configured is None:
            return Check("base_url", True, f"{_normalized(prefix)} (jupyterhub-singleuser "
                                           f"takes ${variable})")
        if _normalized(prefix) != base_url:
            return Check("base_url", False, f"{base_url}, but {platform} routes this pod's "
                                            f"requests under ${variable} {prefix} without "
                                            "stripping it: set c.ServerApp.base_url to it "
                                            "(the image's jupyter_server_config.py)")
        return Check("base_url", True, f"{base_url} (= ${variable})")
    return Check("base_url", True, f"{base_url} (no routing prefix in the environment)")


def _key(store: SnapshotStore, key_file: str | None) -> Check:
    try:
        key = load_signing_key(key_file, workspace=store.workspace)
        warnings = key_warnings(store, key)
    except GkeResumeError as exc:
        return Check("key", False, str(exc))
    shared = "shared with another workspace" if any(
        "also signs" in w for w in warnings) else "not seen signing another workspace"
    detail = f"id {key.key_id}, from {key.origin or 'the caller'}, {shared}"
    return Check("key", not warnings, "; ".join([detail, *warnings]))


def _annotations(podinfo_dir: str) -> dict[str, str] | None:
    """The downward API's ``annotations`` file (``key="value"`` lines, values quoted as Go's
    ``%q`` does), None when it is not mounted."""
    try:
        with open(os.path.join(podinfo_dir, "annotations")) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    out = {}
    for line in lines:
        key, _, value = line.partition("=")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
        out[key] = value
    return out


def _shutdown(inputs: DoctorInputs, platform: Platform) -> Check:
    budget = inputs.shutdown_budget
    if budget <= 0:
        return Check("shutdown", True, "no checkpoint on shutdown (shutdown_checkpoint_timeout 0)")
    problems, seen = [], []
    grace = KUBERNETES_GRACE_SECONDS
    if platform.name == "jupyterhub":
        seen.append("KubeSpawner deletes pods with delete_grace_period (1 s unless the admin "
                    "raised it: not visible from the pod)")
    else:
        seen.append(f"grace assumed {grace:g} s (Kubernetes' default; the pod cannot see its "
                    "terminationGracePeriodSeconds)")
    if budget >= grace:
        problems.append(f"the budget {budget:g} s is not below the pod's {grace:g} s grace")
    annotations = _annotations(inputs.podinfo_dir)
    if annotations is None:
        seen.append(f"sidecars: unknown (no downward API annotations at {inputs.podinfo_dir})")
    elif ISTIO_STATUS in annotations:
        match = DRAIN_RE.search(annotations.get(ISTIO_CONFIG, ""))
        drain = float(match.group(1)) if match else ISTIO_DRAIN_SECONDS
        seen.append(f"Istio sidecar drains {drain:g} s after SIGTERM")
        if drain < budget:
            problems.append(f"the Istio sidecar stops {drain:g} s after SIGTERM, before the "
                            f"{budget:g} s budget ends: set {ISTIO_CONFIG} "
                            f"'terminationDrainDuration: {budget:g}s' (docs/deploy.md)")
    else:
        seen.append("no Istio sidecar in the pod's annotations")
    detail = f"budget {budget:g} s; " + "; ".join(seen)
    return Check("shutdown", not problems, "; ".join([detail, *problems]))


def _idle(inputs: DoctorInputs) -> Check:
    if inputs.idle_timeout <= 0:
        return Check("idle", True, "no idle pause (idle_timeout 0)")
    busy = ("a busy kernel is checkpointed once its cell ends" if inputs.idle_pause_busy
            else "never while a kernel is busy")
    return Check("idle", True, f"pause with release after {inputs.idle_timeout:g} s in which no "
                               f"person did anything ({busy}); what counts: "
                               f"{', '.join(ACTIVITY_KINDS)} (never a client's polls)")
