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
import time
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gkeresume.errors import ReleaseError
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

    async def new_session(self, path: str) -> str:
        """A notebook session (real kernel) for ``path``; returns the kernel id."""
        code, body = await self.call("POST", "api/sessions", {
            "path": path, "name": path, "type": "notebook", "kernel": {"name": "python3"},
        })
        assert code == 201, body
        return body["kernel"]["id"]

    async def run_cell(self, kernel_id: str, code: str, timeout: float = 120) -> str:
        """Run ``code`` as a cell in the kernel; return its stdout; fail on an error."""
        client = self.serverapp.kernel_manager.get_kernel(kernel_id).client()
        client.start_channels()
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
        assert reply["content"]["status"] == "ok", "".join(out)
        return "".join(out)


@pytest.fixture
def api(jp_fetch, jp_serverapp, gk_env) -> Api:
    return Api(jp_fetch, jp_serverapp)
