"""deploy/: what an admin applies. Kubernetes manifests against the official schemas
(kubernetes-validate --strict), Kubeflow and Config Connector resources structurally, the
Zero to JupyterHub values against the chart's key paths and against each other, the Dockerfile
through hadolint, the retention CronJob's script and the IAM scripts run for real (against the
GCS emulator, and with recording stand-ins for gcloud and kubectl)."""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from fixtures_lifecycle import make_snapshot
from jupyter_core.paths import SYSTEM_CONFIG_PATH
from kube_rules import Invalid, Rbac, check_object

from jupyter_gkeresume import __version__
from jupyter_gkeresume.app import GkeResume
from jupyter_gkeresume.release import kubeflow
from jupyter_gkeresume.snapshot import SnapshotStore

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
VALUES = DEPLOY / "z2jh" / "values.yaml"
K8S_VERSION = "1.37.0"
# deploy/monitoring (Prometheus Operator resources, a values overlay, promtool's tests) is
# checked by tests/test_monitoring.py against the operator's CRDs and promtool.
MANIFESTS = sorted(p for p in DEPLOY.rglob("*.yaml") if p != VALUES and "monitoring" not in p.parts)
# Resources kubernetes-validate has no schema for, checked structurally below.
CUSTOM_KINDS = {
    ("kubeflow.org/v1", "Notebook"), ("kubeflow.org/v1beta1", "Workspace"),
    ("kubeflow.org/v1beta1", "WorkspaceKind"), ("kubeflow.org/v1alpha1", "PodDefault"),
    ("storage.cnrm.cloud.google.com/v1beta1", "StorageBucket"),
}


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def by_kind(kind: str) -> dict:
    found = [d for p in MANIFESTS for d in documents(p) if d["kind"] == kind]
    assert len(found) == 1, f"one {kind} expected in deploy/, found {len(found)}"
    return found[0]


def validate_builtin(resource: dict) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(resource, K8S_VERSION, strict=True)


# -- Kubernetes manifests -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def validated(tmp_path_factory) -> dict[str, list[str]]:
    """One ``kubernetes-validate --strict`` run (as a user runs it) over every manifest and the
    bad CronJob of ``test_the_validator_rejects_an_unknown_field``: its output lines by file (the
    tool names the file on each line; one process instead of one a file, each loading the
    schemas)."""
    job = copy.deepcopy(by_kind("CronJob"))
    job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["gracePeriod"] = 5
    bad = tmp_path_factory.mktemp("validate") / "bad.yaml"
    bad.write_text(yaml.safe_dump(job))
    done = subprocess.run([str(BIN / "kubernetes-validate"), "--strict", "-k", K8S_VERSION,
                           *map(str, MANIFESTS), str(bad)],
                          capture_output=True, text=True, timeout=300, check=False)
    lines: dict[str, list[str]] = {str(p): [] for p in [*MANIFESTS, bad]}
    for line in (done.stdout + done.stderr).splitlines():
        rest = line.partition(" ")[2]  # "LEVEL FILE ..."
        for path in lines:
            if rest.startswith(f"{path} "):
                lines[path].append(line)
    assert all(lines.values()), done.stdout + done.stderr  # it said something of every file
    lines["bad"] = lines.pop(str(bad))
    return lines


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_manifest_validates_offline(path, validated):
    docs = documents(path)
    assert docs and all({"apiVersion", "kind", "metadata"} <= set(d) for d in docs)
    builtin = [d for d in docs if (d["apiVersion"], d["kind"]) not in CUSTOM_KINDS]
    assert all(d["apiVersion"].split("/")[0] not in ("kubeflow.org", "storage.cnrm.cloud.google.com")
               for d in builtin), "a custom resource kind this test does not know"
    said = validated[str(path)]
    assert not [line for line in said if line.startswith("ERROR")], said
    assert sum(" passed for resource " in line for line in said) == len(builtin), said


def test_the_validator_rejects_an_unknown_field(validated):
    assert any(line.startswith("ERROR") and "gracePeriod" in line for line in validated["bad"]), (
        validated["bad"])


def test_rbac_grants_exactly_what_the_release_backend_patches():
    role = by_kind("ClusterRole")
    assert role["metadata"]["labels"] == {
        "rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit": "true"}
    [rule] = role["rules"]
    assert rule["apiGroups"] == [kubeflow.GROUP] and rule["verbs"] == ["patch"]
    assert sorted(rule["resources"]) == sorted([kubeflow.KubeflowWorkspaceRelease.plural,
                                                kubeflow.KubeflowNotebookRelease.plural])
    for backend in (kubeflow.KubeflowNotebookRelease, kubeflow.KubeflowWorkspaceRelease):
        assert "deploy/kubeflow-rbac.yaml" in backend.rbac_advice
    assert (ROOT / "deploy" / "kubeflow-rbac.yaml").is_file()


def test_poddefault_brings_store_and_a_per_namespace_key():
    pd = by_kind("PodDefault")
    spec = pd["spec"]
    assert pd["metadata"]["namespace"] == "NAMESPACE"
    env = {e["name"]: e["value"] for e in spec["env"]}
    assert env["GKERESUME_STORE"].startswith("gs://") and env["GKERESUME_STORE"].endswith(
        "/NAMESPACE"), "one folder (and IAM grant) per namespace"
    [volume] = spec["volumes"]
    [mount] = spec["volumeMounts"]
    assert volume["secret"]["secretName"] == "gkeresume-signing-key"  # a Secret in each namespace
    assert volume["secret"]["defaultMode"] == 0o440 and mount["readOnly"] is True
    assert os.path.dirname(env["GKERESUME_NAMESPACE_KEY_FILE"]) == mount["mountPath"]
    # what the webhook merges into a pod is valid pod spec
    validate_builtin({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"}, "spec": {
        "volumes": spec["volumes"],
        "containers": [{"name": "c", "image": "i", "env": spec["env"],
                        "volumeMounts": spec["volumeMounts"]}]}})


KUBEFLOW_KINDS = ["Notebook", "Workspace", "WorkspaceKind", "PodDefault"]


@pytest.mark.parametrize("kind", KUBEFLOW_KINDS)
def test_kubeflow_resources_match_the_served_schema(kind):
    """Each Kubeflow resource in deploy/ passes its CRD's served schema strictly, as
    ``kubectl apply`` (strict field validation) checks it: kubeflow/notebooks notebooks-v1
    components/notebook-controller/config/crd/bases/kubeflow.org_notebooks.yaml, notebooks-v2
    workspaces/controller/manifests/kustomize/base/crd/kubeflow.org_workspaces.yaml and
    kubeflow.org_workspacekinds.yaml, kubeflow/kubeflow v1.10-branch
    components/admission-webhook/manifests/base/crd.yaml (copies in tests/data/crds)."""
    check_object(by_kind(kind))


def test_the_schema_check_rejects_what_strict_apply_rejects():
    """The fields the examples used to carry: the v1 CRD has no ``spec.template.metadata``, the
    v1beta1 Workspace no ``spec.deferUpdates`` (removed from workspace_types.go)."""
    notebook = copy.deepcopy(by_kind("Notebook"))
    notebook["spec"]["template"]["metadata"] = {"labels": {"gkeresume": "true"}}
    with pytest.raises(Invalid, match=r'unknown field "spec\.template\.metadata"'):
        check_object(notebook)
    workspace = copy.deepcopy(by_kind("Workspace"))
    workspace["spec"]["deferUpdates"] = True
    with pytest.raises(Invalid, match=r'unknown field "spec\.deferUpdates"'):
        check_object(workspace)
    workspace["spec"]["paused"] = "no"
    with pytest.raises(Invalid, match=r"spec\.paused: must be boolean"):
        check_object(workspace)


def test_notebook_and_workspace_select_the_poddefault():
    """The v1 controller copies the Notebook's own ``metadata.labels`` to the pod, nothing from
    the pod template's metadata (kubeflow/notebooks notebooks-v1 components/notebook-controller/
    controllers/notebook_controller.go ``generateStatefulSet``); v2 applies the Workspace's
    ``podTemplate.podMetadata.labels`` and its WorkspaceKind's (notebooks-v2
    workspaces/controller/api/v1beta1/workspacekind_types.go ``WorkspaceKindPodMetadata``).
    The PodDefault webhook selects on the pod's labels."""
    selector = by_kind("PodDefault")["spec"]["selector"]["matchLabels"]
    notebook = by_kind("Notebook")
    assert selector.items() <= notebook["metadata"]["labels"].items()
    template = notebook["spec"]["template"]
    validate_builtin({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "probe"},
                      "template": template})
    assert template["spec"]["serviceAccountName"] == "default-editor"
    workspace, kind = by_kind("Workspace"), by_kind("WorkspaceKind")
    assert workspace["spec"]["paused"] is False
    assert workspace["spec"]["kind"] == kind["metadata"]["name"]
    assert selector.items() <= workspace["spec"]["podTemplate"]["podMetadata"]["labels"].items()
    assert selector.items() <= kind["spec"]["podTemplate"]["podMetadata"]["labels"].items()
    options = workspace["spec"]["podTemplate"]["options"]
    for option in ("imageConfig", "podConfig"):
        ids = [v["id"] for v in kind["spec"]["podTemplate"]["options"][option]["values"]]
        assert options[option] in ids


def test_workspacekind_serves_the_image_on_its_prefix_with_a_gpu():
    """The v2 controller routes ``/workspace/connect/{ns}/{name}/{port id}/`` and keeps the
    prefix unless ``removePathPrefix`` (workspace_controller.go
    ``workspaceConnectPathTemplate``); ``{{ httpPathPrefix "ID" }}`` in extraEnv renders it
    (workspaces/controller/internal/helper/template.go), which the image's server config reads
    as NB_PREFIX. The pod spec of its podConfig is a valid core pod spec with a GPU."""
    template = by_kind("WorkspaceKind")["spec"]["podTemplate"]
    [port] = template["ports"]
    assert port["httpProxy"]["removePathPrefix"] is False
    env = {e["name"]: e["value"] for e in template["extraEnv"]}
    assert env["NB_PREFIX"] == '{{ httpPathPrefix "' + port["id"] + '" }}'
    [image] = template["options"]["imageConfig"]["values"]
    assert image["spec"]["ports"] == [{"id": port["id"], "port": 8888}]
    assert image["spec"]["image"] == by_kind("Notebook")["spec"]["template"]["spec"][
        "containers"][0]["image"]
    [pod] = template["options"]["podConfig"]["values"]
    assert int(pod["spec"]["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    validate_builtin({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"}, "spec": {
        "nodeSelector": pod["spec"]["nodeSelector"], "tolerations": pod["spec"]["tolerations"],
        "containers": [{"name": "c", "image": image["spec"]["image"],
                        "resources": pod["spec"]["resources"]}]}})


def test_v2_pods_fit_their_30_s_and_may_release_themselves():
    """v2 pods run as ``ws-{name}`` and get exactly the ClusterRoles of the WorkspaceKind's
    ``podTemplate.serviceAccount.clusterRoles`` (workspace_controller.go
    ``generateServiceAccountName``, ``reconcileRoleBindings``): the release role must be listed
    there, ``kubeflow-edit`` does not reach them. The WorkspaceKind has no grace-period field
    and the controller sets none (workspacekind_types.go), so pods get Kubernetes' default
    30 s: the shutdown budget plus about 10 s of server stop must fit in it."""
    workspaces, notebooks = kubeflow.KubeflowWorkspaceRelease.plural, kubeflow.KubeflowNotebookRelease.plural
    kind = by_kind("WorkspaceKind")
    rbac = Rbac()
    rbac.add_cluster_role(by_kind("ClusterRole"))
    account = rbac.add_workspace("team-a", "train-1", kind)
    assert account == "ws-train-1"
    assert rbac.allows("team-a", account, "patch", kubeflow.GROUP, workspaces)
    assert not rbac.allows("team-b", account, "patch", kubeflow.GROUP, workspaces)
    rbac.add_profile("team-a")  # default-editor reaches it through kubeflow-edit (v1)
    assert rbac.allows("team-a", "default-editor", "patch", kubeflow.GROUP, notebooks)
    env = {e["name"]: e["value"] for e in kind["spec"]["podTemplate"]["extraEnv"]}
    assert float(env["GKERESUME_SHUTDOWN_BUDGET"]) + 10 <= 30
    assert "grace" not in json.dumps(kind["spec"]).lower()


def test_poddefault_extends_the_istio_drain_over_the_shutdown_checkpoint():
    """Istio's pilot-agent keeps the sidecar for ``terminationDrainDuration`` after SIGTERM,
    5 s by default (istio/istio pkg/config/mesh/mesh.go ``DefaultProxyConfig``, the same in
    1.24 to 1.30), then Envoy exits (pkg/envoy/agent.go ``terminate``); the pod's
    ``proxy.istio.io/config`` annotation overrides it, read by pilot-agent from the pod's
    annotations file at start (pilot/cmd/pilot-agent/config/config.go
    ``ConstructProxyConfig``), so the PodDefault webhook may add it after injection. The
    webhook merges ``spec.annotations`` into the pod (kubeflow/kubeflow v1.10-branch
    components/admission-webhook/main.go ``applyPodDefaultsOnPod``)."""
    annotation = by_kind("PodDefault")["spec"]["annotations"]["proxy.istio.io/config"]
    drain = json.loads(annotation)["terminationDrainDuration"]
    seconds = float(re.fullmatch(r"(\d+)s", drain).group(1))
    budget = GkeResume.class_traits()["shutdown_checkpoint_timeout"].default_value
    assert seconds >= budget + 10  # v1: the default budget and the server's stop
    v2 = {e["name"]: e["value"] for e in by_kind("WorkspaceKind")["spec"]["podTemplate"][
        "extraEnv"]}
    assert seconds >= float(v2["GKERESUME_SHUTDOWN_BUDGET"]) + 10
    grace = by_kind("Notebook")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert seconds <= grace


def test_bucket_is_uniform_access_and_private():
    bucket = by_kind("StorageBucket")
    assert bucket["spec"]["uniformBucketLevelAccess"] is True  # managed folders need it
    assert bucket["spec"]["publicAccessPrevention"] == "enforced"
    assert bucket["metadata"]["annotations"]["cnrm.cloud.google.com/deletion-policy"] == "abandon"


# -- Zero to JupyterHub values --------------------------------------------------------------------
def key_paths(value: object, prefix: str = "") -> list[str]:
    if not isinstance(value, dict) or not value:
        return [prefix]
    return [p for k, v in value.items() for p in key_paths(v, f"{prefix}.{k}" if prefix else k)]


def allowed(path: str, pattern: str) -> bool:
    want, got = pattern.split("."), path.split(".")
    if want[-1] == "*":
        want, got = want[:-1], got[: len(want) - 1]
    return len(want) == len(got) and all(w in ("<name>", g) for w, g in zip(want, got, strict=True))


def test_values_use_only_keys_of_the_chart_schema():
    listed = [line for line in (DEPLOY / "z2jh" / "schema-paths.txt").read_text().splitlines()
              if line and not line.startswith("#")]
    values = yaml.safe_load(VALUES.read_text())
    for path in key_paths(values):
        assert any(allowed(path, p) for p in listed), f"{path}: not a key of the chart's schema"
    assert not allowed("singleuser.cloudMetadata.blockWithIptable", "singleuser.cloudMetadata.ip")


@pytest.mark.skipif(not os.environ.get("Z2JH_CHART_DIR"),
                    reason="Z2JH_CHART_DIR (the chart's jupyterhub/ directory) not given")
def test_values_validate_against_the_chart_schema():
    import jsonschema

    chart = Path(os.environ["Z2JH_CHART_DIR"])

    def merge(base: dict, over: dict) -> dict:
        out = copy.deepcopy(base)
        for k, v in over.items():
            out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        return out

    merged = merge(yaml.safe_load((chart / "values.yaml").read_text()),
                   yaml.safe_load(VALUES.read_text()))
    schema = yaml.safe_load((chart / "values.schema.yaml").read_text())
    errors = [f"{e.json_path}: {e.message}" for e in
              jsonschema.Draft7Validator(schema).iter_errors(merged)]
    assert errors == []


def test_values_fit_together():
    values = yaml.safe_load(VALUES.read_text())
    hub, user, cull = values["hub"], values["singleuser"], values["cull"]
    spawner = hub["config"]["KubeSpawner"]
    assert {"delete:servers!server", "access:servers!server", "users:activity!user"} <= set(
        spawner["server_token_scopes"])
    [config_file] = user["extraFiles"].values()
    # a jupyter_server_config file in the system config path: server and CLI read it (a .d/
    # snippet would carry only jpserver_extensions for the server)
    assert config_file["mountPath"] in {f"{d}/jupyter_server_config.json"
                                        for d in SYSTEM_CONFIG_PATH}
    settings = config_file["data"]["GkeResume"]
    assert set(settings) <= set(GkeResume.class_trait_names(config=True))
    GkeResume(**settings)  # the values are valid for the traits
    pod_grace = user["extraPodConfig"]["terminationGracePeriodSeconds"]
    assert settings["shutdown_checkpoint_timeout"] + 10 <= spawner["delete_grace_period"] < pod_grace
    assert cull["enabled"] and 0 < settings["idle_timeout"] < cull["timeout"]
    assert user["cloudMetadata"]["blockWithIptables"] is False  # Workload Identity needs it
    # ... and so does the chart's NetworkPolicy where it is enforced (GKE Dataplane V2)
    assert user["networkPolicy"]["egressAllowRules"]["cloudMetadataServer"] is True
    assert spawner["automount_service_account_token"] is False  # the account is for WI only
    assert "{username}" in user["serviceAccountName"]  # one principal per user ...
    store = user["extraEnv"]["GKERESUME_STORE"]
    assert store.startswith("gs://") and store.endswith("/{username}")  # ... and one folder
    assert user["nodeSelector"]["cloud.google.com/gke-accelerator"]
    assert any(t["key"] == "nvidia.com/gpu" for t in user["extraTolerations"])
    assert int(user["extraResource"]["limits"]["nvidia.com/gpu"]) >= 1
    assert user["image"]["tag"] not in ("", "latest")


# -- the image's server config -------------------------------------------------------------------
def start_lab(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen, dict]:
    """``jupyter lab`` from this environment with the image's config file, as the image starts
    it (docker-stacks start-notebook.py runs ``jupyter lab``); returns the process and the
    server's runtime record (url, base_url, token) once it answers."""
    runtime = tmp_path / "runtime"
    env = {**{k: v for k, v in os.environ.items() if k != "NB_PREFIX"},
           "JUPYTER_RUNTIME_DIR": str(runtime), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_PLATFORM_DIRS": "0", "GKERESUME_STORE": str(tmp_path / "store"),
           "GKERESUME_SIGNING_KEY": "k" * 64, **env}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(tmp_path / "lab.log", "wb") as log:  # the child keeps its own copy of the fd
        proc = subprocess.Popen(
            [str(BIN / "jupyter"), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", f"--ServerApp.root_dir={tmp_path}",
             "--LabApp.news_url=None", f"--config={DEPLOY / 'jupyter_server_config.py'}",
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    deadline = time.monotonic() + 120  # a safety net, not a speed check
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / "lab.log").read_text()
        records = list(runtime.glob("jpserver-*.json"))
        if records:
            info = json.loads(records[0].read_text())
            if get(info["url"].rstrip("/") + "/api/status")[0] != 599:
                return proc, info
        time.sleep(0.2)
    proc.kill()
    raise AssertionError((tmp_path / "lab.log").read_text())


def get(url: str, token: str = "") -> tuple[int, str]:
    """GET ``url``; (status, body), 599 when nothing answers yet."""
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 599, ""


@pytest.mark.timeout(300)
def test_image_config_serves_under_nb_prefix_without_a_token(tmp_path):
    """Kubeflow routes ``/notebook/{ns}/{name}/`` to the pod without stripping it
    (kubeflow/notebooks notebooks-v1 components/notebook-controller/controllers/
    notebook_controller.go ``generateVirtualService``, ``setPrefixEnvVar``) and authenticates
    at the gateway; its images start ``jupyter lab --ServerApp.base_url=$NB_PREFIX
    --ServerApp.token=''`` (components/example-notebook-servers/jupyter/s6/services.d/
    jupyterlab/run). The image's config file does the same when NB_PREFIX is set."""
    prefix = "/notebook/team-a/train-1"
    proc, info = start_lab(tmp_path, {"NB_PREFIX": prefix})
    try:
        base = info["url"].rstrip("/")
        assert info["base_url"] == prefix + "/" and base.endswith(prefix) and not info["token"]
        root = base[: -len(prefix)]
        code, body = get(f"{base}/api/status")
        assert code == 200 and "started" in json.loads(body)
        code, body = get(f"{base}/lab")
        assert code == 200 and f'"baseUrl": "{prefix}/"' in body
        code, body = get(f"{base}/gkeresume/api/status")
        assert code == 200 and json.loads(body)["state"] == "running"
        assert get(f"{root}/api/status")[0] == 404  # nothing at / (the prefix is not stripped)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(300)
def test_image_config_without_nb_prefix_serves_at_root_with_a_token(tmp_path):
    """On JupyterHub (z2jh) and ``docker run`` NB_PREFIX is unset: the config changes nothing,
    the server keeps base_url ``/`` and docker-stacks' random token (jupyter/docker-stacks
    images/base-notebook/start-notebook.py runs plain ``jupyter lab``)."""
    proc, info = start_lab(tmp_path, {})
    try:
        base = info["url"].rstrip("/")
        assert info["base_url"] == "/" and info["token"]
        assert get(f"{base}/api/status")[0] == 403
        assert get(f"{base}/gkeresume/api/status")[0] == 403
        assert get(f"{base}/api/status", info["token"])[0] == 200
        code, body = get(f"{base}/gkeresume/api/status", info["token"])
        assert code == 200 and json.loads(body)["state"] == "running"
    finally:
        proc.kill()
        proc.wait()


# -- Dockerfile ----------------------------------------------------------------------------------
def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]


def test_dockerfile_lints_clean():
    done = subprocess.run([str(BIN / "hadolint"), "--no-color", str(DEPLOY / "Dockerfile")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def stages() -> dict[str, list[tuple[str, str]]]:
    """The Dockerfile's instructions by stage (``FROM ... AS name``; the last is ``final``)."""
    out: dict[str, list[tuple[str, str]]] = {"args": []}
    current = "args"
    for op, arg in dockerfile_instructions():
        if op == "FROM":
            words = arg.split()
            current = words[2] if len(words) == 3 and words[1].upper() == "AS" else "final"
            out[current] = []
        out[current].append((op, arg))
    return out


def dockerfile_args() -> dict[str, str]:
    return {k: v.strip('"') for op, arg in stages()["args"] if op == "ARG"
            for k, v in [arg.split("=", 1)]}


def test_dockerfile_pins_a_python_313_cuda_base_and_the_matching_cuda_python():
    """docker-stacks builds Python 3.13 (jupyter/docker-stacks images/docker-stacks-foundation/
    Dockerfile ``PYTHON_VERSION=3.13``) and tags CUDA variants ``cuda12-python-3.13.14``
    (docs/using/selecting.md, "CUDA enabled variants"; images/pytorch-notebook/cuda12 and
    cuda13 exist)."""
    args = dockerfile_args()
    final = stages()["final"]
    assert final[0] == ("FROM", "${BASE_IMAGE}:${BASE_TAG}")
    assert args["BASE_IMAGE"] == "quay.io/jupyter/pytorch-notebook"
    major = re.fullmatch(r"cuda(\d+)-python-3\.13(\.\d+)?|cuda(\d+)-\d{4}-\d\d-\d\d",
                         args["BASE_TAG"])
    assert major and "latest" not in args["BASE_TAG"]
    n = int(major.group(1) or major.group(3))
    assert n in (12, 13)  # the two variants docker-stacks builds
    build = {k: v.strip('"') for op, arg in final if op == "ARG" and "=" in arg
             for k, v in [arg.split("=", 1)]}
    assert re.fullmatch(rf"cuda-python>={n}(\.\d+)*,<{n + 1}", build["CUDA_PYTHON"])
    assert build["GKERESUME_VERSION"] == __version__
    [install] = [arg for op, arg in final if op == "RUN" and "pip install" in arg]
    assert "--no-cache-dir" in install and '"${CUDA_PYTHON}"' in install
    assert "--find-links /tmp/wheels" in install  # the wheel from the first stage, no index
    extras = re.search(r"jupyter-gkeresume\[([a-z,]+)\]", install).group(1).split(",")
    assert {"gcs", "cuda", "kubeflow"} <= set(extras)
    users = [arg for op, arg in final if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    env = " ".join(arg for op, arg in final if op == "ENV")
    assert "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false" in env
    # read after docker-stacks' /etc/jupyter/jupyter_server_config.py (a later, so weaker,
    # entry of the system config path), before a z2jh-mounted .json in the same directory
    target = "/usr/local/etc/jupyter"
    assert SYSTEM_CONFIG_PATH.index(target) < SYSTEM_CONFIG_PATH.index("/etc/jupyter")
    assert ("COPY", f"deploy/jupyter_server_config.py {target}/jupyter_server_config.py") in final


def test_dockerfile_builds_the_wheel_from_the_clone_in_its_first_stage():
    """Every COPY source exists in a clean clone (tracked files; the context is the
    repository), the wheel stage copies everything ``pip wheel .`` reads (pyproject's packages,
    shared-data, readme, the lab extension's sources and build files) and has Node, and the
    final stage takes the wheel from it."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    every = stages()
    assert list(every) == ["args", "node", "wheel", "final"]
    copied: list[str] = []
    for name, steps in every.items():
        for op, arg in steps:
            if op != "COPY" or arg.startswith("--from="):
                continue
            *sources, _dest = arg.split()
            for source in sources:
                assert any(f == source.rstrip("/") or f.startswith(source) for f in tracked), (
                    f"{name}: COPY {source} is not in a clean clone")
            copied += sources if name == "wheel" else []
    wheel = every["wheel"]
    assert ("COPY", "--from=node /usr/local/bin/node /usr/local/bin/node") in wheel
    assert any(op == "RUN" and "pip wheel" in arg and arg.rstrip().endswith(
        "/wheels/jupyter_gkeresume-*.whl") for op, arg in wheel)
    assert ("COPY", "--from=wheel /wheels/ /tmp/wheels/") in every["final"]
    for needed in wheel_inputs():
        assert any(needed == c.rstrip("/") or needed.startswith(c) for c in copied), needed


def wheel_inputs() -> list[str]:
    """What ``pip wheel .`` reads, from pyproject.toml, package.json and tsconfig.json."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    hatch = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    package = json.loads((ROOT / "package.json").read_text())
    sources = [p.split("/*")[0] for p in json.loads((ROOT / "tsconfig.json").read_text())[
        "include"]]
    assets = {p.split("/**")[0].split("/*.")[0] for p in package["files"]} - {"labextension/lib"}
    return ["pyproject.toml", "package.json", "yarn.lock", ".yarnrc.yml", "tsconfig.json",
            project["project"]["readme"], *hatch["packages"],
            *(k for k in hatch["shared-data"] if not k.startswith("jupyter_gkeresume/")),
            *sources, *sorted(assets)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_wheel_stage_builds_from_a_clean_clone(tmp_path):
    """The wheel stage's commands on exactly the files it copies from a clean clone (no lab
    extension built beforehand): ``pip wheel .`` builds the package and its lab extension with
    Node. (No docker engine runs here; this is that stage without the container.)"""
    context = tmp_path / "src"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    copied = [s for op, arg in stages()["wheel"] if op == "COPY" and not arg.startswith("--")
              for s in arg.split()[:-1]]
    for f in tracked:
        if any(f == c.rstrip("/") or f.startswith(c) for c in copied):
            (context / f).parent.mkdir(parents=True, exist_ok=True)
            (context / f).write_bytes((ROOT / f).read_bytes())
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-cache-dir", "--no-deps",
                           "--wheel-dir", str(tmp_path / "wheels"), str(context)],
                          capture_output=True, text=True, timeout=580, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [wheel] = (tmp_path / "wheels").glob("jupyter_gkeresume-*.whl")
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith("labextensions/jupyter-gkeresume/package.json") for n in names)
    assert any(n.startswith("kernel_hooks/") for n in names)


# -- the retention CronJob's script and the IAM scripts -------------------------------------------
def test_cronjob_sweeps_every_root(gcs_bucket, signing_key):
    job = by_kind("CronJob")
    container = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0].count("jupyter gkeresume gc --all-workspaces") == 1
    for user in ("alice", "bob"):
        store = SnapshotStore(f"{gcs_bucket.url}/hub/{user}", "ws", gcs_bucket.storage_options)
        make_snapshot(store, signing_key, [user.encode() * 50])
    env = {**os.environ, **gcs_bucket.env, "PATH": f"{BIN}:{os.environ['PATH']}",
           "ROOTS": f"{gcs_bucket.url}/hub {gcs_bucket.url}/kf"}  # kf: absent, skipped
    done = subprocess.run([*container["command"], container["args"][0]], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("== gs://") == 2
    assert f"== {gcs_bucket.url}/hub/alice" in done.stdout and "workspace ws:" in done.stdout


def stand_ins(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """``gcloud`` and ``kubectl`` on PATH as tests/fake_cloud_cli.py: they log their arguments
    (one JSON list a line, the returned path) and keep what they create."""
    log = tmp_path / "calls.jsonl"
    for name in ("gcloud", "kubectl"):
        tool = tmp_path / name
        tool.write_text(f"#!{sys.executable}\nimport sys\n"
                        f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
                        "import fake_cloud_cli\n"
                        f"sys.exit(fake_cloud_cli.main({name!r}, sys.argv[1:]))\n")
        tool.chmod(0o755)
    return {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}",
            "FAKE_CLOUD_LOG": str(log), "FAKE_CLOUD_STATE": str(tmp_path / "state.json")}, log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_namespace_grant_is_the_namespace_principal_set(tmp_path):
    """One binding serves Kubeflow v1 pods (``default-editor``) and v2 pods (``ws-{name}``, one
    per Workspace: kubeflow/notebooks notebooks-v2 workspaces/controller/internal/controller/
    workspace_controller.go ``generateServiceAccountName``): the principal set of every
    Kubernetes service account in the namespace (Workload Identity Federation for GKE's
    ``principalSet://.../namespace/NS``)."""
    env, log = stand_ins(tmp_path)
    done = subprocess.run(["bash", str(DEPLOY / "gcs" / "grant-namespace.sh"), "proj", "bkt",
                           "team-a"], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    [binding] = [c for c in calls(log) if c[3:4] == ["add-iam-policy-binding"]]
    member = ("--member=principalSet://iam.googleapis.com/projects/123456/locations/global/"
              "workloadIdentityPools/proj.svc.id.goog/namespace/team-a")
    assert binding == ["gcloud", "storage", "managed-folders", "add-iam-policy-binding",
                       "gs://bkt/kf/team-a/", member, "--role=roles/storage.objectUser"]
    assert ["gcloud", "storage", "managed-folders", "create", "gs://bkt/kf/team-a/"] in calls(log)
    store = {e["name"]: e["value"] for e in by_kind("PodDefault")["spec"]["env"]}
    assert store["GKERESUME_STORE"].replace("BUCKET", "bkt").replace(
        "NAMESPACE", "team-a") + "/" == "gs://bkt/kf/team-a/"


def hub_user_module():
    sys.path.insert(0, str(DEPLOY / "gcs"))
    try:
        import hub_user
    finally:
        sys.path.pop(0)
    return hub_user


@pytest.mark.parametrize(("username", "slug"), [
    ("Alice", "alice---3bc51062"), ("alice@example.com", "alice-example-com---ff8d9819"),
    ("alice", "alice"), ("a--b", "a-b---90827a2e"),
])
def test_hub_user_names_are_kubespawners_slug(username, slug):
    """KubeSpawner 7 expands ``{username}`` to ``safe_slug(name, max_length=48)``
    (jupyterhub/kubespawner kubespawner/spawner.py ``_expand_user_properties``,
    kubespawner/slugs.py ``safe_slug``; its docs give ``Alice`` -> ``alice---3bc51062``).
    hub_user.py takes the slug from that very function, and gives the names values.yaml gives
    the pod: ``gkeresume-{username}`` and ``gs://BUCKET/hub/{username}``."""
    user = hub_user_module().HubUser.of(username, "proj", "123456", "bkt", "jhub")
    assert user.slug == slug
    values = yaml.safe_load(VALUES.read_text())["singleuser"]
    assert user.account == values["serviceAccountName"].format(username=slug)
    assert user.folder == values["extraEnv"]["GKERESUME_STORE"].format(username=slug).replace(
        "BUCKET", "bkt") + "/"
    assert user.member.endswith(f"/proj.svc.id.goog/subject/ns/jhub/sa/gkeresume-{slug}")
    assert len(user.account) <= 63  # a Kubernetes object name


def test_hub_user_provision_then_check(tmp_path, monkeypatch, capsys):
    """``check`` fails on a user nobody provisioned, ``provision`` (twice: idempotent) makes
    the service account without a Kubernetes token (KubeSpawner mounts one for a named service
    account unless told not to: kubespawner/objects.py ``make_pod``), the folder and the
    binding, and ``check`` then passes; a token mounted again makes it fail. The script's
    ``main`` runs in this process (importing KubeSpawner once), the tools as subprocesses."""
    env, _ = stand_ins(tmp_path)
    monkeypatch.setenv("PATH", env["PATH"])
    for name in ("FAKE_CLOUD_LOG", "FAKE_CLOUD_STATE"):
        monkeypatch.setenv(name, env[name])
    main = hub_user_module().main

    def hub_user(action: str) -> tuple[int, str]:
        code = main([action, "proj", "bkt", "jhub", "Alice"])
        return code, capsys.readouterr().out

    code, out = hub_user("check")
    assert code == 1 and out.count("FAIL") == 3, out
    assert hub_user("provision")[0] == 0 and hub_user("provision")[0] == 0
    code, out = hub_user("check")
    assert code == 0 and out.count("ok  ") == 3, out
    state = json.loads((tmp_path / "state.json").read_text())
    account = state["accounts"]["jhub/gkeresume-alice---3bc51062"]
    assert account["automountServiceAccountToken"] is False
    validate_builtin(account)
    assert state["folders"] == {"gs://bkt/hub/alice---3bc51062/": [[
        "roles/storage.objectUser", "principal://iam.googleapis.com/projects/123456/locations/"
        "global/workloadIdentityPools/proj.svc.id.goog/subject/ns/jhub/sa/"
        "gkeresume-alice---3bc51062"]]}
    account["automountServiceAccountToken"] = True
    (tmp_path / "state.json").write_text(json.dumps(state))
    code, out = hub_user("check")
    assert code == 1 and "automountServiceAccountToken: false" in out


# -- the walk-through -----------------------------------------------------------------------------
def test_deploy_doc_walks_through_every_file_in_order():
    doc = (ROOT / "docs" / "deploy.md").read_text()
    shipped = [p for p in DEPLOY.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    for path in shipped:
        assert str(path.relative_to(ROOT)) in doc, f"docs/deploy.md never mentions {path}"
    headings = [line for line in doc.splitlines() if re.match(r"## \d+\. ", line)]
    steps = ["GPU node pool", "Bucket", "Workload Identity", "image", "helm upgrade --install",
             "Kubeflow", "CronJob", "Pause button"]
    assert len(headings) == len(steps)
    assert all(step in heading for step, heading in zip(steps, headings, strict=True)), headings
    assert "Tested here" in doc and "Only on a real cluster" in doc
    assert "delete_grace_period" in doc and "15 s" in doc
    for section in ("### Kubeflow Notebooks v1", "### Kubeflow Notebooks v2",
                    "## Upstream versions checked"):
        assert section in doc, section
    checked = doc.split("## Upstream versions checked")[1].split("\n## ")[0]
    for platform in ("Kubeflow Notebooks v1", "Kubeflow Notebooks v2", "Zero to JupyterHub",
                     "KubeSpawner", "Istio", "docker-stacks"):
        assert f"| {platform} |" in checked, platform
    assert "GKERESUME_SHUTDOWN_BUDGET" in doc and "terminationDrainDuration" in doc
    assert "[docs/deploy.md](docs/deploy.md)" in (ROOT / "README.md").read_text()
