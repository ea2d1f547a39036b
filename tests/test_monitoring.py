"""deploy/monitoring: the PodMonitors, the PrometheusRule and the Grafana dashboard, against the
Prometheus Operator's CRDs, the real promtool and Prometheus (Debian's ``prometheus`` package,
installed by scripts/install.sh) and real jupyter servers' ``/metrics``.

- The resources match the operator's served schemas (``tests/data/crds/podmonitors.v1.json``,
  ``prometheusrules.v1.json``, copied from prometheus-operator/prometheus-operator
  ``example/prometheus-operator-crd/``).
- The rules pass ``promtool check rules`` and their unit tests (``deploy/monitoring/
  rules-test.yaml``) pass ``promtool test rules``; every dashboard query parses as PromQL (each
  checked by promtool as a recording rule, Grafana's ``$__rate_interval``/``$__range``/
  ``$namespace`` filled in).
- Every ``gkeresume_*`` series a rule or a panel reads is one a real server exports: the names
  are parsed from a real server's ``/metrics`` (its ``# TYPE`` lines, counters as ``_total``,
  histograms as ``_bucket``/``_sum``/``_count``), never from metrics.py.
- Each PodMonitor's relabelings, run by a real Prometheus (file-based discovery giving each
  target the ``__meta_kubernetes_*`` labels the platform's pod would have), reach a real server
  serving under that platform's base URL: Kubeflow v1 ``/notebook/NS/NAME/`` and v2
  ``/workspace/connect/NS/NAME/PORT_ID/`` without a token (as Kubeflow's images serve), Zero to
  JupyterHub ``/user/NAME/`` with a token for everything but ``/metrics`` (deploy/monitoring/
  z2jh-values.yaml). The labels come from the upstream controllers named in podmonitor.yaml.
  What the operator itself adds before them (its keep rules on the selector and port, the
  ``namespace``/``pod`` labels) is not run here: only a real cluster proves those.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from fixtures_server import _free_port
from kube_rules import check_object

MONITORING = Path(__file__).resolve().parents[1] / "deploy" / "monitoring"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1d", "$namespace": ".*"}
METRIC_RE = re.compile(r"\bgkeresume_[a-z_]+\b")


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((MONITORING / name).read_text()) if d]


def pod_monitors() -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in documents("podmonitor.yaml")}


def rule_groups() -> list[dict]:
    [rule] = documents("prometheusrule.yaml")
    return rule["spec"]["groups"]


def dashboard_queries() -> list[str]:
    """Every panel's PromQL, and the series the ``namespace`` variable lists its values from."""
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    variables = [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    series = [re.fullmatch(r"label_values\((\w+), namespace\)", v).group(1) for v in variables]
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]
            ] + series


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    assert PROMTOOL, "promtool missing: scripts/install.sh installs Debian's prometheus package"
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_resources_match_the_operators_schemas():
    monitors = pod_monitors()
    assert set(monitors) == {"gkeresume-kubeflow-v1", "gkeresume-kubeflow-v2",
                             "gkeresume-jupyterhub"}
    for resource in [*monitors.values(), *documents("prometheusrule.yaml")]:
        check_object(resource)


def test_the_rules_pass_promtool_and_their_unit_tests(tmp_path):
    (tmp_path / "gkeresume-rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    shutil.copy(MONITORING / "rules-test.yaml", tmp_path / "rules-test.yaml")
    checked = promtool("check", "rules", "gkeresume-rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 7 rules found" in checked.stdout, checked.stdout
    tested = promtool("test", "rules", "rules-test.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {r["alert"] for g in rule_groups() for r in g["rules"] if "alert" in r}
    tests = (MONITORING / "rules-test.yaml").read_text()
    assert all(f"alertname: {a}" in tests for a in alerts)


def test_every_dashboard_query_parses(tmp_path):
    queries = dashboard_queries()
    assert len(queries) >= 10
    rules = []
    for i, query in enumerate(queries):
        for variable, value in GRAFANA_VARIABLES.items():
            query = query.replace(variable, value)
        assert "$" not in query, query
        rules.append({"record": f"dashboard:query{i}", "expr": query})
    (tmp_path / "queries.yaml").write_text(yaml.safe_dump({"groups": [
        {"name": "dashboard", "rules": rules}]}))
    checked = promtool("check", "rules", "queries.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def exported_series(text: str) -> set[str]:
    """The series names a Prometheus stores from this exposition, from its ``# TYPE`` lines."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names |= ({f"{name}{s}" for s in ("_bucket", "_sum", "_count")}
                      if kind == "histogram" else {name})
    return names


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        return response.read().decode()


# -- real servers, scraped by a real Prometheus through the PodMonitors' relabelings --------------
PLATFORMS = {
    # PodMonitor: (base URL of the server, the __meta labels its pod has, a token?)
    "gkeresume-kubeflow-v1": ("/notebook/team-a/train-1/", {
        "__meta_kubernetes_namespace": "team-a",
        "__meta_kubernetes_pod_label_notebook_name": "train-1"}, False),
    "gkeresume-kubeflow-v2": ("/workspace/connect/team-a/train-2/jupyterlab/", {
        "__meta_kubernetes_namespace": "team-a",
        "__meta_kubernetes_pod_label_notebooks_kubeflow_org_workspace_name": "train-2"}, False),
    "gkeresume-jupyterhub": ("/user/alice/", {
        "__meta_kubernetes_namespace": "jhub",
        "__meta_kubernetes_pod_annotation_hub_jupyter_org_username": "alice",
        "__meta_kubernetes_pod_annotation_hub_jupyter_org_servername": ""}, True),
}


def snake(relabeling: dict) -> dict:
    """A PodMonitor relabeling as Prometheus' relabel_config (what the operator writes)."""
    return {re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), k): v
            for k, v in relabeling.items()}


@pytest.fixture
def scraped(server_process, tmp_path):
    """One real server per platform, a real Prometheus scraping each through its PodMonitor's
    relabelings every second; yields ``(servers, prometheus URL)`` once every target was
    scraped."""
    assert PROMETHEUS, "prometheus missing: scripts/install.sh installs Debian's package"
    overlay = yaml.safe_load((MONITORING / "z2jh-values.yaml").read_text())
    z2jh = overlay["singleuser"]["extraFiles"]["gkeresume-config"]["data"]
    servers, jobs = {}, []
    for name, (base_url, meta, token) in PLATFORMS.items():
        config = {"GkeResume": {"store_url": str(tmp_path / "store"), "workspace_id": name,
                                "release_backend": "none"},
                  "ServerApp": {"base_url": base_url, **(z2jh["ServerApp"] if token else {})}}
        servers[name] = server = server_process(
            name, config, args=[] if token else ["--IdentityProvider.token="])
        (tmp_path / f"{name}.json").write_text(json.dumps([
            {"targets": [f"127.0.0.1:{server.port}"], "labels": meta}]))
        [endpoint] = pod_monitors()[name]["spec"]["podMetricsEndpoints"]
        jobs.append({"job_name": name, "scrape_interval": "1s", "scrape_timeout": "1s",
                     "file_sd_configs": [{"files": [str(tmp_path / f"{name}.json")]}],
                     "relabel_configs": [snake(r) for r in endpoint["relabelings"]]})
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": jobs}))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "prometheus.log", "wb") as log:
        process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120  # a safety net: Prometheus starts in seconds
        while True:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            try:
                targets = json.loads(scrape(f"{url}/api/v1/targets"))["data"]["activeTargets"]
                if len(targets) == len(PLATFORMS) and all(t["lastScrape"][:4] != "0001"
                                                          for t in targets):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()[-3000:]
            time.sleep(0.5)
        yield servers, url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_each_podmonitor_scrapes_its_platforms_server_and_every_query_names_its_metrics(scraped):
    servers, prometheus = scraped
    targets = json.loads(scrape(f"{prometheus}/api/v1/targets"))["data"]["activeTargets"]
    by_job = {t["labels"]["job"]: t for t in targets}
    for name, (base_url, _, _) in PLATFORMS.items():
        target = by_job[name]
        assert target["scrapeUrl"] == f"{servers[name].url}{base_url}metrics", target
        assert target["health"] == "up", target
    answer = json.loads(scrape(f"{prometheus}/api/v1/query?query="
                               "gkeresume_accelerator_seconds_released_total"))
    seen = {(r["metric"]["platform"], r["metric"]["workspace"])
            for r in answer["data"]["result"]}
    assert seen == {("kubeflow-v1", "train-1"), ("kubeflow-v2", "train-2"),
                    ("jupyterhub", "alice")}, answer

    hub = servers["gkeresume-jupyterhub"]  # its metrics are open, nothing else is
    try:
        scrape(f"{hub.url}/user/alice/api/kernels")
        raise AssertionError("the z2jh overlay opened more than /metrics")
    except urllib.error.HTTPError as exc:
        assert exc.code == 403

    text = scrape(f"{hub.url}/user/alice/metrics")
    exported = exported_series(text)
    # the namespace variable lists its values from a series every server exports from its start
    assert re.search(r"^gkeresume_accelerator_seconds_released_total ", text, re.M), text
    used = {m for q in dashboard_queries() for m in METRIC_RE.findall(q)}
    used |= {m for g in rule_groups() for r in g["rules"] for m in METRIC_RE.findall(r["expr"])}
    assert len(used) >= 6 and used <= exported, used - exported
