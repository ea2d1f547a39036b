"""``jupyter gkeresume doctor``: what the product will do in this pod, each part proven.

``run_checks(inputs, on_check)`` returns a ``Report``: one ``Check`` per part, in this order,
each ``ok`` or not (``warning``: ok, yet worth an admin's look) with a one-line ``detail``, handed
to ``on_check`` as soon as it is known (the CLI prints check by check), and the ``facts`` a script
reads (``FACTS``). Nothing here raises for a part that fails (the failure is the check's detail),
nothing is changed except one create-only test object, written and removed, and no check waits
on the store for more than ``store_timeout`` before it is called unreachable (then nothing else
touches the store).

- ``workspace``: the resolved id and where it came from (``workspace.resolve_workspace``);
- ``store``: the URL, that it answers within ``store_timeout`` (``SnapshotStore.check_reachable``)
  and that this workspace's folder takes a create-only write (``SnapshotStore.probe_write``);
- ``credentials``: what the object store client authenticates with: the metadata server
  (Workload Identity), a key file, none (anonymous: fails unless the store took the write,
  as an emulator does; the advice names this platform's settings only); not needed for a local
  directory;
- ``release``: the backend (``jupyterhub``, ``kubeflow-notebook``, ``kubeflow-workspace``,
  ``none``) and whether this pod may release itself (``ReleaseBackend.may_release``: the Hub
  token's scopes, or a SelfSubjectAccessReview for patching its Notebook/Workspace);
- ``base_url``: what the server serves under, against Kubeflow's ``NB_PREFIX`` (the route
  Kubeflow does not strip) or JupyterHub's ``JUPYTERHUB_SERVICE_PREFIX``;
- ``key``: the signing key's id, where it came from, and whether it also signs another
  workspace (``signing.key_warnings``);
- ``shutdown``: the checkpoint budget plus the server's own stop (``STOP_MARGIN_SECONDS``)
  against the pod's grace where it is known (``grace_seconds`` given, or Notebooks v2, whose
  pods always get 30 s), and any Istio sidecar drain it can see in the downward API's
  annotations file (``podinfo_dir``/annotations, when the admin mounts it): the drain from
  ``proxy.istio.io/config`` (YAML or JSON, as pilot-agent reads it), none to fear from a native
  sidecar (istio-proxy among the status' ``initContainers``). The downward API exposes neither
  ``terminationGracePeriodSeconds`` nor KubeSpawner's ``delete_grace_period``: where the grace is
  not known the check passes with a warning that says what must hold;
- ``idle``: the idle timeout (``$GKERESUME_IDLE_TIMEOUT`` or ``c.GkeResume.idle_timeout``) and
  what counts as activity; a warning when nothing in this server will ever give the GPU back.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

from .credentials import mask
from .errors import GkeResumeError
from .idle import ACTIVITY_KINDS
from .platform import Platform, detect
from .release import ReleaseBackend
from .snapshot.signing import key_warnings, load_signing_key
from .snapshot.store import SnapshotStore, no_credentials_advice
from .workspace import resolve_store_url, resolve_workspace

KUBERNETES_GRACE_SECONDS = 30.0  # terminationGracePeriodSeconds' default (and Notebooks v2's)
STOP_MARGIN_SECONDS = 10.0  # the server's own stop after the checkpoint (kernels, extensions)
ISTIO_DRAIN_SECONDS = 5.0  # pilot-agent terminationDrainDuration's default
ISTIO_STATUS = "sidecar.istio.io/status"  # set on pods the sidecar was injected into
ISTIO_CONFIG = "proxy.istio.io/config"
ISTIO_PROXY = "istio-proxy"
DRAIN_KEYS = ("terminationDrainDuration", "termination_drain_duration")  # protojson takes both
DURATION_RE = re.compile(r"\A(\d+(?:\.\d+)?)s\Z")  # a protobuf Duration in JSON: "35s", "2.5s"
PODINFO_ADVICE = ("mount a downwardAPI volume with the file `annotations` (fieldRef "
                  "metadata.annotations) there")
FACTS = ("backend", "workspace_id", "key_id", "budget_s", "idle_timeout_s")
"""The structured fields of ``--json`` beside the checks (None where not known)."""


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    warning: bool = False  # ok, yet something an admin should look at (printed WARN)


@dataclass
class Report:
    """What ``run_checks`` found: the checks, the ``FACTS``, and where the configuration came
    from (``source``: ``configuration files`` here, the server's URL when a server answered)."""

    checks: list[Check]
    facts: dict[str, Any] = field(default_factory=dict)
    source: str = "configuration files"

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)


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
    store_timeout: float = 10.0  # seconds the store may take to answer its first request
    grace_seconds: float | None = None  # the pod's grace after SIGTERM, when the admin knows it


def run_checks(inputs: DoctorInputs,
               on_check: Callable[[Check], None] | None = None) -> Report:
    """Every check, in the documented order, each handed to ``on_check`` once known
    (``credentials`` and ``key`` need an open store: without one, the failed ``workspace`` or
    ``store`` check stands for them)."""
    platform = detect()
    report = Report([], {"backend": inputs.backend.name, "workspace_id": None, "key_id": None,
                         "budget_s": inputs.shutdown_budget,
                         "idle_timeout_s": inputs.idle_timeout})

    def add(check: Check) -> Check:
        report.checks.append(check)
        if on_check is not None:
            on_check(check)
        return check

    store = None
    try:
        workspace, source = resolve_workspace(inputs.workspace_id or None)
    except GkeResumeError as exc:
        add(Check("workspace", False, str(exc)))
    else:
        report.facts["workspace_id"] = workspace
        add(Check("workspace", True, f"{workspace} (from {source}; platform {platform.name})"))
        try:
            store = SnapshotStore(resolve_store_url(inputs.store_url or None), workspace)
        except GkeResumeError as exc:
            add(Check("store", False, str(exc)))
    store_ok = False
    if store is not None:
        store_ok = add(_store(store, inputs.store_timeout)).ok
        add(_credentials(store, store_ok=store_ok, platform=platform))
    add(_release(inputs, platform))
    add(_base_url(inputs.base_url, os.environ))
    if store is not None:
        check, report.facts["key_id"] = _key(store, inputs.key_file, store_ok=store_ok)
        add(check)
    add(_shutdown(inputs, platform))
    add(_idle(inputs, platform))
    return report


def to_json(report: Report) -> dict[str, Any]:
    return {"source": report.source, **report.facts,
            "checks": [asdict(c) for c in report.checks]}


def from_json(data: dict[str, Any], source: str) -> Report:
    """A ``Report`` from another doctor's ``to_json`` (a running server's answer): a check
    without its name, ok or detail, or no checks at all, raises ``ValueError``; a fact it does
    not give is None."""
    try:
        checks = [Check(str(c["name"]), bool(c["ok"]), str(c["detail"]),
                        bool(c.get("warning", False))) for c in data["checks"]]
        return Report(checks, {name: data.get(name) for name in FACTS}, source)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a doctor report: {exc!r}") from None


def _store(store: SnapshotStore, timeout: float) -> Check:
    url = mask(store.url)
    try:
        store.check_reachable(timeout)
        store.probe_write()
    except GkeResumeError as exc:
        return Check("store", False, str(exc) if url in str(exc) else f"{url}: {exc}")
    return Check("store", True, f"{url}: writable (a create-only test object was written and "
                                f"removed under {store.workspace}/records/)")


def _credentials(store: SnapshotStore, *, store_ok: bool, platform: Platform) -> Check:
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
    advice = no_credentials_advice(platform.name, point_to_doctor=False)
    return Check("credentials", False, f"none: gcsfs fell back to anonymous access. {advice}")


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


def _key(store: SnapshotStore, key_file: str | None, *,
         store_ok: bool) -> tuple[Check, str | None]:
    """The key check and the key's id (None when it cannot be loaded); the store is asked
    whether the key signs another workspace only when it answered (``store_ok``)."""
    try:
        key = load_signing_key(key_file, workspace=store.workspace)
        warnings = key_warnings(store, key) if store_ok else []
    except GkeResumeError as exc:
        return Check("key", False, str(exc)), None
    if not store_ok:
        shared = "not checked against the store (it did not answer)"
    elif any("also signs" in w for w in warnings):
        shared = "shared with another workspace"
    else:
        shared = "not seen signing another workspace"
    detail = f"id {key.key_id}, from {key.origin or 'the caller'}, {shared}"
    return Check("key", not warnings, "; ".join([detail, *warnings])), key.key_id


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


def _grace(inputs: DoctorInputs, platform: Platform) -> tuple[float | None, str]:
    """The pod's grace after SIGTERM where it is known, with where it came from; else None
    with what is known about it."""
    if inputs.grace_seconds is not None:
        return inputs.grace_seconds, f"grace {inputs.grace_seconds:g} s (given)"
    if platform.name == "kubeflow-v2":  # a WorkspaceKind has no grace-period field
        return KUBERNETES_GRACE_SECONDS, (f"grace {KUBERNETES_GRACE_SECONDS:g} s (Notebooks v2 "
                                          "pods always get Kubernetes' default)")
    if platform.name == "jupyterhub":
        return None, ("grace unknown: KubeSpawner deletes the pod with delete_grace_period (1 s "
                      "unless the admin raised it) and the pod has its own "
                      "terminationGracePeriodSeconds, neither visible from the pod")
    if platform.name == "kubeflow-v1":
        return None, ("grace unknown: the Notebook's terminationGracePeriodSeconds is not "
                      "visible from the pod (30 s when it sets none, as Kubeflow's spawner UI "
                      "does; 60 s in deploy/kubeflow/notebook-v1.yaml)")
    return None, "grace unknown (not visible from inside a pod)"


def _sidecar(annotations: dict[str, str], budget: float) -> tuple[str, str | None, bool]:
    """What the Istio sidecar does to the shutdown checkpoint: ``(seen, problem, unsure)``."""
    try:
        status = json.loads(annotations[ISTIO_STATUS])
    except ValueError:
        status = {}
    if isinstance(status, dict) and ISTIO_PROXY in (status.get("initContainers") or []):
        return ("Istio runs as a native sidecar (istio-proxy among the init containers): it "
                "stops after the notebook's container, no drain limit", None, False)
    drain, unsure = _drain_seconds(annotations.get(ISTIO_CONFIG))
    needed = budget + STOP_MARGIN_SECONDS
    if unsure:
        seen = (f"Istio sidecar: cannot read {ISTIO_CONFIG} {annotations[ISTIO_CONFIG]!r}, so "
                f"assumed its default drain of {drain:g} s")
    elif ISTIO_CONFIG not in annotations:
        seen = (f"Istio sidecar drains {drain:g} s after SIGTERM (Istio's default: no "
                f"{ISTIO_CONFIG} on the pod; a mesh-wide defaultConfig is not visible here)")
    else:
        seen = f"Istio sidecar drains {drain:g} s after SIGTERM"
    if drain >= budget:
        return seen, None, unsure
    return seen, (f"the Istio sidecar stops {drain:g} s after SIGTERM, before the {budget:g} s "
                  f"budget ends: set the pod annotation {ISTIO_CONFIG} "
                  f"'{{\"terminationDrainDuration\": \"{needed:g}s\"}}' (the budget plus "
                  f"{STOP_MARGIN_SECONDS:g} s for the server's stop; docs/deploy.md)"), unsure


def _drain_seconds(config: str | None) -> tuple[float, bool]:
    """``terminationDrainDuration`` of a ``proxy.istio.io/config`` annotation (pilot-agent reads
    it as YAML, of which JSON is a part, into ProxyConfig: a protobuf Duration such as
    ``"35s"``), else Istio's default; True when the annotation was there but unreadable."""
    if not config:
        return ISTIO_DRAIN_SECONDS, False
    try:
        parsed = yaml.safe_load(config)
    except yaml.YAMLError:
        return ISTIO_DRAIN_SECONDS, True
    if not isinstance(parsed, dict):
        return ISTIO_DRAIN_SECONDS, True
    value = next((parsed[key] for key in DRAIN_KEYS if key in parsed), None)
    if value is None:
        return ISTIO_DRAIN_SECONDS, False
    match = DURATION_RE.match(str(value))
    return (float(match.group(1)), False) if match else (ISTIO_DRAIN_SECONDS, True)


def _shutdown(inputs: DoctorInputs, platform: Platform) -> Check:
    budget = inputs.shutdown_budget
    if budget <= 0:
        return Check("shutdown", True, "no checkpoint on shutdown (shutdown_checkpoint_timeout 0)")
    needed = budget + STOP_MARGIN_SECONDS
    problems, notes, seen = [], [], []
    grace, about_grace = _grace(inputs, platform)
    seen.append(about_grace)
    if grace is not None and needed > grace:
        problems.append(f"the budget {budget:g} s plus the server's stop (~"
                        f"{STOP_MARGIN_SECONDS:g} s) does not fit the pod's {grace:g} s grace: "
                        f"set GKERESUME_SHUTDOWN_BUDGET to {max(grace - STOP_MARGIN_SECONDS, 0):g}"
                        " or less")
    elif grace is None and platform.name != "local":
        notes.append(f"it needs a grace of at least {needed:g} s (the budget plus the "
                     "server's stop; --DoctorApp.grace_seconds=S checks a known one)")
    annotations = _annotations(inputs.podinfo_dir)
    if annotations is None and platform.name == "local":
        seen.append("not in a known platform's pod: no sidecar looked for")
    elif annotations is None:
        seen.append(f"sidecars: unknown (no downward API annotations at {inputs.podinfo_dir}: "
                    f"{PODINFO_ADVICE})")
        if platform.name.startswith("kubeflow"):
            notes.append("Kubeflow pods run an Istio sidecar")
    elif ISTIO_STATUS in annotations:
        about, problem, unsure = _sidecar(annotations, budget)
        seen.append(about)
        problems += [problem] if problem else []
        notes += ["check the sidecar's drain"] if unsure and not problem else []
    else:
        seen.append("no Istio sidecar in the pod's annotations")
    detail = "; ".join([f"budget {budget:g} s", *seen, *problems, *notes])
    return Check("shutdown", not problems, detail, warning=bool(notes) and not problems)


def _idle(inputs: DoctorInputs, platform: Platform) -> Check:
    if inputs.idle_timeout <= 0:
        if platform.name == "local":
            return Check("idle", True, "no idle pause (idle_timeout 0)")
        return Check("idle", True, "no idle pause (idle_timeout 0, $GKERESUME_IDLE_TIMEOUT "
                     "unset): nothing in this server ever gives the GPU back, only a Pause "
                     "click or a platform culler this pod cannot see (the z2jh idle culler; "
                     "Kubeflow v1's culling, off unless ENABLE_CULLING; v2's WorkspaceKind "
                     "activity rules): set GKERESUME_IDLE_TIMEOUT=SECONDS, below any culler's "
                     "timeout", warning=True)
    busy = ("a busy kernel is checkpointed once its cell ends" if inputs.idle_pause_busy
            else "never while a kernel is busy")
    frees = ("with no kernel open the pod is released at once, nothing to save"
             if inputs.backend.releases_pod else
             f"the backend {inputs.backend.name} stops the kernels and keeps the pod")
    return Check("idle", True, f"pause with release after {inputs.idle_timeout:g} s in which no "
                               f"person did anything ({busy}; {frees}); what counts: "
                               f"{', '.join(ACTIVITY_KINDS)} (never a client's polls)")
