"""JupyterHub end to end: a real Hub on 127.0.0.1 (dummy authenticator, local-process spawner,
configurable-http-proxy from npm), a single-user server with our extension and the release
backend autodetected as ``jupyterhub``. A kernel holds a tensor; ``POST pause`` -> the Hub
reports the server stopped; start it again -> ``POST resume`` -> the tensor is back, equal.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fixtures_server import SETTLE_TIMEOUT, SIGNING_KEY, _free_port, run_cell_in

pytest.importorskip("torch")
CHP = shutil.which("configurable-http-proxy")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHP is None, reason="configurable-http-proxy (npm) is not installed"),
]
ADMIN_TOKEN = "hub-test-admin-token-0123456789"
SERVER_SCOPES = ["access:servers!server", "users:activity!user", "read:users:name!user",
                 "delete:servers!server"]


class Hub:
    """A Hub whose spawner gives alice's server ``environment`` on top of its own (what z2jh's
    ``singleuser.extraEnv`` does)."""

    def __init__(self, workdir: Path, environment: dict[str, str] | None = None):
        self.workdir = workdir
        self.port, self.hub_port, self.api_port = _free_port(), _free_port(), _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.runtime = workdir / "user-runtime"
        self.store = workdir / "store"
        for sub in ("user-runtime", "user-config", "home"):
            (workdir / sub).mkdir(parents=True)
        (workdir / "user-config" / "jupyter_server_config.json").write_text(json.dumps({
            "ServerApp": {"jpserver_extensions": {"jupyter_gkeresume": True, "jupyterlab": False,
                                                  "jupyter_lsp": False}},
            "GkeResume": {"release_backend": "auto"},
        }))
        singleuser = str(Path(sys.executable).with_name("jupyterhub-singleuser"))
        config = f"""
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {self.port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {self.hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.api_port}"
c.ConfigurableHTTPProxy.command = [{CHP!r}]
c.ConfigurableHTTPProxy.pid_file = {str(workdir / "proxy.pid")!r}
c.JupyterHub.db_url = "sqlite:///{workdir / "hub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(workdir / "cookie_secret")!r}
c.JupyterHub.pid_file = {str(workdir / "hub.pid")!r}
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {{"alice"}}
c.JupyterHub.spawner_class = "simple"
c.Spawner.cmd = [{singleuser!r}]
c.Spawner.args = {["--allow-root"] if os.geteuid() == 0 else []!r}
c.Spawner.notebook_dir = {str(workdir / "home")!r}
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.server_token_scopes = {SERVER_SCOPES!r}
c.Spawner.environment = {{
    "GKERESUME_STORE": {str(self.store)!r},
    "GKERESUME_SIGNING_KEY": {SIGNING_KEY!r},
    "JUPYTER_CONFIG_DIR": {str(workdir / "user-config")!r},
    "JUPYTER_RUNTIME_DIR": {str(self.runtime)!r},
    "OMP_NUM_THREADS": "1",
    **{environment or {}!r},
}}
c.JupyterHub.services = [{{"name": "tester", "api_token": {ADMIN_TOKEN!r}}}]
c.JupyterHub.load_roles = [{{"name": "tester", "services": ["tester"],
    "scopes": ["admin:users", "admin:servers", "access:servers", "read:users",
               "tokens"]}}]
"""
        (workdir / "jupyterhub_config.py").write_text(config)
        self.log_path = workdir / "hub.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", "jupyterhub_config.py"],
                cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                env={k: v for k, v in os.environ.items() if not k.startswith("GKERESUME_")},
            )
        self.wait(lambda: self.call("GET", "hub/api/")[0] == 200, "the Hub is up")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-8000:]

    def call(self, method: str, path: str, body=None) -> tuple[int, object]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}/{path}", data=data, method=method,
                                         headers={"Authorization": f"token {ADMIN_TOKEN}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                code, text = response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            code, text = exc.code, exc.read().decode()
        except OSError:
            return 0, None
        try:
            return code, json.loads(text) if text else None
        except ValueError:
            return code, text

    def wait(self, predicate, what: str):
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log()
            value = predicate()
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"never {what}:\n{self.log()}")

    def server_state(self) -> str:
        """``ready``, ``pending`` or ``stopped``, as the Hub reports alice's default server."""
        code, user = self.call("GET", "hub/api/users/alice")
        assert code == 200, user
        server = user["servers"].get("")
        if not server:
            return "stopped"
        return "ready" if server["ready"] else "pending"

    def start_server(self) -> None:
        code, body = self.call("POST", "hub/api/users/alice/server")
        assert code in (201, 202), (code, body)
        self.wait(lambda: self.server_state() == "ready", "alice's server ready")

    def gk(self, method: str, path: str, body=None):
        return self.call(method, f"user/alice/{path}", body)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.call("DELETE", "hub/api/users/alice/server")
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()


def _running(hub: Hub):
    hub.start()
    try:
        yield hub
    finally:
        hub.stop()


@pytest.fixture
def hub(tmp_path):
    """A Hub of its own, for a test that starts and stops alice's server."""
    yield from _running(Hub(tmp_path))


@pytest.fixture(scope="module")
def token_hub(tmp_path_factory):
    """One Hub for the tests that only ask it about tokens: alice's server never starts, and
    each test makes its own token (and checks the server is still stopped)."""
    yield from _running(Hub(tmp_path_factory.mktemp("token-hub")))


def test_an_idle_server_without_kernels_is_stopped_through_its_hub(tmp_path):
    """Issue 29.3: a server with no kernel (a tab open, nobody active) kept its pod and GPU
    forever: the idle pause needed a kernel. With ``GKERESUME_IDLE_TIMEOUT`` in the spawner's
    environment (z2jh ``singleuser.extraEnv``) and no config file saying so, the server asks its
    Hub to stop it once idle; the Hub reports it stopped, and nothing was paused."""
    for _ in _running(hub := Hub(tmp_path, {"GKERESUME_IDLE_TIMEOUT": "5"})):
        code, body = hub.call("POST", "hub/api/users/alice/server")
        assert code in (201, 202), (code, body)

        def released() -> bool:
            said = "with no kernel: releasing the pod" in hub.log_path.read_text(errors="replace")
            return said and hub.server_state() == "stopped"

        hub.wait(released, "stopped by its idle release")
        assert not (hub.store / "hub-alice" / "records" / "paused.json").exists()


def test_pause_stops_the_hub_server_and_resume_brings_the_tensor_back(hub):
    hub.start_server()
    code, session = hub.gk("POST", "api/sessions", {
        "path": "train.ipynb", "name": "train.ipynb", "type": "notebook",
        "kernel": {"name": "python3"}})
    assert code == 201, session
    kid = session["kernel"]["id"]
    run_cell_in(hub.runtime / f"kernel-{kid}.json",
                "import torch\ntorch.manual_seed(0)\nt = torch.randn(64, 32)\nt_copy = t.clone()")
    status = hub.wait(lambda: (s := hub.gk("GET", "gkeresume/api/status")[1])["kernels"][0][
        "execution_state"] == "idle" and s, "the server sees the kernel idle")
    assert status["release_backend"] == "jupyterhub", status
    assert status["workspace"] == "hub-alice"

    code, body = hub.gk("POST", "gkeresume/api/pause", {})
    assert code == 202, body  # answered before the Hub stops this very server
    hub.wait(lambda: hub.server_state() == "stopped", "the server stopped by the pause")
    record = json.loads((hub.store / "hub-alice" / "records" / "paused.json").read_text())
    assert record["release_backend"] == "jupyterhub" and record["reason"] == "user"
    assert record["kernels"][0]["notebook"] == "train.ipynb"

    hub.start_server()  # a fresh server (on Kubernetes: a fresh pod) for the same user
    code, status = hub.gk("GET", "gkeresume/api/status")
    assert code == 200 and status["state"] == "paused", status
    code, body = hub.gk("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    status = hub.wait(lambda: (s := hub.gk("GET", "gkeresume/api/status")[1])["operation"] is None
                      and s, "the resume finished")
    assert status["state"] == "ready", status
    [kernel] = status["kernels"]
    assert kernel["kernel_id"] != kid and kernel["notebook"] == "train.ipynb"
    assert {"t", "t_copy"} <= set(kernel["result"]["restored"]), kernel["result"]
    out = run_cell_in(hub.runtime / f"kernel-{kernel['kernel_id']}.json",
                      "torch.manual_seed(0)\nprint(torch.equal(t, torch.randn(64, 32)), "
                      "torch.equal(t, t_copy), t is not t_copy)")
    assert out == "True True True\n"


def test_a_token_without_delete_scope_gets_the_admin_advice(token_hub, monkeypatch):
    import asyncio

    from jupyter_gkeresume.errors import ReleaseError
    from jupyter_gkeresume.release import JupyterHubRelease

    code, token = token_hub.call("POST", "hub/api/users/alice/tokens",
                           {"scopes": ["read:users:name!user=alice"], "note": "no delete"})
    assert code == 201, token
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", token["token"])
    backend = JupyterHubRelease(api_url=f"{token_hub.url}/hub/api", user="alice")
    with pytest.raises(ReleaseError, match="server_token_scopes") as refused:
        asyncio.run(backend.release())
    assert "requires any of [delete:servers]" in str(refused.value)  # the Hub's own words
    assert token_hub.server_state() == "stopped"


def test_a_token_that_cannot_see_the_server_gets_the_404_explained(token_hub, monkeypatch):
    """A token whose delete scope is filtered to another server (``!server=alice/other``:
    what ``server_token_scopes`` becomes when a scope is narrowed) gets 404, not 403, for this
    one: JupyterHub hides a resource the token may not read. The error says so."""
    import asyncio

    from jupyter_gkeresume.errors import ReleaseError
    from jupyter_gkeresume.release import JupyterHubRelease

    code, token = token_hub.call("POST", "hub/api/users/alice/tokens",
                           {"scopes": ["delete:servers!server=alice/other"], "note": "another server"})
    assert code == 201, token
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", token["token"])
    backend = JupyterHubRelease(api_url=f"{token_hub.url}/hub/api", user="alice")
    with pytest.raises(ReleaseError) as refused:
        asyncio.run(backend.release())
    message = str(refused.value)
    assert "404" in message and "hides what a token may not read" in message, message


def test_the_403_advice_names_the_z2jh_key_and_the_restart():
    from jupyter_gkeresume.release.jupyterhub import SCOPES_ADVICE

    assert "hub.config.KubeSpawner.server_token_scopes" in SCOPES_ADVICE
    assert "restart this server" in SCOPES_ADVICE


def test_an_expired_token_is_reported_as_the_hub_says_not_as_missing_scopes(token_hub, monkeypatch):
    """The Hub answers 403 for a token it does not accept as well as for missing scopes
    (jupyterhub ``scopes.py`` ``needs_scope``: "Missing or invalid credentials." when nobody is
    authenticated, "Action is not authorized with current scopes; requires any of [...]"
    otherwise)."""
    import asyncio

    from jupyter_gkeresume.errors import ReleaseError
    from jupyter_gkeresume.release import JupyterHubRelease

    code, token = token_hub.call("POST", "hub/api/users/alice/tokens",
                           {"scopes": ["delete:servers!user=alice"], "expires_in": 1})
    assert code == 201, token

    def expired() -> bool:
        request = urllib.request.Request(f"{token_hub.url}/hub/api/user",
                                         headers={"Authorization": f"token {token['token']}"})
        try:
            urllib.request.urlopen(request, timeout=30).close()
        except urllib.error.HTTPError as exc:
            return exc.code == 403
        return False

    token_hub.wait(expired, "the token expired")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", token["token"])
    backend = JupyterHubRelease(api_url=f"{token_hub.url}/hub/api", user="alice")
    with pytest.raises(ReleaseError) as refused:
        asyncio.run(backend.release())
    message = str(refused.value)
    assert "403" in message and "server_token_scopes" not in message, message
    assert "credentials" in message.lower() or "expired" in message.lower(), message


def test_doctor_reads_the_hub_tokens_scopes(token_hub, monkeypatch, tmp_path, capsys):
    """``release`` asks the Hub which scopes this token has (``GET /hub/api/user``, whose model
    lists the requesting token's expanded scopes: jupyterhub ``apihandlers/users.py``
    ``SelfAPIHandler``: ``model["scopes"]``), and stops nothing."""
    from jupyter_gkeresume.cli import main

    for name in ("NB_PREFIX", "KUBERNETES_SERVICE_HOST", "GKERESUME_WORKSPACE",
                 "GKERESUME_SIGNING_KEY_FILE", "GKERESUME_NAMESPACE_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    monkeypatch.setenv("JUPYTERHUB_API_URL", f"{token_hub.url}/hub/api")
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/alice/")
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", "k" * 32)

    def release_check(scopes: list[str]) -> tuple[int, dict]:
        code, token = token_hub.call("POST", "hub/api/users/alice/tokens", {"scopes": scopes})
        assert code == 201, token
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", token["token"])
        code = main(["doctor", "--json", f"--store={tmp_path / 'store'}",
                     f"--podinfo-dir={tmp_path}"])
        checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
        assert checks["workspace"]["detail"].startswith("hub-alice (from $JUPYTERHUB_USER")
        assert checks["base_url"]["ok"], checks["base_url"]
        return code, checks["release"]

    code, release = release_check(["delete:servers!user=alice", "read:users:name!user=alice"])
    assert code == 0 and release["ok"], release
    assert "backend jupyterhub" in release["detail"]
    assert "delete:servers!user=alice" in release["detail"]
    code, release = release_check(["read:users:name!user=alice"])
    assert code == 1 and not release["ok"] and "server_token_scopes" in release["detail"]
    assert token_hub.server_state() == "stopped"
