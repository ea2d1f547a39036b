"""`jupyter gkeresume doctor` in the pods it is made for: Kubeflow Notebooks v2 against the
Kubernetes stand-in (test_kubeflow_release.py) and fake-gcs-server, the same pod without
credentials (GCS answering 401 as it does to an anonymous caller), and a local pod. The Hub's
case runs against the real Hub in test_hub_release.py.

Upstream facts the checks rely on: the v2 prefix (kubeflow/notebooks ``notebooks-v2``
``workspaces/controller/internal/controller/workspace_controller.go``), SelfSubjectAccessReview
(kubernetes/kubernetes ``pkg/registry/authorization/selfsubjectaccessreview/rest.go``), the
downward API's annotations file (one ``key="value"`` line per annotation, values escaped: kubernetes
``pkg/fieldpath/fieldpath.go`` ``FormatMap``), Istio's ``proxy.istio.io/config``
``terminationDrainDuration`` (5 s by default: istio/istio ``pkg/config/mesh/mesh.go``
``DefaultProxyConfig``; the annotation is YAML or JSON merged into ProxyConfig by
``MergeProxyConfig`` / ``protomarshal.ApplyYAML``, a Duration spelled ``"35s"``; read by
``pilot/cmd/pilot-agent/config/config.go``) and ``sidecar.istio.io/status`` on injected pods
(``pkg/kube/inject/inject.go`` ``SidecarInjectionStatus``; a native sidecar lists istio-proxy
under ``initContainers``: ``pkg/kube/inject/testdata/inject/auth.yaml.injected``).
"""

from __future__ import annotations

import json

import fsspec
import pytest
import yaml
from test_gcs_faults import ANONYMOUS_401
from test_kubeflow_release import DEPLOY, TOKEN, V2_PREFIX, WORKSPACE, FakeKubeApi

from jupyter_gkeresume.cli import main

GOOD_BASE = f"--ServerApp.base_url={V2_PREFIX}"


def doctor(capsys, *args: str) -> tuple[int, dict[str, dict]]:
    code, checks, _ = doctor_report(capsys, *args)
    return code, checks


def doctor_report(capsys, *args: str) -> tuple[int, dict[str, dict], dict]:
    """Exit code, the checks by name, and the whole ``--json`` document."""
    code = main(["doctor", "--json", *args])
    report = json.loads(capsys.readouterr().out)
    checks = report["checks"]
    assert all(set(c) == {"name", "ok", "detail", "warning"} for c in checks)
    return code, {c["name"]: c for c in checks}, report


@pytest.fixture(autouse=True)
def no_running_server(monkeypatch, tmp_path):
    """No server of another test (or session) answers for these pods: a runtime dir of their
    own, no server URL inherited."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.delenv("GKERESUME_SERVER_URL", raising=False)


@pytest.fixture
def pod(monkeypatch, tmp_path):
    """A Kubeflow Notebooks v2 pod: its prefix, the namespace's key Secret, no Istio."""
    secret = tmp_path / "namespace-key"
    secret.write_text("n" * 64)
    for name in ("GKERESUME_SIGNING_KEY", "GKERESUME_SIGNING_KEY_FILE", "GKERESUME_WORKSPACE",
                 "JUPYTERHUB_USER", "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_SERVICE_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NB_PREFIX", V2_PREFIX)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("GKERESUME_KUBE_TOKEN", TOKEN)
    monkeypatch.setenv("GKERESUME_NAMESPACE_KEY_FILE", str(secret))
    monkeypatch.setenv("GKERESUME_SHUTDOWN_BUDGET", "20")  # the WorkspaceKind's: 30 s of grace
    monkeypatch.delenv("GKERESUME_IDLE_TIMEOUT", raising=False)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    podinfo = tmp_path / "podinfo"
    podinfo.mkdir()
    (podinfo / "annotations").write_text('kubeflow-resource-stopped-by="nobody"\n')
    with FakeKubeApi() as kube:
        kube.add("v1beta1", "team-a", "workspaces", "train-1", WORKSPACE)
        # a v2 pod runs as ws-{name}, bound to its WorkspaceKind's clusterRoles only
        kind = yaml.safe_load((DEPLOY / "kubeflow" / "workspacekind-v1beta1.yaml").read_text())
        kube.tokens = {TOKEN: ("team-a", kube.rbac.add_workspace("team-a", "train-1", kind))}
        yield kube, f"--KubeflowRelease.api_host={kube.url}", f"--podinfo-dir={podinfo}"


def on_gcs(monkeypatch, bucket) -> str:
    """gcsfs opens ``gs://`` with the bucket's options (endpoint, anonymous token), as
    ``FSSPEC_GS_*`` would in a fresh process."""
    monkeypatch.setitem(fsspec.config.conf, "gs", dict(bucket.storage_options))
    return f"--store={bucket.url}"


def test_a_v2_pod_with_everything_in_place_passes_every_check(pod, gcs_bucket, capsys,
                                                              monkeypatch):
    kube, api_host, podinfo = pod
    code, checks = doctor(capsys, on_gcs(monkeypatch, gcs_bucket), api_host, podinfo, GOOD_BASE)
    assert code == 0, checks
    assert list(checks) == ["workspace", "store", "credentials", "release", "base_url", "key",
                            "shutdown", "idle"]
    workspace, source = checks["workspace"]["detail"].split(" ", 1)
    assert workspace.startswith("kfws-team-a-train-1.")  # "-" in a part: the digest form
    assert source.startswith(f"(from $NB_PREFIX {V2_PREFIX} (Kubeflow Notebooks v2)")
    assert "writable" in checks["store"]["detail"]
    fs = fsspec.filesystem("gs", **gcs_bucket.storage_options)
    assert fs.find(gcs_bucket.url) == []  # the test object is gone
    assert "backend kubeflow-workspace (auto: platform kubeflow-v2)" in checks["release"]["detail"]
    assert "may patch Workspace team-a/train-1" in checks["release"]["detail"]
    assert kube.get("v1beta1", "team-a", "workspaces", "train-1")["spec"]["paused"] is False
    assert f"derived for {workspace}" in checks["key"]["detail"]
    assert "no Istio sidecar" in checks["shutdown"]["detail"]


def test_what_would_break_is_a_failed_check_and_exit_1(pod, tmp_path, capsys, monkeypatch):
    kube, api_host, podinfo = pod
    kube.tokens = {TOKEN: ("team-a", "nobody")}  # an account no role is bound to
    (tmp_path / "podinfo" / "annotations").write_text(
        'sidecar.istio.io/status="{\\"containers\\":[\\"istio-proxy\\"]}"\n')
    code, checks = doctor(capsys, f"--store={tmp_path / 'store'}", api_host, podinfo)
    assert code == 1
    assert not checks["release"]["ok"] and "may NOT patch" in checks["release"]["detail"]
    assert not checks["base_url"]["ok"] and V2_PREFIX in checks["base_url"]["detail"]
    assert not checks["shutdown"]["ok"]
    assert "Istio sidecar stops 5 s after SIGTERM" in checks["shutdown"]["detail"]
    # the fix is the budget (20 s) plus the server's stop, in the PodDefault's own JSON form
    assert """'{"terminationDrainDuration": "30s"}'""" in checks["shutdown"]["detail"]
    assert checks["store"]["ok"] and checks["credentials"]["detail"].startswith("not needed")

    (tmp_path / "podinfo" / "annotations").write_text(
        'sidecar.istio.io/status="{}"\n'
        'proxy.istio.io/config="terminationDrainDuration: 40s\\n"\n')
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")  # a v2 prefix, yet no way to release
    code, checks = doctor(capsys, f"--store={tmp_path / 'store'}", api_host, podinfo, GOOD_BASE)
    assert checks["shutdown"]["ok"] and "drains 40 s" in checks["shutdown"]["detail"]
    assert not checks["release"]["ok"] and "keeps the pod" in checks["release"]["detail"]


def test_without_credentials_the_store_and_credentials_checks_say_so(pod, gcs_faulty, capsys,
                                                                     monkeypatch):
    _, api_host, podinfo = pod
    gcs_faulty.proxy.inject("status", count=20, status=401, message=ANONYMOUS_401)
    code, checks = doctor(capsys, on_gcs(monkeypatch, gcs_faulty.bucket), api_host, podinfo,
                          GOOD_BASE)
    assert code == 1
    assert not checks["store"]["ok"] and "no credentials" in checks["store"]["detail"]
    assert not checks["credentials"]["ok"]
    assert "anonymous" in checks["credentials"]["detail"]
    # this pod's platform's advice only (a v2 pod: ws-NAME), and no "doctor checks it" in the
    # doctor's own output
    assert "ws-{workspace name}" in checks["credentials"]["detail"]
    assert "singleuser" not in checks["credentials"]["detail"]
    assert "doctor" not in checks["credentials"]["detail"]


def test_a_local_pod_and_the_human_output(monkeypatch, tmp_path, capsys):
    for name in ("NB_PREFIX", "KUBERNETES_SERVICE_HOST", "JUPYTERHUB_USER",
                 "GKERESUME_WORKSPACE", "GKERESUME_SIGNING_KEY_FILE",
                 "GKERESUME_NAMESPACE_KEY_FILE", "JUPYTERHUB_SERVICE_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", "k" * 32)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("GKERESUME_SHUTDOWN_BUDGET", "12")  # a spot profile's budget wins
    code = main(["doctor", f"--store={tmp_path / 'store'}", f"--podinfo-dir={tmp_path}",
                 "--GkeResume.idle_timeout=600"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ok    release      backend none (auto: platform local)" in out
    assert "pause with release after 600 s" in out
    assert "kernel, cell, terminal, document" in out
    assert "budget 12 s" in out


@pytest.fixture
def jp_server_config(tmp_path):
    from fixtures_server import server_config

    return server_config(str(tmp_path / "store"))


async def test_the_lab_can_ask_the_server_for_the_same_checks(api, monkeypatch):
    """GET /gkeresume/api/doctor: the server's own configuration (workspace from its config,
    its store, its backend: the fixture's RecordingRelease, which cannot say whether it may
    release, so that check fails and says so)."""
    monkeypatch.delenv("NB_PREFIX", raising=False)
    code, body = await api.call("GET", "gkeresume/api/doctor")
    assert code == 200, body
    checks = {c["name"]: c for c in body["checks"]}
    assert checks["workspace"]["detail"].startswith("server-ws (from c.GkeResume.workspace_id")
    assert checks["store"]["ok"] and "writable" in checks["store"]["detail"]
    assert not checks["release"]["ok"] and "no may_release" in checks["release"]["detail"]
    assert checks["base_url"]["ok"]
