"""The REST handlers' own checks (issue 13 items 7 and 10), on a real in-process server: names
and ids match in full (a trailing newline is refused), a body that cannot be parsed within limits
is a 400, and pause/resume/cancel also need the ``kernels`` and ``sessions`` permissions of
jupyter_server's authorizer (a custom one here)."""

from __future__ import annotations

import asyncio

import pytest
from fixtures_server import server_config
from jupyter_server.auth.authorizer import Authorizer


class DenyingAuthorizer(Authorizer):
    """Allows everything except the (action, resource) pairs in ``denied``."""

    denied: set[tuple[str, str]] = set()

    def is_authorized(self, handler, user, action, resource) -> bool:
        return (action, resource) not in DenyingAuthorizer.denied


@pytest.fixture
def jp_server_config(store_dir):
    config = server_config(str(store_dir))
    config["ServerApp"]["authorizer_class"] = "test_server_handlers.DenyingAuthorizer"
    return config


@pytest.fixture(autouse=True)
def _allow_all():
    DenyingAuthorizer.denied = set()
    yield
    DenyingAuthorizer.denied = set()


@pytest.mark.parametrize(("path", "raw", "fragment"), [
    ("pause", b'{"name": "ok\\n"}', "not a usable snapshot name"),
    ("resume", b'{"snapshot": "20261130T101500Z-a1b2c3\\n"}', "not a usable snapshot name"),
    ("pause", b"[" * 30_000 + b"]" * 30_000, "nested too deeply"),
    ("pause", b"\xff\xfe", "not JSON"),
])
async def test_bodies_that_cannot_be_used_are_400(api, path, raw, fragment):
    code, body = await api.call("POST", f"gkeresume/api/{path}", raw=raw)
    assert code == 400, (code, body)
    assert fragment in body["message"]


async def test_a_body_over_the_limit_is_413(api):
    code, body = await api.call("POST", "gkeresume/api/pause",
                                raw=b'{"name": "' + b"x" * 300_000 + b'"}')
    assert code == 413 and "too large" in body["message"], (code, body)


async def test_a_huge_body_is_refused_before_it_is_sent(api, jp_http_port, jp_base_url,
                                                         jp_auth_header):
    """The headers of a 100 MB body get their 413 at once: the server does not wait for (nor
    buffer, up to jupyter_server's 512 MiB max_body_size) a body it will refuse. Not one byte
    of the body is sent here, so a server that waited would never answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", jp_http_port)
    head = [f"POST {jp_base_url.rstrip('/')}/gkeresume/api/pause HTTP/1.1",
            f"Host: 127.0.0.1:{jp_http_port}", "Content-Type: application/json",
            f"Content-Length: {100 << 20}",
            *(f"{k}: {v}" for k, v in jp_auth_header.items())]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
    await writer.drain()
    try:
        status_line = await asyncio.wait_for(reader.readline(), timeout=60)
    finally:
        writer.close()
    assert status_line.startswith(b"HTTP/1.1 413"), status_line


async def test_ids_in_the_path_match_in_full(api):
    code, body = await api.call("DELETE", "gkeresume/api/snapshots/20261130T101500Z-a1b2c3%0A")
    assert code == 400 and "not a snapshot id" in body["message"], (code, body)


@pytest.mark.parametrize("denied", [("execute", "kernels"), ("write", "kernels"),
                                    ("write", "sessions")])
async def test_pause_and_resume_need_the_kernel_and_session_permissions(api, denied):
    DenyingAuthorizer.denied = {denied}
    for route in ("pause", "resume", "cancel"):
        code, body = await api.call("POST", f"gkeresume/api/{route}", {})
        assert code == 403, (route, code, body)
        assert denied[1] in body["message"]
    code, _ = await api.call("GET", "gkeresume/api/status")
    assert code == 200
    DenyingAuthorizer.denied = {("write", "gkeresume")}
    code, _ = await api.call("POST", "gkeresume/api/pause", {})
    assert code == 403


@pytest.mark.parametrize("denied", [("execute", "kernels"), ("write", "kernels"),
                                    ("write", "sessions")])
async def test_settings_and_deleting_snapshots_need_what_pause_needs(api, denied):
    """Issue 22.9: a viewer with ``write`` on ``gkeresume`` only (read-only on kernels and
    sessions) can neither turn off the shutdown checkpoint nor delete a snapshot."""
    DenyingAuthorizer.denied = {denied}
    for method, route, body in [("PUT", "settings", {"checkpoint_on_shutdown": False}),
                                ("DELETE", "snapshots/20261130T101500Z-a1b2c3", None)]:
        code, answer = await api.call(method, f"gkeresume/api/{route}", body)
        assert code == 403, (route, code, answer)
        assert denied[1] in answer["message"]
    code, settings = await api.call("GET", "gkeresume/api/settings")
    assert code == 200 and settings["checkpoint_on_shutdown"] is True
