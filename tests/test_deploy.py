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
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from fixtures_lifecycle import make_snapshot
from jupyter_core.paths import SYSTEM_CONFIG_PATH
from kube_rules import Invalid, PodDefaultConflict, Rbac, apply_pod_defaults, check_object

from jupyter_gkeresume.app import GkeResume
from jupyter_gkeresume.cli import DoctorApp
from jupyter_gkeresume.release import kubeflow
from jupyter_gkeresume.snapshot import SnapshotStore

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
VALUES = DEPLOY / "z2jh" / "values.yaml"
PROVISION_VALUES = DEPLOY / "z2jh" / "provision-values.yaml"  # a second --values
K8S_VERSION = "1.37.0"
# deploy/monitoring (Prometheus Operator resources, a values overlay, promtool's tests) is
# checked by tests/test_monitoring.py against the operator's CRDs and promtool.
MANIFESTS = sorted(p for p in DEPLOY.rglob("*.yaml")
                   if p not in (VALUES, PROVISION_VALUES) and p.name != "kustomization.yaml"
                   and "monitoring" not in p.parts)
KUSTOMIZATIONS = sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml"))
# Resources kubernetes-validate has no schema for, checked structurally below.
CUSTOM_KINDS = {
    ("kubeflow.org/v1", "Notebook"), ("kubeflow.org/v1beta1", "Workspace"),
    ("kubeflow.org/v1beta1", "WorkspaceKind"), ("kubeflow.org/v1alpha1", "PodDefault"),
    ("storage.cnrm.cloud.google.com/v1beta1", "StorageBucket"),
    ("security.istio.io/v1", "AuthorizationPolicy"),
}
CUSTOM_GROUPS = ("kubeflow.org", "storage.cnrm.cloud.google.com", "security.istio.io")


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
def rendered(tmp_path_factory) -> dict[str, Path]:
    """``kubectl kustomize`` (the Google Cloud CLI's kubectl, kustomize v5.5) of every
    kustomization in deploy/, on a copy of deploy/ as an admin prepares it (namespace set, the
    key file the secretGenerator reads written): the rendered YAML's path by folder."""
    import shutil

    copy_of = tmp_path_factory.mktemp("kustomize") / "deploy"
    shutil.copytree(DEPLOY, copy_of, ignore=shutil.ignore_patterns("__pycache__", "signing-key"))
    out: dict[str, Path] = {}
    for folder in KUSTOMIZATIONS:
        here = copy_of / folder.relative_to(DEPLOY)
        kustomization = here / "kustomization.yaml"
        kustomization.write_text(re.sub(r"(?m)^namespace: NAMESPACE$", "namespace: team-a",
                                        kustomization.read_text()))
        if "secretGenerator" in kustomization.read_text():
            (here / "signing-key").write_text("0123abcd" * 8 + "\n")
        done = subprocess.run(["kubectl", "kustomize", str(here)], capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        name = str(folder.relative_to(DEPLOY))
        out[name] = here / "rendered.yaml"
        out[name].write_text(done.stdout)
    return out


@pytest.fixture(scope="module")
def validated(tmp_path_factory, rendered) -> dict[str, list[str]]:
    """One ``kubernetes-validate --strict`` run (as a user runs it) over every manifest, every
    rendered kustomization and the bad CronJob of ``test_the_validator_rejects_an_unknown_field``:
    its output lines by file (the tool names the file on each line; one process instead of one
    a file, each loading the schemas)."""
    job = copy.deepcopy(by_kind("CronJob"))
    job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["gracePeriod"] = 5
    bad = tmp_path_factory.mktemp("validate") / "bad.yaml"
    bad.write_text(yaml.safe_dump(job))
    files = [*MANIFESTS, *rendered.values(), bad]
    done = subprocess.run([str(BIN / "kubernetes-validate"), "--strict", "-k", K8S_VERSION,
                           *map(str, files)],
                          capture_output=True, text=True, timeout=300, check=False)
    lines: dict[str, list[str]] = {str(p): [] for p in files}
    for line in (done.stdout + done.stderr).splitlines():
        rest = line.partition(" ")[2]  # "LEVEL FILE ..."
        for path in lines:
            if rest.startswith(f"{path} "):
                lines[path].append(line)
    assert all(lines.values()), done.stdout + done.stderr  # it said something of every file
    lines["bad"] = lines.pop(str(bad))
    for name, path in rendered.items():
        lines[f"rendered:{name}"] = lines.pop(str(path))
    return lines


def check_documents(docs: list[dict], said: list[str]) -> None:
    """Built-in kinds passed kubernetes-validate (``said``: its lines for their file), custom
    kinds pass their served schema (tests/data/crds) strictly."""
    assert docs and all({"apiVersion", "kind", "metadata"} <= set(d) for d in docs)
    builtin = [d for d in docs if (d["apiVersion"], d["kind"]) not in CUSTOM_KINDS]
    assert all(d["apiVersion"].split("/")[0] not in CUSTOM_GROUPS for d in builtin), (
        "a custom resource kind this test does not know")
    assert not [line for line in said if line.startswith("ERROR")], said
    assert sum(" passed for resource " in line for line in said) == len(builtin), said
    for d in docs:
        if (d["apiVersion"], d["kind"]) in CUSTOM_KINDS and d["kind"] != "StorageBucket":
            check_object(d)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_manifest_validates_offline(path, validated):
    check_documents(documents(path), validated[str(path)])


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_kustomization_renders_and_validates(folder, rendered, validated):
    """``kubectl kustomize`` renders each kustomization of deploy/ (kubernetes-sigs/kustomize
    v5.5, as in kubectl 1.32), and what it renders validates like every other manifest: the
    namespace overlay's Secret from its secretGenerator, every namespaced object in the
    overlay's namespace; the base holds only cluster-scoped objects (applied once)."""
    name = str(folder.relative_to(DEPLOY))
    docs = documents(rendered[name])
    check_documents(docs, validated[f"rendered:{name}"])
    sources = {(d["kind"], d["metadata"]["name"]) for p in folder.glob("*.yaml")
               if p.name != "kustomization.yaml" for d in documents(p)}
    made = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert sources <= made
    if "namespace: NAMESPACE" in (folder / "kustomization.yaml").read_text():
        assert all(d["metadata"]["namespace"] == "team-a" for d in docs)
        [secret] = [d for d in docs if d["kind"] == "Secret"]
        assert secret["metadata"]["name"] == "gkeresume-signing-key"  # no hash suffix
        assert set(secret["data"]) == {"signing-key"}
    else:
        assert all("namespace" not in d["metadata"] for d in docs)
        assert {d["kind"] for d in docs} <= {"ClusterRole", "WorkspaceKind"}


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
        assert "deploy/kubeflow/base/kubeflow-rbac.yaml" in backend.rbac_advice
    assert (DEPLOY / "kubeflow" / "base" / "kubeflow-rbac.yaml").is_file()


def env_of(entries: list[dict]) -> dict[str, str]:
    """Environment entries by name: the value, or the fieldRef path of a downward-API one."""
    return {e["name"]: e["value"] if "value" in e else e["valueFrom"]["fieldRef"]["fieldPath"]
            for e in entries}


def test_poddefault_brings_store_and_a_per_namespace_key():
    """The store is the pod's own namespace's folder: ``$(VAR)`` expands a variable defined
    earlier in the list (Kubernetes' dependent environment variables), here the namespace from
    the downward API, so one PodDefault serves every namespace unchanged."""
    pd = by_kind("PodDefault")
    spec = pd["spec"]
    assert "namespace" not in pd["metadata"]  # the overlay's kustomization sets it
    env = env_of(spec["env"])
    names = [e["name"] for e in spec["env"]]
    assert env["GKERESUME_POD_NAMESPACE"] == "metadata.namespace"
    assert names.index("GKERESUME_POD_NAMESPACE") < names.index("GKERESUME_STORE")
    assert env["GKERESUME_STORE"] == "gs://BUCKET/kf/$(GKERESUME_POD_NAMESPACE)", (
        "one folder (and IAM grant) per namespace")
    [volume] = [v for v in spec["volumes"] if "secret" in v]
    [mount] = [m for m in spec["volumeMounts"] if m["name"] == volume["name"]]
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
    env = env_of(template["extraEnv"])
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
    env = env_of(kind["spec"]["podTemplate"]["extraEnv"])
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
    budget = float(env_of(by_kind("PodDefault")["spec"]["env"])["GKERESUME_SHUTDOWN_BUDGET"])
    assert seconds >= budget + 10  # the budget and the server's stop
    grace = by_kind("Notebook")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert seconds <= grace


def test_poddefault_budget_fits_a_spawner_ui_notebooks_30_s():
    """A Notebook made in Kubeflow's spawner UI comes from the web app's template, which sets no
    ``terminationGracePeriodSeconds`` (kubeflow/kubeflow v1.10-branch components/crud-web-apps/
    jupyter/backend/apps/common/yaml/notebook_template.yaml): its pod gets Kubernetes' 30 s.
    The PodDefault's budget (every labelled pod) plus the server's ~10 s stop fits in it; the
    default trait (25 s) would not."""
    budget = float(env_of(by_kind("PodDefault")["spec"]["env"])["GKERESUME_SHUTDOWN_BUDGET"])
    assert budget + 10 <= 30
    assert GkeResume.class_traits()["shutdown_checkpoint_timeout"].default_value + 10 > 30


def workspace_pod(kind: dict) -> tuple[dict, dict[str, str]]:
    """The pod spec and annotations the v2 controller makes of ``kind``'s podTemplate (its
    extraEnv, extraVolumes, extraVolumeMounts and podMetadata on the one container: notebooks-v2
    workspaces/controller/internal/controller/workspace_controller.go ``generatePodSpec``), with
    ``NB_PREFIX`` rendered; the API server's defaulting already applied (a fieldRef's
    apiVersion is v1)."""
    template = kind["spec"]["podTemplate"]
    env = [dict(e, value="/workspace/connect/team-a/ws/jupyterlab/") if e["name"] == "NB_PREFIX"
           else e for e in template["extraEnv"]]
    container = {"name": "main", "image": "i", "env": env,
                 "volumeMounts": [{"name": "home", "mountPath": template["volumeMounts"]["home"]},
                                  *template["extraVolumeMounts"]]}
    spec = {"containers": [container],
            "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "h"}},
                        *template["extraVolumes"]]}
    return spec, dict(template["podMetadata"]["annotations"])


def test_workspacekind_is_self_sufficient_and_the_poddefault_agrees_with_it():
    """A standalone Notebooks v2 install has no PodDefault webhook: the WorkspaceKind itself
    brings the store (the pod's namespace from the downward API), the namespace's key Secret,
    the budgets and the idle timeout. Where the PodDefault also applies (the label), the
    webhook rejects a pod on any entry it would add that differs from the pod's (kubeflow/
    kubeflow v1.10-branch components/admission-webhook/main.go ``mergeEnv``,
    ``mergeVolumes``, ``mergeVolumeMounts``, ``mergeMap``): here it adds nothing; another
    GKERESUME_* value or another drain annotation gets the pod rejected."""
    kind, pd = by_kind("WorkspaceKind"), by_kind("PodDefault")
    spec, annotations = workspace_pod(kind)
    env = env_of(spec["containers"][0]["env"])
    for name in ("GKERESUME_STORE", "GKERESUME_NAMESPACE_KEY_FILE", "GKERESUME_SHUTDOWN_BUDGET",
                 "GKERESUME_IDLE_TIMEOUT"):
        assert env[name], name
    [key] = [m for m in spec["containers"][0]["volumeMounts"]
             if m["name"] == "gkeresume-signing-key"]
    assert os.path.dirname(env["GKERESUME_NAMESPACE_KEY_FILE"]) == key["mountPath"]
    [secret] = [v for v in spec["volumes"] if v["name"] == key["name"]]
    assert secret["secret"] == {"secretName": "gkeresume-signing-key", "defaultMode": 0o440}
    [podinfo] = [m["mountPath"] for m in spec["containers"][0]["volumeMounts"]
                 if m["name"] == "podinfo"]
    assert podinfo == DoctorApp.class_traits()["podinfo_dir"].default_value  # the drain, seen
    validate_builtin({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
                      "spec": spec})
    merged, merged_annotations = apply_pod_defaults(spec, annotations, [pd])
    assert merged == spec and merged_annotations == annotations  # nothing to add
    other = copy.deepcopy(pd)
    [budget] = [e for e in other["spec"]["env"] if e["name"] == "GKERESUME_SHUTDOWN_BUDGET"]
    budget["value"] = "25"
    with pytest.raises(PodDefaultConflict, match="GKERESUME_SHUTDOWN_BUDGET"):
        apply_pod_defaults(spec, annotations, [other])
    drain = copy.deepcopy(pd)
    drain["spec"]["annotations"]["proxy.istio.io/config"] = '{"terminationDrainDuration": "5s"}'
    with pytest.raises(PodDefaultConflict, match=r"proxy\.istio\.io/config"):
        apply_pod_defaults(spec, annotations, [drain])
    # a v1 pod (the Notebook example) gets everything from the PodDefault
    notebook = by_kind("Notebook")["spec"]["template"]["spec"]
    v1, _ = apply_pod_defaults(notebook, {}, [pd])
    assert env_of(v1["containers"][0]["env"]).items() >= {
        k: v for k, v in env.items() if k != "NB_PREFIX"}.items()


SHEBANG = re.compile(r"^#![ \t]*([^ \t]+)(?:[ \t]+.+)?$")  # workspacekind_webhook.go


def test_workspacekind_pauses_idle_workspaces_after_our_idle_pause():
    """Notebooks v2 pauses a Workspace through the WorkspaceKind's ``activityRules``, which the
    webhook accepts only with an ``activityProbe`` (notebooks-v2 workspaces/controller/internal/
    webhook/workspacekind_webhook.go ``validateActivityRules``: at most one catch-all rule per
    effect, last; a warning when ``secondsSinceActive`` < 2 x ``probeIntervalSeconds``;
    ``validateActivityProbe``: a valid shebang). The rule fires after the server's own idle
    pause (GKERESUME_IDLE_TIMEOUT), as a backstop. The probe is a ``podExec`` script (the
    ``jupyter`` probe reads /api/status' last_activity, which an open tab's polls move:
    internal/helper/probe.go ``RunJupyterProbe``), run by the controller's ``/bin/sh`` with
    OUTPUT_JSON_PATH set (``RunPodExecProbe``); it is run against a real server in
    test_image_config_serves_under_nb_prefix_without_a_token."""
    kind = by_kind("WorkspaceKind")
    check_object(kind)
    probe = kind["spec"]["podTemplate"]["activityProbe"]
    [rule] = kind["spec"]["activityRules"]
    assert rule["effect"] == {"pauseWorkspace": True} and not rule.get("match")
    assert probe["minProbeIntervalSeconds"] <= probe["probeIntervalSeconds"]
    assert rule["config"]["secondsSinceActive"] >= 2 * probe["probeIntervalSeconds"]
    idle = int(env_of(kind["spec"]["podTemplate"]["extraEnv"])["GKERESUME_IDLE_TIMEOUT"])
    assert idle + probe["probeIntervalSeconds"] <= rule["config"]["secondsSinceActive"]
    script = probe["podExec"]["script"]
    assert set(probe) == {"minProbeIntervalSeconds", "probeIntervalSeconds", "podExec"}
    assert SHEBANG.match(script.splitlines()[0]) and len(script) <= 2048
    compile(script, "activity-probe", "exec")
    assert "/api/status" not in script.replace('get("status")["started"]', "")


def test_examples_mount_a_home_volume_the_overlay_creates():
    """The Notebook and the Workspace mount ``gpu-notebook-home``; without it the pod stays
    Pending. The namespace overlay ships it, labelled ``notebooks.kubeflow.org/can-mount``
    (notebooks-v2 workspaces/backend/internal/models/common/funcs.go ``LabelCanMount``; the
    upstream samples' workspace_home_pvc.yaml)."""
    pvc = by_kind("PersistentVolumeClaim")
    assert pvc["metadata"]["labels"]["notebooks.kubeflow.org/can-mount"] == "true"
    notebook = by_kind("Notebook")["spec"]["template"]["spec"]
    [claim] = [v["persistentVolumeClaim"]["claimName"] for v in notebook["volumes"]]
    assert claim == pvc["metadata"]["name"]
    assert by_kind("Workspace")["spec"]["podTemplate"]["volumes"]["home"] == claim


def test_only_the_gateway_and_the_culler_reach_the_token_less_port():
    """The server listens token-less under NB_PREFIX (deploy/jupyter_server_config.py).
    Kubeflow's per-profile ALLOW policy admits every workload of the namespace and anyone on
    /healthz and /metrics (kubeflow/kubeflow v1.10-branch components/profile-controller/
    controllers/profile_controller.go ``getAuthorizationPolicy``, whose default principals for
    the gateway and the notebook controller these are). The DENY policy (Istio evaluates DENY
    before ALLOW; a plaintext caller has no principal, which ``notPrincipals`` matches) keeps
    every other caller off port 8888 and the culler on GET .../api/kernels (its only request:
    notebook-controller culling_controller.go ``getNotebookApiKernels``); the NetworkPolicy
    does the same by pod labels (kubeflow/manifests common/istio/istio-install/base/
    install.yaml, applications/jupyter/notebook-controller/upstream/default/kustomization.yaml)
    and leaves every other port as it was."""
    selector = by_kind("PodDefault")["spec"]["selector"]
    policy, network = by_kind("AuthorizationPolicy"), by_kind("NetworkPolicy")
    gateway = "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"
    culler = "cluster.local/ns/kubeflow/sa/notebook-controller-service-account"
    spec = policy["spec"]
    assert spec["action"] == "DENY" and spec["selector"] == selector
    port = str(by_kind("WorkspaceKind")["spec"]["podTemplate"]["options"]["imageConfig"][
        "values"][0]["spec"]["ports"][0]["port"])

    def denied(principal: str | None, method: str, path: str) -> bool:
        def source_matches(source: dict) -> bool:
            return (("principals" not in source or principal in source["principals"]) and
                    ("notPrincipals" not in source or principal not in source["notPrincipals"]))

        def operation_matches(op: dict) -> bool:
            return (port in op.get("ports", [port]) and
                    method in op.get("methods", [method]) and
                    method not in op.get("notMethods", []) and
                    not any(fnmatchcase(path, p) for p in op.get("notPaths", [])))

        return any(all(source_matches(f["source"]) for f in rule.get("from", [])) and
                   all(operation_matches(t["operation"]) for t in rule.get("to", []))
                   for rule in spec["rules"])

    from fnmatch import fnmatchcase

    assert not denied(gateway, "POST", "/notebook/team-a/nb/api/kernels")
    assert not denied(culler, "GET", "/notebook/team-a/nb/api/kernels")
    assert denied(culler, "POST", "/notebook/team-a/nb/api/kernels")
    assert denied(culler, "GET", "/notebook/team-a/nb/api/contents")
    assert denied("cluster.local/ns/team-a/sa/default-editor", "GET", "/notebook/team-a/nb/lab")
    assert denied(None, "GET", "/notebook/team-a/nb/metrics")  # plaintext
    assert network["spec"]["podSelector"] == selector
    [only, rest] = network["spec"]["ingress"]
    assert only["ports"] == [{"protocol": "TCP", "port": int(port)}]
    assert {(p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
             p["podSelector"]["matchLabels"]["app"]) for p in only["from"]} == {
        ("istio-system", "istio-ingressgateway"), ("kubeflow", "notebook-controller")}
    assert "from" not in rest and {(p["protocol"], p["port"], p["endPort"])
                                   for p in rest["ports"]} == {
        ("TCP", 1, int(port) - 1), ("TCP", int(port) + 1, 65535), ("UDP", 1, 65535)}


def test_every_platform_gives_the_image_identity():
    """Snapshots record the image and the session-packages baseline is keyed by it
    (jupyter_gkeresume/snapshot/fingerprint.py ``ENV_FACTS``), so an upgrade is never taken
    for ``%pip install``: z2jh's KubeSpawner sets JUPYTER_IMAGE_SPEC itself (jupyterhub/
    kubespawner kubespawner/spawner.py ``get_env``), the v1 Notebook example sets
    GKERESUME_IMAGE to its image, and the Dockerfile bakes the build-arg in for the rest
    (Notebooks v2 has no per-image environment: workspacekind_types.go ``ImageConfigSpec``)."""
    from jupyter_gkeresume.snapshot.fingerprint import ENV_FACTS

    assert {"JUPYTER_IMAGE_SPEC", "GKERESUME_IMAGE"} <= set(ENV_FACTS["image"])
    [container] = by_kind("Notebook")["spec"]["template"]["spec"]["containers"]
    assert env_of(container["env"])["GKERESUME_IMAGE"] == container["image"]
    final = stages()["final"]
    assert ("ARG", 'GKERESUME_IMAGE=""') in final
    assert any(op == "ENV" and 'GKERESUME_IMAGE="${GKERESUME_IMAGE}"' in arg for op, arg in final)
    import kubespawner.spawner

    source = Path(kubespawner.spawner.__file__).read_text()
    assert "env['JUPYTER_IMAGE_SPEC'] = self.image" in source


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
    for values in (yaml.safe_load(VALUES.read_text()), yaml.safe_load(PROVISION_VALUES.read_text())):
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
    assert "idle_timeout" not in settings  # GKERESUME_IDLE_TIMEOUT below overrides it anyway
    assert cull["enabled"] and 0 < int(user["extraEnv"]["GKERESUME_IDLE_TIMEOUT"]) < cull["timeout"]
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


def test_values_egress_rule_for_the_iptables_dataplane_is_valid_once_uncommented():
    """Where NetworkPolicy is enforced without Dataplane V2, the node DNATs 169.254.169.254:80
    to the GKE metadata server at 169.254.169.252:988 before policy evaluation; the values
    carry that egress rule commented out. Uncommented, it is a key of the chart's schema
    (singleuser.networkPolicy.egress: a list of NetworkPolicyEgressRule, chart 4.4.0
    values.schema.yaml) and a valid egress rule. The address and port: GKE's network-policy page
    (kubernetes-engine/docs/how-to/network-policy) as encoded in gke-labs/kube-agents' operator
    (`metadataDaemonIP = "169.254.169.252"`, TCP 988, DNAT in nat PREROUTING on Dataplane V1)."""
    text = VALUES.read_text()
    block = re.search(r"(?m)^    # egress:\n(?:    #   .*\n)+", text).group(0)
    uncommented = re.sub(r"(?m)^    # ?", "    ", block)
    egress = yaml.safe_load(uncommented)["egress"]
    assert egress == [{"to": [{"ipBlock": {"cidr": "169.254.169.252/32"}}],
                       "ports": [{"port": 988, "protocol": "TCP"}]}]
    listed = (DEPLOY / "z2jh" / "schema-paths.txt").read_text().splitlines()
    assert "singleuser.networkPolicy.egress" in listed
    validate_builtin({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                      "metadata": {"name": "probe"},
                      "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": egress}})


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
        # the WorkspaceKind's activity probe, as the v2 controller runs it (/bin/sh, a file
        # made executable, OUTPUT_JSON_PATH): no kernel yet, so inactive since the start
        started = json.loads(get(f"{base}/api/status")[1])["started"]
        assert run_activity_probe(tmp_path) == {"last_activity": started}
        # a kernel started as the lab starts one (the _xsrf cookie of a page, echoed)
        import http.cookiejar

        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        opener.open(f"{base}/lab", timeout=30).read()
        [xsrf] = [c.value for c in jar if c.name == "_xsrf"]
        request = urllib.request.Request(f"{base}/api/kernels", data=b"{}", method="POST",
                                         headers={"X-XSRFToken": xsrf})
        with opener.open(request, timeout=60) as reply:
            kernel = json.loads(reply.read())
        # the kernel's own activity now, or active while it is busy (starting up, maybe)
        reported = run_activity_probe(tmp_path)
        assert reported == {"has_activity": True} or (
            reported["last_activity"] >= kernel["last_activity"] > started), reported
    finally:
        proc.kill()
        proc.wait()


def run_activity_probe(tmp_path: Path) -> dict:
    """The WorkspaceKind's podExec script run as notebooks-v2 internal/helper/probe.go
    ``RunPodExecProbe`` runs it in the pod (the container's environment: here the runtime dir
    of start_lab's server); what it wrote to OUTPUT_JSON_PATH."""
    script = by_kind("WorkspaceKind")["spec"]["podTemplate"]["activityProbe"]["podExec"]["script"]
    probe, out = tmp_path / "probe.sh", tmp_path / "probe.json"
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}",
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    done = subprocess.run(["/bin/sh", "-c", f'cat > "{probe}" && chmod +x "{probe}" && '
                           f'OUTPUT_JSON_PATH="{out}" "{probe}"'], input=script, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


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
def dockerfile_instructions(text: str | None = None) -> list[tuple[str, str]]:
    """(instruction, argument) of deploy/Dockerfile, or of the Dockerfile ``text``."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text() if text is None else text)
    lines = [line.strip() for line in text.splitlines()]
    return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]


def test_dockerfile_lints_clean():
    done = subprocess.run([str(BIN / "hadolint"), "--no-color", str(DEPLOY / "Dockerfile")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def stages(text: str | None = None) -> dict[str, list[tuple[str, str]]]:
    """The Dockerfile's instructions by stage (``FROM ... AS name``; the last is ``final``)."""
    out: dict[str, list[tuple[str, str]]] = {"args": []}
    current = "args"
    for op, arg in dockerfile_instructions(text):
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
    [install] = [arg for op, arg in final if op == "RUN" and "pip install" in arg]
    assert "--no-cache-dir" in install and '"${CUDA_PYTHON}"' in install
    # the wheel of the first stage by its path: no name an index could also serve (dependency
    # confusion), no version to keep in step with package.json
    assert "set -- /tmp/wheels/jupyter_gkeresume-*.whl" in install
    assert "--find-links" not in install and "jupyter-gkeresume[" not in install
    extras = re.search(r'"\$1\[([a-z,]+)\]"', install).group(1).split(",")
    assert {"gcs", "cuda", "kubeflow"} <= set(extras)
    assert "grep -q" not in install  # SIGPIPE under pipefail: test_final_stage_runs_...
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
    assert list(every) == ["args", "node", "wheel", "gc", "final"]
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


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether the build context leaves ``path`` out (.dockerignore: a pattern matches the path
    or a folder above it; ``**/`` matches any depth; ``!`` re-includes)."""
    import fnmatch

    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    out = False
    for pattern in patterns:
        keep, pattern = pattern.startswith("!"), pattern.lstrip("!").rstrip("/")
        tails = [pattern[3:]] if pattern.startswith("**/") else []
        if any(fnmatch.fnmatchcase(p, pattern) for p in prefixes) or any(
                fnmatch.fnmatchcase(part, tail) for tail in tails for part in parts):
            out = not keep
    return out


def test_dockerignore_keeps_the_dev_checkout_out_and_every_copied_source_in():
    """A dev checkout holds node_modules/, .venv/ and build outputs that ``docker build .``
    would otherwise send to the engine (and, for the lab extension's build output, could
    shadow the clean build); nothing the Dockerfile copies may be left out."""
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for local in (".venv/bin/python", "node_modules/x/package.json", ".git/HEAD",
                  "labextension/node_modules/a.js", "jupyter_gkeresume/labextension/package.json",
                  "jupyter_gkeresume/__pycache__/app.cpython-313.pyc", "labextension/lib/index.js"):
        assert dockerignored(local, patterns), local
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    sources = [s for op, arg in dockerfile_instructions() if op == "COPY"
               and not arg.startswith("--from=") for s in arg.split()[:-1]]
    for f in tracked:
        if any(f == s.rstrip("/") or f.startswith(s) for s in sources):
            assert not dockerignored(f, patterns), f"{f} is copied but .dockerignore drops it"


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


@pytest.fixture(scope="module")
def checkout_wheel(tmp_path_factory) -> Path:
    """This checkout's wheel, as the wheel stage makes it (``pip wheel --no-deps .``; the lab
    extension the tree already holds is reused: pyproject's ``skip-if-exists``)."""
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "--wheel-dir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=580, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [wheel] = out.glob("jupyter_gkeresume-*.whl")
    return wheel


def stage_runs(dockerfile: str, stage: str) -> tuple[list[str], list[str], dict[str, str], str]:
    """One stage of ``dockerfile`` (its text): the SHELL its RUNs use, the RUN commands, its
    ARG defaults and ENV values, and the folder the wheel is copied to."""
    shell = ["/bin/sh", "-c"]  # docker's default
    runs: list[str] = []
    values: dict[str, str] = {}
    wheels = ""
    for op, arg in stages(dockerfile)[stage]:
        if op == "SHELL":
            shell = json.loads(arg)
        elif op == "RUN":
            runs.append(arg)
        elif op in ("ARG", "ENV"):
            for name, value in re.findall(r'(\w+)=("[^"]*"|\S*)', arg):
                values[name] = re.sub(r"\$\{(\w+)\}", lambda m: values.get(m.group(1), ""),
                                      value.strip('"'))
        elif op == "COPY" and arg.startswith("--from=wheel "):
            wheels = arg.split()[-1].rstrip("/")
    return shell, runs, values, wheels


@pytest.mark.timeout(900)
@pytest.mark.parametrize("stage", ["final", "gc"])
def test_image_stage_runs_exit_0_under_its_shell(tmp_path, checkout_wheel, stage):
    """Every RUN of deploy/Dockerfile's final stage (and of the slim `gc` stage), executed as
    docker executes it (the stage's ``SHELL``, the final one's ``bash -o pipefail -c``, else
    ``/bin/sh -c``) in an environment shaped like its base (tests/image_venv.py: docker-stacks'
    CONDA_DIR, HOME, NB_* and fix-permissions; a slim Python has pip and python on PATH too),
    with the wheel where ``COPY --from=wheel`` puts it and the build-args of a ``cuda13-...``
    base (the cuda-python this environment has), exits 0. A ``cmd | grep -q`` there failed the
    build: grep exits at the first match, the lister dies of SIGPIPE writing the rest,
    pipefail fails the RUN."""
    from image_venv import make_image_env, run_in_image

    shell, runs, values, wheels = stage_runs((DEPLOY / "Dockerfile").read_text(), stage)
    expected = ["/bin/bash", "-o", "pipefail", "-c"] if stage == "final" else ["/bin/sh", "-c"]
    assert shell == expected and runs and wheels
    env = make_image_env(tmp_path / "image")
    copied = tmp_path / "image" / wheels.lstrip("/")
    copied.mkdir(parents=True)
    (copied / checkout_wheel.name).write_bytes(checkout_wheel.read_bytes())
    major = metadata.version("cuda-python").split(".")[0]
    env.update({k: v for k, v in values.items() if k not in env},
               CUDA_PYTHON=f"cuda-python>={major},<{int(major) + 1}")
    for command in runs:
        done = run_in_image(shell, command.replace(wheels, str(copied)), env)
        assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
    conda = Path(env["CONDA_DIR"])
    assert not copied.exists()  # the RUN removed the wheel folder
    assert list(conda.glob("lib/python3*/site-packages/jupyter_gkeresume/__init__.py"))
    if stage == "final":
        assert (conda / "share/jupyter/labextensions/jupyter-gkeresume/package.json").is_file()


# -- the retention CronJob's script and the IAM scripts -------------------------------------------
def test_cronjob_runs_the_slim_image_outside_the_mesh_in_any_namespace():
    """The nightly sweep is a CPU task: the Dockerfile's slim ``gc`` stage (a Python base, the
    wheel's [gcs] extra), not the multi-GB CUDA notebook image; no namespace is assumed (the
    admin applies it with ``-n``); an Istio sidecar would outlive the Job's container, so the
    pod opts out (istio/istio 1.26.0 pkg/kube/inject/inject.go ``injectRequired``: the pod
    label ``sidecar.istio.io/inject`` wins over the namespace's)."""
    job = by_kind("CronJob")
    template = job["spec"]["jobTemplate"]["spec"]["template"]
    [container] = template["spec"]["containers"]
    assert container["image"].rsplit(":", 1)[0].endswith("/gkeresume-gc")
    assert "namespace" not in job["metadata"]
    assert template["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
    gc = stages()["gc"]
    assert gc[0] == ("FROM", "${PYTHON_IMAGE} AS gc")
    assert "-slim" in dockerfile_args()["PYTHON_IMAGE"]
    [install] = [arg for op, arg in gc if op == "RUN"]
    assert '"$1[gcs]"' in install and "cuda" not in install


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
    store = env_of(by_kind("PodDefault")["spec"]["env"])["GKERESUME_STORE"]
    assert store.replace("BUCKET", "bkt").replace(
        "$(GKERESUME_POD_NAMESPACE)", "team-a") + "/" == "gs://bkt/kf/team-a/"


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
    assert "GKERESUME_IDLE_TIMEOUT" in doc and "**The notebook-port policies are mandatory.**" in doc
    notes = doc.split("## Upgrade notes")[1].split("\n## ")[0]
    for topic in ("base tag", "slug_scheme", "Zero to JupyterHub 4 to 5",
                  "Kubeflow Notebooks v1 to v2"):
        assert topic in notes, topic
    real = doc.split("Only on a real cluster")[1]
    assert all(f"| {n}. " in real for n in range(1, len(steps) + 1))  # per step


def test_deploy_doc_gives_the_real_workspace_ids():
    """The ids the doc shows are the ones ``workspace_id_for`` computes (a hyphenated name is
    slugged and digested, never the readable ``kfws-{ns}-{name}``)."""
    from jupyter_gkeresume.workspace import workspace_id_for

    doc = (ROOT / "docs" / "deploy.md").read_text()
    v2, v1 = (workspace_id_for(kind, "team-a", "gpu-notebook") for kind in ("kfws", "kf"))
    assert v2.startswith("kfws-team-a-gpu-notebook.") and f"`{v2}`" in doc
    assert f"`{v1}`" in doc and "`kfws-{namespace}-{name}` only when" in doc
    assert "[docs/deploy.md](docs/deploy.md)" in (ROOT / "README.md").read_text()
