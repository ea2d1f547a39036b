"""The ``kubeflow`` release backend, through the real kubernetes client, against a small local
HTTP server that stands in for a Kubernetes API server (none can run on these machines: no
container runtime, no kube-apiserver package). It keeps the API's semantics for the two custom
resources involved: bearer-token authentication (401), RBAC refusals (403 Status), missing
objects (404 Status), JSON merge patch only (RFC 7386, 415 otherwise), resourceVersion
preconditions and conflicts (409 Status), and complete objects in every answer. It also answers
``SelfSubjectAccessReview`` as kubernetes/kubernetes
``pkg/registry/authorization/selfsubjectaccessreview/rest.go`` does: any authenticated caller may
create one (201, nothing stored), exactly one of ``resourceAttributes`` / ``nonResourceAttributes``
(422 Invalid otherwise), the review echoed with ``status.allowed`` (and ``reason`` when allowed)
from the same rules that decide the PATCH.

Which resource a pod patches comes from its ``NB_PREFIX`` alone (``platform.detect``), checked
against upstream kubeflow/notebooks: ``notebooks-v1``
``components/notebook-controller/controllers/notebook_controller.go`` sets
``NB_PREFIX=/notebook/{ns}/{name}`` and ``culling_controller.go`` stops a Notebook by the
``kubeflow-resource-stopped`` annotation; ``notebooks-v2``
``workspaces/controller/internal/controller/workspace_controller.go`` routes
``/workspace/connect/{ns}/{name}/{port}/`` and scales the pod down on ``spec.paused``
(``workspaces/controller/api/v1beta1/workspace_types.go``).
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fixtures_server import server_config

from jupyter_gkeresume.errors import ReleaseError
from jupyter_gkeresume.release import (
    KubeflowNotebookRelease,
    KubeflowRelease,
    KubeflowWorkspaceRelease,
    NoRelease,
    autodetect,
)

TOKEN = "sa-token-123"
V1_PREFIX = "/notebook/team-a/train-1"
V2_PREFIX = "/workspace/connect/team-a/train-1/jupyterlab/"
SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
PATH_RE = re.compile(r"^/apis/kubeflow\.org/(v1beta1|v1)/namespaces/([^/]+)/(workspaces|notebooks)"
                     r"/([^/?]+)$")


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class FakeKubeApi:
    """Objects keyed by (version, namespace, plural, name); ``forbidden`` holds plurals this
    token may not patch; ``conflicts`` makes that many next PATCHes answer 409."""

    def __init__(self):
        self.objects: dict[tuple[str, str, str, str], dict] = {}
        self.forbidden: set[str] = set()
        self.conflicts = 0
        self.requests: list[tuple[str, str, str]] = []
        self._version = 100
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                api.handle(self, "GET")

            def do_PATCH(self):
                api.handle(self, "PATCH")

            def do_POST(self):
                api.handle(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, version, namespace, plural, name, spec):
        kind = {"workspaces": "Workspace", "notebooks": "Notebook"}[plural]
        self._version += 1
        self.objects[(version, namespace, plural, name)] = {
            "apiVersion": f"kubeflow.org/{version}", "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "resourceVersion": str(self._version), "generation": 1,
                         "annotations": {}},
            "spec": spec, "status": {},
        }

    def get(self, version, namespace, plural, name):
        return self.objects[(version, namespace, plural, name)]

    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else b""
        self.requests.append((method, req.path, req.headers.get("Content-Type", "")))
        if req.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.status(req, 401, "Unauthorized", "Unauthorized")
        if method == "POST" and req.path.split("?")[0] == SSAR_PATH:
            return self.access_review(req, json.loads(body))
        match = PATH_RE.match(req.path.split("?")[0])
        if not match:
            return self.status(req, 404, "NotFound", "the server could not find the resource")
        version, namespace, plural, name = match.groups()
        key = (version, namespace, plural, name)
        if method == "PATCH" and plural in self.forbidden:
            return self.status(req, 403, "Forbidden", f'{plural}.kubeflow.org "{name}" is '
                               f'forbidden: User "system:serviceaccount:{namespace}:default-editor"'
                               f' cannot patch resource "{plural}"')
        if key not in self.objects:
            return self.status(req, 404, "NotFound", f'{plural}.kubeflow.org "{name}" not found')
        obj = self.objects[key]
        if method == "PATCH":
            if req.headers.get("Content-Type") != "application/merge-patch+json":
                return self.status(req, 415, "UnsupportedMediaType", "only merge patch here")
            patch = json.loads(body)
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if self.conflicts or (wanted and wanted != obj["metadata"]["resourceVersion"]):
                self.conflicts = max(self.conflicts - 1, 0)
                return self.status(req, 409, "Conflict", "the object has been modified; please "
                                   "apply your changes to the latest version and try again")
            obj = merge_patch(obj, patch)
            self._version += 1
            obj["metadata"]["resourceVersion"] = str(self._version)
            if "spec" in patch:
                obj["metadata"]["generation"] += 1
            self.objects[key] = obj
        self.send(req, 200, obj)

    def access_review(self, req, review: dict) -> None:
        spec = review.get("spec") or {}
        attributes = spec.get("resourceAttributes")
        if (attributes is None) == (spec.get("nonResourceAttributes") is None):
            return self.status(req, 422, "Invalid", 'SelfSubjectAccessReview.authorization.k8s.io '
                               '"" is invalid: spec.resourceAttributes: Invalid value: '
                               '"null": exactly one of nonResourceAttributes or '
                               'resourceAttributes must be specified')
        allowed = (attributes is not None and attributes.get("group") == "kubeflow.org"
                   and attributes.get("verb") == "patch"
                   and attributes.get("resource") not in self.forbidden)
        status = {"allowed": allowed}
        if allowed:
            status["reason"] = ('RBAC: allowed by RoleBinding "namespaceAdmin/'
                                f'{attributes.get("namespace")}" of ClusterRole "kubeflow-edit"')
        self.send(req, 201, {"apiVersion": "authorization.k8s.io/v1",
                             "kind": "SelfSubjectAccessReview",
                             "metadata": {"creationTimestamp": None}, "spec": spec,
                             "status": status})

    def status(self, req, code, reason, message):
        self.send(req, code, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Failure", "message": message, "reason": reason,
                              "code": code})

    def send(self, req, code, payload):
        data = json.dumps(payload).encode()
        req.send_response(code)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def kube(monkeypatch):
    monkeypatch.setenv("GKERESUME_KUBE_TOKEN", TOKEN)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("NB_PREFIX", V2_PREFIX)
    with FakeKubeApi() as api:
        yield api


def backend(kube, **traits) -> KubeflowRelease:
    """The backend the pod's prefix calls for, against the stand-in."""
    return autodetect()(api_host=kube.url, **traits)


def test_a_v2_workspace_is_paused(kube):
    kube.add("v1beta1", "team-a", "workspaces", "train-1", {"paused": False, "podTemplate": {}})
    kube.add("v1", "team-a", "notebooks", "train-1", {"template": {}})
    asyncio.run(backend(kube).release())
    ws = kube.get("v1beta1", "team-a", "workspaces", "train-1")
    assert ws["spec"] == {"paused": True, "podTemplate": {}}
    assert ws["metadata"]["generation"] == 2
    assert kube.get("v1", "team-a", "notebooks", "train-1")["metadata"]["annotations"] == {}
    assert [(m, ct) for m, _, ct in kube.requests] == [("PATCH", "application/merge-patch+json")]


def test_a_v1_notebook_gets_the_stopped_annotation(kube, monkeypatch):
    monkeypatch.setenv("NB_PREFIX", V1_PREFIX)
    kube.add("v1", "team-a", "notebooks", "train-1", {"template": {"spec": {}}})
    asyncio.run(backend(kube).release())
    nb = kube.get("v1", "team-a", "notebooks", "train-1")
    stamp = nb["metadata"]["annotations"]["kubeflow-resource-stopped"]
    assert datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")  # RFC 3339, UTC
    assert nb["spec"] == {"template": {"spec": {}}}  # a merge patch leaves the rest alone
    assert [p.split("/")[3] for _, p, _ in kube.requests] == ["v1"]  # no Workspace tried


def test_a_v1_pod_on_a_cluster_that_forbids_workspaces_still_releases(kube, monkeypatch):
    """A v1-only cluster answers 403 (not 404) for a kind nobody may patch: the v1 pod must not
    ask about Workspaces at all."""
    monkeypatch.setenv("NB_PREFIX", V1_PREFIX)
    kube.add("v1", "team-a", "notebooks", "train-1", {"template": {}})
    kube.forbidden.add("workspaces")
    asyncio.run(backend(kube).release())
    assert "kubeflow-resource-stopped" in kube.get(
        "v1", "team-a", "notebooks", "train-1")["metadata"]["annotations"]


def test_forbidden_names_the_rbac_role(kube):
    kube.add("v1beta1", "team-a", "workspaces", "train-1", {"paused": False})
    kube.forbidden.add("workspaces")
    with pytest.raises(ReleaseError, match=r"deploy/kubeflow-rbac\.yaml"):
        asyncio.run(backend(kube).release())
    assert kube.get("v1beta1", "team-a", "workspaces", "train-1")["spec"]["paused"] is False


def test_a_conflict_is_retried(kube):
    kube.add("v1beta1", "team-a", "workspaces", "train-1", {"paused": False})
    kube.conflicts = 1
    asyncio.run(backend(kube).release())
    assert kube.get("v1beta1", "team-a", "workspaces", "train-1")["spec"]["paused"] is True
    assert len(kube.requests) == 2


def test_nothing_to_patch_and_bad_credentials_are_clear_errors(kube, monkeypatch):
    kube.add("v1", "team-a", "notebooks", "train-1", {"template": {}})
    with pytest.raises(ReleaseError, match="no Workspace team-a/train-1"):
        asyncio.run(backend(kube).release())
    monkeypatch.setenv("NB_PREFIX", V1_PREFIX)
    monkeypatch.setenv("GKERESUME_KUBE_TOKEN", "stolen")
    with pytest.raises(ReleaseError, match="401"):
        asyncio.run(backend(kube).release())
    monkeypatch.delenv("NB_PREFIX")
    with pytest.raises(ReleaseError, match="namespace or name unknown"):
        asyncio.run(KubeflowNotebookRelease(api_host=kube.url, namespace="").release())


@pytest.mark.parametrize(("env", "expected"), [
    ({"NB_PREFIX": V1_PREFIX}, KubeflowNotebookRelease),
    ({"NB_PREFIX": V1_PREFIX + "/"}, KubeflowNotebookRelease),
    ({"NB_PREFIX": V2_PREFIX}, KubeflowWorkspaceRelease),
    ({"NB_PREFIX": V2_PREFIX.rstrip("/")}, KubeflowWorkspaceRelease),
    ({"NB_PREFIX": "/workspace/connect/team-a/train-1/"}, NoRelease),  # no port: not v2's shape
    ({"NB_PREFIX": "/elsewhere/team-a/train-1"}, NoRelease),
    ({}, NoRelease),
])
def test_the_backend_follows_the_prefix_shape_inside_kubernetes(env, expected):
    assert autodetect({"KUBERNETES_SERVICE_HOST": "10.0.0.1", **env}) is expected
    assert autodetect(env) is NoRelease  # outside a pod: never patch anything


def test_the_hub_wins_and_names_come_from_the_prefix(monkeypatch):
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "NB_PREFIX": V2_PREFIX}
    assert autodetect({"JUPYTERHUB_USER": "alice", "JUPYTERHUB_API_URL": "http://hub/api",
                       "JUPYTERHUB_API_TOKEN": "t", **env}).name == "jupyterhub"
    monkeypatch.setenv("NB_PREFIX", V2_PREFIX)
    release = KubeflowWorkspaceRelease()
    assert (release.namespace, release.resource_name) == ("team-a", "train-1")


@pytest.fixture
def jp_server_config(tmp_path, kube):
    config = server_config(str(tmp_path / "store"), release_backend="auto")
    config["KubeflowRelease"] = {"api_host": kube.url}
    return config


async def test_pause_through_the_server_pauses_the_workspace(api, kube):
    kube.add("v1beta1", "team-a", "workspaces", "train-1", {"paused": False})
    kid = await api.new_session("nb.ipynb")
    await api.run_cell(kid, "k = 'kubeflow'")
    status = await api.pause()
    assert status["state"] == "paused", status
    assert status["release_backend"] == "kubeflow-workspace"
    assert kube.get("v1beta1", "team-a", "workspaces", "train-1")["spec"]["paused"] is True


@pytest.fixture
def black_hole():
    """An API server that accepts connections and never answers (the kernel completes the TCP
    handshake for the listen backlog; nobody reads)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def test_a_black_holed_api_server_is_a_clear_error_not_a_hang(kube, black_hole):
    release = backend(kube, request_timeout=0.5)
    release.api_host = black_hole

    async def bounded():  # a safety net so that a regression fails instead of hanging the suite
        return await asyncio.wait_for(release.release(), 120)

    with pytest.raises(ReleaseError, match=r"did not answer within 0\.5 s.*request_timeout"):
        asyncio.run(bounded())


@pytest.mark.parametrize("prefix", [V1_PREFIX, V2_PREFIX])
def test_may_release_asks_the_api_server_and_changes_nothing(kube, monkeypatch, prefix):
    monkeypatch.setenv("NB_PREFIX", prefix)
    kube.add("v1beta1", "team-a", "workspaces", "train-1", {"paused": False})
    kube.add("v1", "team-a", "notebooks", "train-1", {"template": {}})
    release = backend(kube)
    allowed, evidence = asyncio.run(release.may_release())
    assert allowed and 'ClusterRole "kubeflow-edit"' in evidence, evidence
    assert f"{release.kind} team-a/train-1" in evidence
    kube.forbidden.add(release.plural)
    allowed, evidence = asyncio.run(release.may_release())
    assert not allowed and "deploy/kubeflow-rbac.yaml" in evidence, evidence
    assert [m for m, _, _ in kube.requests] == ["POST", "POST"]
    assert kube.get("v1beta1", "team-a", "workspaces", "train-1")["spec"]["paused"] is False
