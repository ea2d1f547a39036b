"""The ``kubeflow`` release backend, through the real kubernetes client, against a small local
HTTP server that stands in for a Kubernetes API server (none can run on these machines: no
container runtime, no kube-apiserver package). It keeps the API's semantics for the two custom
resources involved: bearer-token authentication (401), RBAC evaluated for the service account
the token belongs to with the rules deploy/ ships (403 Status, ``tests/kube_rules.py``), missing
objects (404 Status), JSON merge patch only (RFC 7386, 415 otherwise), the served schema of each
kind, strictly (422 Invalid, unknown fields included), resourceVersion preconditions and
conflicts (409 Status), and complete objects in every answer. It also answers
``SelfSubjectAccessReview`` as kubernetes/kubernetes
``pkg/registry/authorization/selfsubjectaccessreview/rest.go`` does: any authenticated caller may
create one (201, nothing stored), exactly one of ``resourceAttributes`` / ``nonResourceAttributes``
(422 Invalid otherwise), the review echoed with ``status.allowed`` (and ``reason`` when allowed)
from the same RBAC rules that decide the PATCH.

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
from pathlib import Path

import pytest
import yaml
from fixtures_server import server_config
from kube_rules import (
    KUBEFLOW_NOTEBOOKS_EDIT,
    Invalid,
    Rbac,
    check_object,
    send_json,
    served_schema,
)

from jupyter_gkeresume.errors import ReleaseError
from jupyter_gkeresume.release import (
    KubeflowNotebookRelease,
    KubeflowRelease,
    KubeflowWorkspaceRelease,
    NoRelease,
    autodetect,
)

TOKEN = "sa-token-123"  # the pod's token: service account team-a/default-editor (Kubeflow v1)
DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
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


def shipped_rbac(*, with_deploy: bool = True) -> Rbac:
    """RBAC of a Kubeflow v1 cluster where team-a is a profile, with deploy/'s ClusterRole
    applied (or not)."""
    rbac = Rbac()
    rbac.add_cluster_role(KUBEFLOW_NOTEBOOKS_EDIT)
    if with_deploy:
        for doc in yaml.safe_load_all((DEPLOY / "kubeflow" / "base" / "kubeflow-rbac.yaml").read_text()):
            rbac.add_cluster_role(doc)
    rbac.add_profile("team-a")
    return rbac


class FakeKubeApi:
    """Objects keyed by (version, namespace, plural, name); ``tokens`` maps each bearer token to
    the (namespace, service account) it authenticates as, ``rbac`` decides what that account may
    do; ``conflicts`` makes that many next PATCHes answer 409."""

    def __init__(self):
        self.objects: dict[tuple[str, str, str, str], dict] = {}
        self.tokens = {TOKEN: ("team-a", "default-editor")}
        self.rbac = shipped_rbac()
        self.conflicts = 0
        self.requests: list[tuple[str, str, str]] = []
        self.responses: list[dict] = []
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
        """Create an object, as a strict apply would: one its kind's schema refuses raises
        ``kube_rules.Invalid``."""
        kind = {"workspaces": "Workspace", "notebooks": "Notebook"}[plural]
        self._version += 1
        obj = {
            "apiVersion": f"kubeflow.org/{version}", "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "resourceVersion": str(self._version), "generation": 1,
                         "annotations": {}},
            "spec": spec, "status": {},
        }
        check_object(obj, served_schema(plural, version))
        self.objects[(version, namespace, plural, name)] = obj

    def get(self, version, namespace, plural, name):
        return self.objects[(version, namespace, plural, name)]

    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else b""
        self.requests.append((method, req.path, req.headers.get("Content-Type", "")))
        scheme, _, token = (req.headers.get("Authorization") or "").partition(" ")
        if scheme != "Bearer" or token not in self.tokens:
            return self.status(req, 401, "Unauthorized", "Unauthorized")
        if method == "POST" and req.path.split("?")[0] == SSAR_PATH:
            return self.access_review(req, json.loads(body), *self.tokens[token])
        match = PATH_RE.match(req.path.split("?")[0])
        if not match:
            return self.status(req, 404, "NotFound", "the server could not find the resource")
        version, namespace, plural, name = match.groups()
        key = (version, namespace, plural, name)
        account_ns, account = self.tokens[token]
        verb = method.lower()
        if account_ns != namespace or not self.rbac.allows(namespace, account, verb,
                                                           "kubeflow.org", plural):
            return self.status(req, 403, "Forbidden", f'{plural}.kubeflow.org "{name}" is '
                               f'forbidden: User "system:serviceaccount:{account_ns}:{account}"'
                               f' cannot {verb} resource "{plural}" in API group "kubeflow.org"'
                               f' in the namespace "{namespace}"')
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
            try:
                check_object(obj, served_schema(plural, version))
            except Invalid as exc:
                return self.status(req, 422, "Invalid", str(exc))
            self._version += 1
            obj["metadata"]["resourceVersion"] = str(self._version)
            if "spec" in patch:
                obj["metadata"]["generation"] += 1
            self.objects[key] = obj
        self.send(req, 200, obj)

    def access_review(self, req, review: dict, account_ns: str, account: str) -> None:
        spec = review.get("spec") or {}
        attributes = spec.get("resourceAttributes")
        if (attributes is None) == (spec.get("nonResourceAttributes") is None):
            return self.status(req, 422, "Invalid", 'SelfSubjectAccessReview.authorization.k8s.io '
                               '"" is invalid: spec.resourceAttributes: Invalid value: '
                               '"null": exactly one of nonResourceAttributes or '
                               'resourceAttributes must be specified')
        namespace = (attributes or {}).get("namespace")
        role = attributes and account_ns == namespace and self.rbac.allowing_role(
            namespace, account, attributes.get("verb"), attributes.get("group"),
            attributes.get("resource"))
        status = {"allowed": bool(role)}
        if role:
            status["reason"] = (f'RBAC: allowed by RoleBinding "{role}/{namespace}" of '
                                f'ClusterRole "{role}"')
        self.send(req, 201, {"apiVersion": "authorization.k8s.io/v1",
                             "kind": "SelfSubjectAccessReview",
                             "metadata": {"creationTimestamp": None}, "spec": spec,
                             "status": status})

    def status(self, req, code, reason, message):
        self.send(req, code, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Failure", "message": message, "reason": reason,
                              "code": code})

    def send(self, req, code, payload):
        self.responses.append(payload)
        send_json(req, code, payload)

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


def example_spec(name: str) -> dict:
    """The spec of one of deploy/kubeflow's examples (valid for its kind's served schema)."""
    return yaml.safe_load((DEPLOY / "kubeflow" / name).read_text())["spec"]


WORKSPACE = example_spec("workspace-v1beta1.yaml")
NOTEBOOK = example_spec("notebook-v1.yaml")


def backend(kube, **traits) -> KubeflowRelease:
    """The backend the pod's prefix calls for, against the stand-in."""
    return autodetect()(api_host=kube.url, **traits)


def test_a_v2_workspace_is_paused(kube):
    kube.add("v1beta1", "team-a", "workspaces", "train-1", WORKSPACE)
    kube.add("v1", "team-a", "notebooks", "train-1", NOTEBOOK)
    asyncio.run(backend(kube).release())
    ws = kube.get("v1beta1", "team-a", "workspaces", "train-1")
    assert ws["spec"] == {**WORKSPACE, "paused": True}
    assert ws["metadata"]["generation"] == 2
    assert kube.get("v1", "team-a", "notebooks", "train-1")["metadata"]["annotations"] == {}
    assert [(m, ct) for m, _, ct in kube.requests] == [("PATCH", "application/merge-patch+json")]


def test_a_v1_notebook_gets_the_stopped_annotation(kube, monkeypatch):
    monkeypatch.setenv("NB_PREFIX", V1_PREFIX)
    kube.add("v1", "team-a", "notebooks", "train-1", NOTEBOOK)
    asyncio.run(backend(kube).release())
    nb = kube.get("v1", "team-a", "notebooks", "train-1")
    stamp = nb["metadata"]["annotations"]["kubeflow-resource-stopped"]
    assert datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")  # RFC 3339, UTC
    assert nb["spec"] == NOTEBOOK  # a merge patch leaves the rest alone
    assert [p.split("/")[3] for _, p, _ in kube.requests] == ["v1"]  # no Workspace tried


def test_a_v1_pod_on_a_cluster_that_forbids_workspaces_still_releases(kube, monkeypatch):
    """A v1-only cluster answers 403 (not 404) for a kind nobody may patch: the v1 pod must not
    ask about Workspaces at all."""
    monkeypatch.setenv("NB_PREFIX", V1_PREFIX)
    kube.add("v1", "team-a", "notebooks", "train-1", NOTEBOOK)
    kube.rbac = shipped_rbac(with_deploy=False)  # Kubeflow's own roles: Notebooks, no Workspaces
    asyncio.run(backend(kube).release())
    assert "kubeflow-resource-stopped" in kube.get(
        "v1", "team-a", "notebooks", "train-1")["metadata"]["annotations"]


def test_forbidden_names_the_rbac_role(kube):
    kube.add("v1beta1", "team-a", "workspaces", "train-1", WORKSPACE)
    kube.rbac = shipped_rbac(with_deploy=False)  # Kubeflow's own roles reach no Workspace
    with pytest.raises(ReleaseError, match=r"deploy/kubeflow/base/kubeflow-rbac\.yaml"):
        asyncio.run(backend(kube).release())
    assert kube.get("v1beta1", "team-a", "workspaces", "train-1")["spec"]["paused"] is False


def test_a_v2_pod_releases_as_its_own_service_account(kube):
    """Workspace pods run as ``ws-{name}`` (kubeflow/notebooks notebooks-v2
    workspaces/controller/internal/controller/workspace_controller.go
    ``generateServiceAccountName``), bound only to the ClusterRoles of their WorkspaceKind's
    ``podTemplate.serviceAccount.clusterRoles`` (``reconcileRoleBindings``): kubeflow-edit,
    and so the aggregated release role, does not reach them; the WorkspaceKind in deploy/ does."""
    kind = yaml.safe_load((DEPLOY / "kubeflow" / "base" / "workspacekind-v1beta1.yaml").read_text())
    kube.add("v1beta1", "team-a", "workspaces", "train-1", WORKSPACE)
    kube.tokens = {TOKEN: ("team-a", "ws-train-1")}
    release = backend(kube)
    with pytest.raises(ReleaseError, match=r"deploy/kubeflow/base/kubeflow-rbac\.yaml"):
        asyncio.run(release.release())
    assert "ws-train-1" in json.dumps(kube.responses[-1])
    kube.rbac.add_workspace("team-a", "train-2", kind)  # another Workspace's account
    with pytest.raises(ReleaseError, match="forbidden"):
        asyncio.run(release.release())
    kube.rbac.add_workspace("team-a", "train-1", kind)
    asyncio.run(release.release())
    assert kube.get("v1beta1", "team-a", "workspaces", "train-1")["spec"]["paused"] is True


def test_the_stand_in_refuses_fields_the_served_schema_lacks(kube):
    """A merge patch whose result the served schema refuses is a 422 and changes nothing
    (kubeflow.org_workspaces.yaml has no ``spec.deferUpdates``); creating an object the schema
    refuses fails as a strict apply does."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    kube.add("v1beta1", "team-a", "workspaces", "train-1", WORKSPACE)
    configuration = client.Configuration(host=kube.url)
    configuration.api_key = {"authorization": f"Bearer {TOKEN}"}
    api = client.CustomObjectsApi(client.ApiClient(configuration))
    with pytest.raises(ApiException) as refused:
        api.patch_namespaced_custom_object("kubeflow.org", "v1beta1", "team-a", "workspaces",
                                           "train-1", {"spec": {"deferUpdates": True}})
    assert refused.value.status == 422 and "spec.deferUpdates" in refused.value.body
    assert kube.get("v1beta1", "team-a", "workspaces", "train-1")["spec"] == WORKSPACE
    with pytest.raises(Invalid, match=r"spec\.template\.metadata"):
        kube.add("v1", "team-a", "notebooks", "train-1",
                 {**NOTEBOOK, "template": {**NOTEBOOK["template"], "metadata": {}}})


def test_a_conflict_is_retried(kube):
    kube.add("v1beta1", "team-a", "workspaces", "train-1", WORKSPACE)
    kube.conflicts = 1
    asyncio.run(backend(kube).release())
    assert kube.get("v1beta1", "team-a", "workspaces", "train-1")["spec"]["paused"] is True
    assert len(kube.requests) == 2


def test_nothing_to_patch_and_bad_credentials_are_clear_errors(kube, monkeypatch):
    kube.add("v1", "team-a", "notebooks", "train-1", NOTEBOOK)
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
    kube.add("v1beta1", "team-a", "workspaces", "train-1", WORKSPACE)
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
    kube.add("v1beta1", "team-a", "workspaces", "train-1", WORKSPACE)
    kube.add("v1", "team-a", "notebooks", "train-1", NOTEBOOK)
    release = backend(kube)
    allowed, evidence = asyncio.run(release.may_release())
    assert allowed and 'ClusterRole "kubeflow-edit"' in evidence, evidence
    assert f"{release.kind} team-a/train-1" in evidence
    kube.tokens = {TOKEN: ("team-a", "nobody")}  # an account no role is bound to
    allowed, evidence = asyncio.run(release.may_release())
    assert not allowed and "deploy/kubeflow/base/kubeflow-rbac.yaml" in evidence, evidence
    # v1 pods get the role through kubeflow-edit; a v2 pod (ws-NAME) only from its
    # WorkspaceKind's podTemplate.serviceAccount.clusterRoles (workspace_controller.go)
    fix = ("podTemplate.serviceAccount.clusterRoles" if prefix == V2_PREFIX
           else "aggregates into kubeflow-edit")
    assert fix in evidence, evidence
    assert [m for m, _, _ in kube.requests] == ["POST", "POST"]
    assert kube.get("v1beta1", "team-a", "workspaces", "train-1")["spec"]["paused"] is False
