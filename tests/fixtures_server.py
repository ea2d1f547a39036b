"""Fixtures for the server extension tests: a real in-process jupyter_server (pytest_jupyter)
with real kernels, and helpers to drive it over its REST API.

A test module opts in by defining ``jp_server_config`` from ``server_config(...)`` (a module
fixture overrides pytest_jupyter's). ``RecordingRelease`` is a release backend that records each
call (and can be told to fail): the real backends are exercised by test_hub_* and
test_kubeflow_*; here the test needs to know whether and when the orchestrator released.
"""

from __future__ import annotations

import asyncio
import json
import os
import posixpath
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gkeresume.errors import ReleaseError
from jupyter_gkeresume.kernel_client import own_client
from jupyter_gkeresume.release import ReleaseBackend

pytest_plugins = ["pytest_jupyter.jupyter_server"]

SIGNING_KEY = "server-test-key-" + "1" * 32
SETTLE_TIMEOUT = 240.0  # a safety net against hangs, not a speed assertion


class RecordingRelease(ReleaseBackend):
    """Records each release; ``fail_with`` makes the next ones raise ``ReleaseError``."""

    name = "recording"
    calls: list[float] = []
    fail_with: str | None = None

    async def release(self) -> None:
        RecordingRelease.calls.append(time.time())
        if RecordingRelease.fail_with:
            raise ReleaseError(RecordingRelease.fail_with)


def server_config(store_url: str, **gkeresume: Any) -> dict[str, Any]:
    """jupyter_server config enabling the extension with ``RecordingRelease`` on ``store_url``."""
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gkeresume": True}},
        "GkeResume": {"store_url": store_url, "workspace_id": "server-ws",
                      "release_backend": "fixtures_server.RecordingRelease", **gkeresume},
    }


@pytest.fixture
def gk_env(monkeypatch):
    """Environment shared by the server and its kernels (the signing key, few threads)."""
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", SIGNING_KEY)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("GKERESUME_SERVER_URL", raising=False)
    RecordingRelease.calls = []
    RecordingRelease.fail_with = None


class Api:
    """The REST API of the test server: ``call`` returns ``(status, json_or_None)``."""

    def __init__(self, fetch, serverapp):
        self.fetch = fetch
        self.serverapp = serverapp

    async def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                   headers: dict[str, str] | None = None) -> tuple[int, Any]:
        kwargs: dict[str, Any] = {"method": method, "raise_error": False}
        if headers is not None:
            kwargs["headers"] = headers
        if method in ("POST", "PUT", "PATCH"):
            kwargs["body"] = raw if raw is not None else json.dumps(body or {})
        try:
            response = await self.fetch(*path.split("/"), **kwargs)
        except HTTPClientError as exc:  # raise_error=False still raises for some statuses
            response = exc.response
        text = response.body.decode() if response.body else ""
        return response.code, json.loads(text) if text else None

    async def status(self) -> dict[str, Any]:
        code, body = await self.call("GET", "gkeresume/api/status")
        assert code == 200, body
        return body

    async def settle(self) -> dict[str, Any]:
        """Poll status until no operation is in flight; return the last status."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            status = await self.status()
            if status["operation"] is None:
                return status
            await asyncio.sleep(0.1)
        raise AssertionError(f"operation never finished: {status}")

    async def pause(self, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """``POST gkeresume/api/pause`` with ``options``, which must be accepted (202); return
        the status once the pause has settled."""
        code, body = await self.call("POST", "gkeresume/api/pause", options or {})
        assert code == 202, body
        return await self.settle()

    async def new_session(self, path: str) -> str:
        """A notebook session (real kernel) for ``path``; returns the kernel id."""
        code, body = await self.call("POST", "api/sessions", {
            "path": path, "name": path, "type": "notebook", "kernel": {"name": "python3"},
        })
        assert code == 201, body
        return body["kernel"]["id"]

    async def lab_session(self, path: str) -> tuple[str, str]:
        """A notebook session asked for as JupyterLab asks (``@jupyterlab/apputils``
        ``SessionContext._changeKernel``): ``POST`` with a UUID path in the notebook's directory
        and the file's name as ``name`` (``docregistry`` ``Context``: ``PathExt.basename``), then
        the session renamed to the notebook's path (``PATCH``). Returns (session id, kernel id)."""
        directory, name = posixpath.split(path)
        code, body = await self.call("POST", "api/sessions", {
            "path": posixpath.join(directory, str(uuid.uuid4())), "name": name,
            "type": "notebook", "kernel": {"name": "python3"}})
        assert code == 201, body
        code, renamed = await self.call("PATCH", f"api/sessions/{body['id']}", {"path": path})
        assert code == 200 and renamed["path"] == path, renamed
        return body["id"], renamed["kernel"]["id"]

    async def run_cell(self, kernel_id: str, code: str, timeout: float = 120) -> str:
        """Run ``code`` as a cell in the kernel; return its stdout once the server sees the
        kernel idle again; fail on an error."""
        status, out = await self.try_cell(kernel_id, code, timeout)
        assert status == "ok", out
        kernel = self.serverapp.kernel_manager.get_kernel(kernel_id)
        for _ in range(600):  # the server learns "idle" from IOPub a moment after the reply
            if kernel.execution_state != "busy":
                break
            await asyncio.sleep(0.05)
        return out

    async def try_cell(self, kernel_id: str, code: str, timeout: float = 120) -> tuple[str, str]:
        """Send ``code`` as a cell; return (reply status, text of its output or error)."""
        client = own_client(self.serverapp.kernel_manager.get_kernel(kernel_id))
        client.start_channels(hb=False)  # see tests/test_server_kernel_call.py
        out: list[str] = []
        try:
            await client.wait_for_ready(timeout=60)

            def hook(msg):
                if msg["msg_type"] == "stream":
                    out.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    out.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")

            reply = await client.execute_interactive(code, output_hook=hook, timeout=timeout)
        finally:
            client.stop_channels()
        return reply["content"]["status"], "".join(out)


async def reply_to(client, msg_id: str, timeout: float = 60) -> dict[str, Any]:
    """The shell reply to ``msg_id`` (skipping stale replies, e.g. extra kernel_info ones)."""
    deadline = time.monotonic() + timeout
    while True:
        reply = await client.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.1))
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


@pytest.fixture
def store_dir(tmp_path):
    """The local store of an in-process server test (its ``jp_server_config`` points there)."""
    return tmp_path / "store"


@pytest.fixture
def api(jp_fetch, jp_serverapp, gk_env) -> Api:
    return Api(jp_fetch, jp_serverapp)


class ServerProcess:
    """A real ``jupyter server`` subprocess with the extension enabled (for SIGTERM, idle and
    restart tests). Config goes in its own config dir, ``args`` on its command line; ``call``
    speaks its REST API."""

    def __init__(self, workdir: Path, config: dict[str, Any], env: dict[str, str],
                 args: list[str] | None = None):
        self.workdir = workdir
        self.args = args or []
        self.port = _free_port()
        self.token = secrets.token_hex(8)
        self.url = f"http://127.0.0.1:{self.port}"
        for sub in ("config", "runtime", "root", "data"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        server = {"port": self.port, "ip": "127.0.0.1", "open_browser": False,
                  "root_dir": str(workdir / "root"), "allow_root": os.geteuid() == 0,
                  "jpserver_extensions": {"jupyter_gkeresume": True, "jupyterlab": False,
                                          "jupyter_lsp": False}}
        full = {**config, "ServerApp": {**server, **config.get("ServerApp", {})},
                "IdentityProvider": {"token": self.token}}
        self.base_url = "/" + full["ServerApp"].get("base_url", "/").strip("/") + "/"
        self.base_url = self.base_url.replace("//", "/")  # what ``call`` paths are under
        (workdir / "config" / "jupyter_server_config.json").write_text(json.dumps(full))
        self.env = {**os.environ, **env, "JUPYTER_CONFIG_DIR": str(workdir / "config"),
                    "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
                    "JUPYTER_DATA_DIR": str(workdir / "data"), "JUPYTER_PLATFORM_DIRS": "0"}
        self.log_path = workdir / "server.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the fd
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jupyter_server", *self.args], env=self.env, stdout=log,
                stderr=subprocess.STDOUT, cwd=self.workdir,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log()
            try:
                self.call("GET", "api/status")
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"server did not start:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}{self.base_url}{path}", data=data, method=method,
            headers={"Authorization": f"token {self.token}",
                     "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                code, text = response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            code, text = exc.code, exc.read().decode()
        return code, json.loads(text) if text else None

    def status(self) -> dict[str, Any]:
        code, body = self.call("GET", "gkeresume/api/status")
        assert code == 200, body
        return body

    def wait_for(self, predicate, what: str) -> dict[str, Any]:
        """Poll status until ``predicate(status)``; a safety deadline, not a speed check."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            status = self.status()
            if predicate(status):
                return status
            time.sleep(0.2)
        raise AssertionError(f"never {what}: {status}\n{self.log()}")

    def new_session(self, path: str) -> str:
        code, body = self.call("POST", "api/sessions", {
            "path": path, "name": path, "type": "notebook", "kernel": {"name": "python3"}})
        assert code == 201, body
        return body["kernel"]["id"]

    def run_cell(self, kernel_id: str, code: str, by_stream: bool = False) -> str:
        """``run_cell_in``, returning once the server, too, sees the kernel no longer busy: its
        IOPub listener gets the kernel's idle status some time after this client got the reply,
        and a SIGTERM in between found "every kernel busy" (CI stop 39 + 1)."""
        out = run_cell_in(self.workdir / "runtime" / f"kernel-{kernel_id}.json", code, by_stream)
        self.wait_for(lambda s: {k["kernel_id"]: k["execution_state"]
                                 for k in s["kernels"]}.get(kernel_id) != "busy", "idle")
        return out

    def start_busy(self, kernel_id: str, code: str) -> None:
        """Send ``code`` as a cell and leave it running (another client, like a second tab);
        return once the server sees the kernel busy."""
        from jupyter_client import BlockingKernelClient

        client = BlockingKernelClient(
            connection_file=str(self.workdir / "runtime" / f"kernel-{kernel_id}.json"))
        client.load_connection_file()
        client.start_channels(hb=False)
        try:
            client.wait_for_ready(timeout=60)
            client.execute(code)
            self.wait_for(lambda s: {k["kernel_id"]: k["execution_state"]
                                     for k in s["kernels"]}.get(kernel_id) == "busy", "busy")
        finally:
            client.stop_channels()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"server ignored signal {sig}:\n{self.log()}") from None


def run_cell_in(connection_file: Path, code: str, by_stream: bool = False) -> str:
    """Run a cell through a kernel's connection file (a second client, like a console);
    return its stdout; fail on an error. ``by_stream``: all a cell shows, stream by stream:
    stdout, then stderr (how the two interleave depends on when ipykernel flushes each), then the
    text of its result (``Out[n]``)."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    client.start_channels(hb=False)  # liveness: the server owns the kernel process
    out: list[tuple[str, str]] = []

    def shown(message: dict) -> None:
        content = message["content"]
        if message["msg_type"] == "stream":
            out.append((content["name"], content["text"]))
        elif message["msg_type"] == "execute_result" and by_stream:
            out.append(("result", content["data"].get("text/plain", "") + "\n"))

    try:
        client.wait_for_ready(timeout=60)
        reply = client.execute_interactive(code, timeout=120, output_hook=shown)
    finally:
        client.stop_channels()
    # on an error, what the cell showed before it, too (scripts/cut_check.py compares both)
    assert reply["content"]["status"] == "ok", {**reply["content"],
                                                "shown": "".join(text for _, text in out)}
    if by_stream:
        order = {"stdout": 0, "stderr": 1, "result": 2}
        out.sort(key=lambda part: order[part[0]])  # stable: each stream in its order
    return "".join(text for _, text in out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server_process(tmp_path, gk_env):
    """Factory: ``server_process(name, config, env, args)`` starts a ServerProcess; all are
    killed after."""
    started: list[ServerProcess] = []

    def start(name: str, config: dict[str, Any], env: dict[str, str] | None = None,
              args: list[str] | None = None):
        server = ServerProcess(tmp_path / name, config, env or {}, args)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        if server.process and server.process.poll() is None:
            server.process.kill()
            server.process.wait()
