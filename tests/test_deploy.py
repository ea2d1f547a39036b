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
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fixtures_lifecycle import make_snapshot
from jupyter_core.paths import SYSTEM_CONFIG_PATH

from jupyter_gkeresume import __version__
from jupyter_gkeresume.app import GkeResume
from jupyter_gkeresume.release import kubeflow
from jupyter_gkeresume.snapshot import SnapshotStore

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
VALUES = DEPLOY / "z2jh" / "values.yaml"
K8S_VERSION = "1.37.0"
MANIFESTS = sorted(p for p in DEPLOY.rglob("*.yaml") if p != VALUES)
# Resources kubernetes-validate has no schema for, checked structurally below.
CUSTOM_KINDS = {
    ("kubeflow.org/v1", "Notebook"), ("kubeflow.org/v1beta1", "Workspace"),
    ("kubeflow.org/v1alpha1", "PodDefault"), ("storage.cnrm.cloud.google.com/v1beta1", "StorageBucket"),
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
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_manifest_validates_offline(path):
    docs = documents(path)
    assert docs and all({"apiVersion", "kind", "metadata"} <= set(d) for d in docs)
    builtin = [d for d in docs if (d["apiVersion"], d["kind"]) not in CUSTOM_KINDS]
    assert all(d["apiVersion"].split("/")[0] not in ("kubeflow.org", "storage.cnrm.cloud.google.com")
               for d in builtin), "a custom resource kind this test does not know"
    done = subprocess.run([str(BIN / "kubernetes-validate"), "--strict", "-k", K8S_VERSION,
                           str(path)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (done.stdout + done.stderr).count(" passed for resource ") == len(builtin)


def test_the_validator_rejects_an_unknown_field(tmp_path):
    job = copy.deepcopy(by_kind("CronJob"))
    job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["gracePeriod"] = 5
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(job))
    done = subprocess.run([str(BIN / "kubernetes-validate"), "--strict", str(bad)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode != 0 and "gracePeriod" in done.stdout + done.stderr


def test_rbac_grants_exactly_what_the_release_backend_patches():
    role = by_kind("ClusterRole")
    assert role["metadata"]["labels"] == {
        "rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit": "true"}
    [rule] = role["rules"]
    assert rule["apiGroups"] == [kubeflow.GROUP] and rule["verbs"] == ["patch"]
    assert sorted(rule["resources"]) == sorted([kubeflow.KubeflowWorkspaceRelease.plural,
                                                kubeflow.KubeflowNotebookRelease.plural])
    assert kubeflow.RBAC_ADVICE.endswith("deploy/kubeflow-rbac.yaml")
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


def test_notebook_and_workspace_select_the_poddefault():
    selector = by_kind("PodDefault")["spec"]["selector"]["matchLabels"]
    notebook = by_kind("Notebook")
    template = notebook["spec"]["template"]
    assert selector.items() <= template["metadata"]["labels"].items()
    validate_builtin({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "probe"},
                      "template": template})
    assert template["spec"]["serviceAccountName"] == "default-editor"
    workspace = by_kind("Workspace")
    spec = workspace["spec"]
    assert spec["paused"] is False and isinstance(spec["kind"], str)
    pod = spec["podTemplate"]
    assert selector.items() <= pod["podMetadata"]["labels"].items()
    assert isinstance(pod["volumes"]["home"], str)
    assert all(isinstance(pod["options"][k], str) for k in ("imageConfig", "podConfig"))


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
    assert "{username}" in user["serviceAccountName"]  # one principal per user ...
    store = user["extraEnv"]["GKERESUME_STORE"]
    assert store.startswith("gs://") and store.endswith("/{username}")  # ... and one folder
    assert user["nodeSelector"]["cloud.google.com/gke-accelerator"]
    assert any(t["key"] == "nvidia.com/gpu" for t in user["extraTolerations"])
    assert int(user["extraResource"]["limits"]["nvidia.com/gpu"]) >= 1
    assert user["image"]["tag"] not in ("", "latest")


# -- Dockerfile ----------------------------------------------------------------------------------
def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]


def test_dockerfile_lints_clean():
    done = subprocess.run([str(BIN / "hadolint"), "--no-color", str(DEPLOY / "Dockerfile")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_pins_a_cuda_base_and_the_matching_cuda_python():
    steps = dockerfile_instructions()
    args = dict(arg.split("=", 1) for op, arg in steps if op == "ARG" and "=" in arg)
    args = {k: v.strip('"') for k, v in args.items()}
    froms = [arg for op, arg in steps if op == "FROM"]
    assert froms == ["${BASE_IMAGE}:${BASE_TAG}"]
    assert args["BASE_IMAGE"] == "quay.io/jupyter/pytorch-notebook"
    major = re.fullmatch(r"cuda(\d+)-.+", args["BASE_TAG"])
    assert major and "latest" not in args["BASE_TAG"]
    n = int(major.group(1))
    assert re.fullmatch(rf"cuda-python>={n}(\.\d+)*,<{n + 1}", args["CUDA_PYTHON"])
    assert args["GKERESUME_VERSION"] == __version__
    [install] = [arg for op, arg in steps if op == "RUN" and "pip install" in arg]
    assert "--no-cache-dir" in install and '"${CUDA_PYTHON}"' in install
    assert re.search(r"jupyter-gkeresume\[[a-z,]*\bgcs\b[a-z,]*\]", install)
    assert "cuda" in install.split("[", 1)[1].split("]")[0].split(",")
    users = [arg for op, arg in steps if op == "USER"]
    assert users and users[-1] not in ("root", "0")


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
    """``gcloud`` and ``kubectl`` that record their arguments (one JSON list a line)."""
    log = tmp_path / "calls.jsonl"
    for name in ("gcloud", "kubectl"):
        tool = tmp_path / name
        tool.write_text(f"#!{sys.executable}\nimport json, sys\n"
                        f"open({str(log)!r}, 'a').write(json.dumps([{name!r}, *sys.argv[1:]]) + '\\n')\n"
                        "if sys.argv[1:3] == ['projects', 'describe']: print('123456')\n")
        tool.chmod(0o755)
    return {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}, log


@pytest.mark.parametrize(("script", "args", "folder", "subject"), [
    ("grant-user.sh", ["proj", "bkt", "jhub", "alice"], "gs://bkt/hub/alice/",
     "ns/jhub/sa/gkeresume-alice"),
    ("grant-namespace.sh", ["proj", "bkt", "team-a"], "gs://bkt/kf/team-a/",
     "ns/team-a/sa/default-editor"),
])
def test_iam_scripts_grant_one_folder_to_one_principal(tmp_path, script, args, folder, subject):
    env, log = stand_ins(tmp_path)
    done = subprocess.run(["bash", str(DEPLOY / "gcs" / script), *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    [binding] = [c for c in calls if c[1:3] == ["storage", "managed-folders"] and
                 c[3] == "add-iam-policy-binding"]
    member = ("--member=principal://iam.googleapis.com/projects/123456/locations/global/"
              f"workloadIdentityPools/proj.svc.id.goog/subject/{subject}")
    assert binding[4:] == [folder, member, "--role=roles/storage.objectUser"]
    assert ["gcloud", "storage", "managed-folders", "create", folder] in calls
    values = yaml.safe_load(VALUES.read_text())["singleuser"]
    if script == "grant-user.sh":  # the names values.yaml gives each user's pod
        assert values["serviceAccountName"].format(username="alice") == subject.rsplit("/", 1)[1]
        assert values["extraEnv"]["GKERESUME_STORE"].format(username="alice").replace(
            "BUCKET", "bkt") + "/" == folder


# -- the walk-through -----------------------------------------------------------------------------
def test_deploy_doc_walks_through_every_file_in_order():
    doc = (ROOT / "docs" / "deploy.md").read_text()
    shipped = [p for p in DEPLOY.rglob("*") if p.is_file() and p.parent.name != "wheels"]
    for path in shipped:
        assert str(path.relative_to(ROOT)) in doc, f"docs/deploy.md never mentions {path}"
    headings = [line for line in doc.splitlines() if re.match(r"## \d+\. ", line)]
    steps = ["GPU node pool", "Bucket", "Workload Identity", "image", "helm upgrade --install",
             "Kubeflow", "CronJob", "Pause button"]
    assert len(headings) == len(steps)
    assert all(step in heading for step, heading in zip(steps, headings, strict=True)), headings
    assert "Tested here" in doc and "Only on a real cluster" in doc
    assert "delete_grace_period" in doc and "15 s" in doc
    assert "[docs/deploy.md](docs/deploy.md)" in (ROOT / "README.md").read_text()
