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
import os
import socket
import subprocess
import sys
import time

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
        kind = yaml.safe_load((DEPLOY / "kubeflow" / "base" / "workspacekind-v1beta1.yaml").read_text())
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


# -- issue 29.5: what the doctor gets wrong on correct setups -----------------------------------
def annotations_file(podinfo, annotations: dict[str, str]) -> None:
    """The downward API's file: ``key="value"`` lines, the value quoted as Go's ``%q`` (for
    these ASCII values, what ``json.dumps`` writes)."""
    (podinfo / "annotations").write_text(
        "".join(f"{key}={json.dumps(value)}\n" for key, value in annotations.items()))


@pytest.fixture
def hub_pod(monkeypatch, tmp_path):
    """A Zero to JupyterHub user pod (its variables, no Hub API token: the release check is not
    what these tests look at) and the documented values' seconds."""
    for name in ("NB_PREFIX", "KUBERNETES_SERVICE_HOST", "GKERESUME_WORKSPACE",
                 "GKERESUME_SHUTDOWN_BUDGET", "GKERESUME_IDLE_TIMEOUT", "JUPYTERHUB_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/alice/")
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", "k" * 32)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    values = yaml.safe_load((DEPLOY / "z2jh" / "values.yaml").read_text())
    settings = values["singleuser"]["extraFiles"]["gkeresume-config"]["data"]["GkeResume"]
    grace = values["hub"]["config"]["KubeSpawner"]["delete_grace_period"]
    # the idle timeout is the pod's GKERESUME_IDLE_TIMEOUT (singleuser.extraEnv), as deployed
    monkeypatch.setenv("GKERESUME_IDLE_TIMEOUT", values["singleuser"]["extraEnv"]["GKERESUME_IDLE_TIMEOUT"])
    return [f"--store={tmp_path / 'store'}", f"--podinfo-dir={tmp_path}",
            f"--GkeResume.shutdown_checkpoint_timeout={settings['shutdown_checkpoint_timeout']}"], grace


def test_the_documented_z2jh_values_pass_the_shutdown_check(hub_pod, capsys):
    """deploy/z2jh/values.yaml: a 45 s budget, delete_grace_period 60, a 90 s pod grace. The
    pod sees neither grace (KubeSpawner's delete_grace_period: jupyterhub/kubespawner
    ``kubespawner/spawner.py``; the downward API has no terminationGracePeriodSeconds), so the
    doctor says what must hold instead of failing; a grace given to it is checked."""
    args, grace = hub_pod
    code, checks = doctor(capsys, *args)
    shutdown = checks["shutdown"]
    assert shutdown["ok"] and shutdown["warning"], shutdown  # it FAILed before
    assert "grace of at least 55 s" in shutdown["detail"]
    assert "delete_grace_period" in shutdown["detail"]

    code, checks = doctor(capsys, *args, f"--DoctorApp.grace_seconds={grace}")
    assert checks["shutdown"]["ok"] and not checks["shutdown"]["warning"], checks["shutdown"]
    code, checks = doctor(capsys, *args, "--grace-seconds=50")
    assert not checks["shutdown"]["ok"] and code == 1
    assert "set GKERESUME_SHUTDOWN_BUDGET to 40 or less" in checks["shutdown"]["detail"]


def test_notebooks_v2_pods_get_30_s_so_the_default_budget_fails(pod, tmp_path, capsys,
                                                               monkeypatch):
    """A WorkspaceKind has no grace-period field (kubeflow/notebooks notebooks-v2
    ``workspaces/controller/api/v1beta1/workspacekind_types.go``): 30 s, known. The default
    25 s budget plus the server's stop does not fit; the WorkspaceKind's 20 does."""
    _, api_host, podinfo = pod
    store = f"--store={tmp_path / 'store'}"
    _, checks = doctor(capsys, store, api_host, podinfo, GOOD_BASE)
    assert checks["shutdown"]["ok"] and "grace 30 s" in checks["shutdown"]["detail"]
    monkeypatch.delenv("GKERESUME_SHUTDOWN_BUDGET")
    _, checks = doctor(capsys, store, api_host, podinfo, GOOD_BASE)
    assert not checks["shutdown"]["ok"], checks["shutdown"]
    assert "set GKERESUME_SHUTDOWN_BUDGET to 20 or less" in checks["shutdown"]["detail"]


def test_the_sidecar_drain_is_read_as_pilot_agent_reads_it(pod, tmp_path, capsys, monkeypatch):
    """The PodDefault's own annotation is JSON (``{"terminationDrainDuration": "35s"}``): it was
    read as the 5 s default. A native sidecar (istio-proxy among the status' initContainers,
    as in istio/istio ``pkg/kube/inject/testdata/inject/auth.yaml.injected``) outlives the
    notebook: no drain to fear. An annotation that cannot be read is said, not guessed."""
    _, api_host, podinfo = pod
    args = (f"--store={tmp_path / 'store'}", api_host, podinfo, GOOD_BASE)
    poddefault_file = DEPLOY / "kubeflow" / "overlays" / "namespace" / "poddefault.yaml"
    poddefault = yaml.safe_load(poddefault_file.read_text())
    config = poddefault["spec"]["annotations"]["proxy.istio.io/config"]
    classic = json.dumps({"initContainers": ["istio-init"], "containers": ["istio-proxy"]})
    annotations_file(tmp_path / "podinfo", {"sidecar.istio.io/status": classic,
                                            "proxy.istio.io/config": config})
    _, checks = doctor(capsys, *args)
    assert checks["shutdown"]["ok"], checks["shutdown"]
    assert "Istio sidecar drains 35 s after SIGTERM" in checks["shutdown"]["detail"]

    monkeypatch.setenv("GKERESUME_SHUTDOWN_BUDGET", "40")  # longer than the drain
    monkeypatch.setenv("NB_PREFIX", "/notebook/team-a/train-1")  # v1: its grace is not known
    _, checks = doctor(capsys, f"--store={tmp_path / 'store'}", api_host, podinfo)
    assert not checks["shutdown"]["ok"]
    assert """'{"terminationDrainDuration": "50s"}'""" in checks["shutdown"]["detail"]

    native = ('{"initContainers":["istio-init","istio-proxy"],"containers":null,"volumes":'
              '["istio-envoy","istio-data","istio-podinfo","istio-token","istiod-ca-cert"],'
              '"imagePullSecrets":null,"revision":"default"}')
    annotations_file(tmp_path / "podinfo", {"sidecar.istio.io/status": native})
    _, checks = doctor(capsys, f"--store={tmp_path / 'store'}", api_host, podinfo)
    assert checks["shutdown"]["ok"] and "native sidecar" in checks["shutdown"]["detail"]

    annotations_file(tmp_path / "podinfo", {"sidecar.istio.io/status": classic,
                                            "proxy.istio.io/config": "terminationDrainDuration: soon"})
    _, checks = doctor(capsys, f"--store={tmp_path / 'store'}", api_host, podinfo)
    assert "cannot read proxy.istio.io/config" in checks["shutdown"]["detail"]


def test_json_carries_the_structured_facts_and_the_idle_timeout_variable(pod, tmp_path, capsys,
                                                                         monkeypatch):
    """``--json``: backend, workspace_id, key_id, budget_s, idle_timeout_s beside the checks;
    ``GKERESUME_IDLE_TIMEOUT`` sets the idle timeout as ``GKERESUME_SHUTDOWN_BUDGET`` sets the
    budget; with none, nothing in the server gives the GPU back: a warning."""
    _, api_host, podinfo = pod
    args = (f"--store={tmp_path / 'store'}", api_host, podinfo, GOOD_BASE)
    _, checks, report = doctor_report(capsys, *args)
    assert report["source"].startswith("the configuration files only")
    assert report["backend"] == "kubeflow-workspace"
    assert report["workspace_id"] == checks["workspace"]["detail"].split(" ")[0]
    assert checks["key"]["detail"].startswith(f"id {report['key_id']},")
    assert (report["budget_s"], report["idle_timeout_s"]) == (20, 0)
    idle = checks["idle"]
    assert idle["ok"] and idle["warning"] and "ever gives the GPU back" in idle["detail"]
    assert "GKERESUME_IDLE_TIMEOUT" in idle["detail"]

    monkeypatch.setenv("GKERESUME_IDLE_TIMEOUT", "1800")
    _, checks, report = doctor_report(capsys, *args)
    assert report["idle_timeout_s"] == 1800 and not checks["idle"]["warning"]
    assert "no kernel open the pod is released" in checks["idle"]["detail"]
    for bad in ("30m", "12.5", "-1"):
        monkeypatch.setenv("GKERESUME_IDLE_TIMEOUT", bad)
        assert main(["doctor", *args]) == 2
        assert "GKERESUME_IDLE_TIMEOUT" in capsys.readouterr().err


def test_a_pod_without_its_service_account_token_is_told_so(pod, tmp_path, capsys, monkeypatch):
    """In a pod (KUBERNETES_SERVICE_HOST) with no token mounted, the kubernetes client's
    in-cluster config fails and it used to fall back to a kubeconfig that no pod has: "Invalid
    kube-config file"."""
    _, _, podinfo = pod
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    _, checks = doctor(capsys, f"--store={tmp_path / 'store'}", podinfo, GOOD_BASE)
    release = checks["release"]
    assert not release["ok"]
    assert "no service-account token at /var/run/secrets/kubernetes.io/serviceaccount/token" in (
        release["detail"]), release
    assert "kube-config" not in release["detail"]


def test_an_unreachable_store_fails_within_its_timeout_and_each_check_prints_when_done(
        tmp_path):
    """A ``gs://`` store whose endpoint accepts connections and never answers (a black hole,
    as a firewall that drops packets looks to the client): the doctor printed nothing for
    123-128 s, then everything. Now the store check fails after ``store_timeout``, nothing else
    waits on the store, and every check is printed as soon as it ends (a real
    ``jupyter-gkeresume`` process, its stdout read line by line as it comes)."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)  # connections complete in the backlog; nothing ever reads them
        env = {**os.environ, "FSSPEC_GS_ENDPOINT_URL": f"http://127.0.0.1:{hole.getsockname()[1]}",
               "FSSPEC_GS_TOKEN": "anon", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
               "GKERESUME_SIGNING_KEY": "k" * 32, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
               "PYTHONUNBUFFERED": "1"}
        for name in ("NB_PREFIX", "KUBERNETES_SERVICE_HOST", "JUPYTERHUB_USER",
                     "GKERESUME_WORKSPACE", "GKERESUME_SIGNING_KEY_FILE"):
            env.pop(name, None)
        start = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-c", "import sys; from jupyter_gkeresume.cli import main; "
             "sys.exit(main())", "doctor", "--store=gs://bucket/prefix", "--no-server",
             "--CommandApp.store_timeout=3", f"--podinfo-dir={tmp_path}"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen: dict[str, float] = {}
        try:
            for line in process.stdout:  # a 120 s safety net below, the old code's time
                words = line.split()
                seen[words[1] if len(words) > 1 and words[0] != "source:" else "source"] = (
                    time.monotonic() - start)
                assert time.monotonic() - start < 90, seen
            code = process.wait(timeout=30)
        finally:
            process.kill()
    assert code == 1, process.stderr.read()
    assert list(seen) == ["source", "workspace", "store", "credentials", "release", "base_url",
                          "key", "shutdown", "idle"], seen
    # the workspace line came out before the store's 3 s were up, the store after them
    assert seen["workspace"] + 2 < seen["store"], seen
    assert seen["idle"] - seen["store"] < 20, seen  # nothing after the store waited on it


def test_the_doctor_reports_what_the_running_server_runs_with(server_process, tmp_path, capsys,
                                                               monkeypatch):
    """Issue 27.8: a server started with ``--GkeResume.idle_timeout=60`` on its command line,
    which no configuration file says; the doctor said "no idle pause (idle_timeout 0)". It asks
    that server (``GET gkeresume/api/doctor``, found through the server's runtime file, with
    its token) and says so; ``--no-server`` and a stopped server give the configuration files'
    view, said as such."""
    for name in ("NB_PREFIX", "KUBERNETES_SERVICE_HOST", "JUPYTERHUB_USER",
                 "GKERESUME_SHUTDOWN_BUDGET", "GKERESUME_IDLE_TIMEOUT", "GKERESUME_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)
    store = tmp_path / "store"
    config = {"GkeResume": {"store_url": str(store), "workspace_id": "doctor-ws",
                            "release_backend": "none"}}
    server = server_process("doctored", config, args=["--GkeResume.idle_timeout=60"])
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(server.workdir / "runtime"))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(server.workdir / "config"))  # same files

    code, checks, report = doctor_report(capsys)
    assert code == 0, checks
    assert report["source"] == f"the running server at {server.url}/"
    assert report["idle_timeout_s"] == 60 and report["budget_s"] == 25
    assert (report["backend"], report["workspace_id"]) == ("none", "doctor-ws")
    assert "pause with release after 60 s" in checks["idle"]["detail"]
    assert checks["store"]["ok"] and str(store) in checks["store"]["detail"]
    main(["doctor"])  # the human form says where it came from
    assert capsys.readouterr().out.startswith(f"source: the running server at {server.url}/\n")

    code, checks, report = doctor_report(capsys, "--no-server")
    assert report["source"] == "the configuration files only (--no-server)"
    assert report["idle_timeout_s"] == 0 and "no idle pause" in checks["idle"]["detail"]
    # a configuration given on the command line is what is asked about, not the server's
    code, checks, report = doctor_report(capsys, f"--store={tmp_path / 'other'}")
    assert report["source"] == ("the configuration files only (the command line sets "
                                "GkeResume.store_url)"), report["source"]
    assert str(tmp_path / "other") in checks["store"]["detail"]

    assert server.stop() == 0
    code, checks, report = doctor_report(capsys)
    assert report["source"] == ("the configuration files only (no running jupyter server "
                                "found)"), report["source"]
