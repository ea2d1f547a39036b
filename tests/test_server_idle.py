"""Issue 20.3: only what a person does keeps the workspace from its idle pause, on real
``jupyter server`` processes with a short ``idle_timeout``.

jupyter_server moves its own ``last_activity`` (``/api/status``) on every authenticated API
request, so a client that only polls (an open JupyterLab tab, Kubeflow's culling controller)
must not count. Kubeflow's culler (``components/notebook-controller/controllers/
culling_controller.go`` in kubeflow/kubeflow v1.9.2 and kubeflow/notebooks ``notebooks-v1``,
``getNotebookApiKernels`` and ``updateTimestampFromKernelsActivity``; ``pkg/culler/culler.go``
up to v1.6) GETs ``/notebook/{ns}/{name}/api/kernels`` and sets
``notebooks.kubeflow.org/last-activity`` to now when a kernel's ``execution_state`` is not
``idle``, else to the newest kernel ``last_activity``: the polling test checks that those fields do not
move with the polls either, so the culler's clock agrees with ours.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import urllib.parse
from datetime import datetime, timedelta, timezone

import pytest
from fixtures_server import RecordingRelease, server_config
from tornado.websocket import websocket_connect

from jupyter_gkeresume.app import GkeResume
from jupyter_gkeresume.errors import InvalidInputError
from jupyter_gkeresume.idle import IdleWatcher, input_report_every

IDLE_TIMEOUT = 6  # seconds: short, yet twice a kernel start here under load 8 (~2.5 s: the longest gap)
POLL = 1.0  # seconds between two polls, as a client that watches the server closely


def gk_config(store, **traits):
    return {"GkeResume": {"store_url": str(store), "workspace_id": "idle-ws",
                          "release_backend": "none", "idle_timeout": IDLE_TIMEOUT, **traits}}


class Poller(threading.Thread):
    """GETs ``/api/kernels`` and ``/api/status`` every ``POLL`` seconds until stopped. It keeps
    each kernels answer read while our status still said ``running`` with no operation after
    it (so before any pause touched the kernels): what Kubeflow's culler would have read."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server = server
        self.stopped = threading.Event()
        self.kernels_seen: list[list[dict]] = []

    def run(self) -> None:
        while True:
            code, kernels = self.server.call("GET", "api/kernels")
            assert code == 200
            assert self.server.call("GET", "api/status")[0] == 200
            status = self.server.status()  # our own status: polled too, like the lab does
            if status["state"] == "running" and status["operation"] is None:
                self.kernels_seen.append(kernels)
            if self.stopped.wait(POLL):
                return


def test_polls_do_not_keep_the_workspace_from_pausing(server_process, tmp_path):
    store = tmp_path / "store"
    server = server_process("polled", gk_config(store))
    kid = server.new_session("polled.ipynb")
    server.run_cell(kid, "kept = 7")
    settled = server.wait_for(lambda s: s["kernels"][0]["execution_state"] == "idle", "idle")
    assert settled["state"] == "running"
    code, [kernel] = server.call("GET", "api/kernels")
    assert code == 200
    after_cell = kernel["last_activity"]

    poller = Poller(server)
    poller.start()
    try:
        status = server.wait_for(lambda s: s["state"] == "paused", "paused while polled")
    finally:
        poller.stopped.set()
        poller.join()
    assert status["paused"]["reason"] == "idle"
    # What the culler reads stayed where the cell left it: the polls moved neither field.
    assert poller.kernels_seen, "the poller never saw the workspace running"
    for kernels in poller.kernels_seen:
        assert [(k["last_activity"], k["execution_state"]) for k in kernels] == [
            (after_cell, "idle")]


def terminal_socket_url(server, name: str) -> str:
    query = urllib.parse.urlencode({"token": server.token})
    return f"ws://127.0.0.1:{server.port}/terminals/websocket/{name}?{query}"


async def test_a_cell_or_terminal_typing_keeps_the_workspace(server_process, tmp_path):
    """For one and a half idle timeouts a cell runs every moment, then for as long someone types
    in a terminal every second: the workspace stays ``running`` through both (a cell it
    refused would fail), and pauses once nobody works."""
    store = tmp_path / "store"
    server = server_process("busy", gk_config(store))
    kid = server.new_session("work.ipynb")
    deadline = time.monotonic() + 1.5 * IDLE_TIMEOUT
    while time.monotonic() < deadline:
        server.run_cell(kid, "import time; time.sleep(0.5)")
        assert server.status()["state"] == "running"

    code, terminal = server.call("POST", "api/terminals")
    assert code == 200, terminal
    socket = await websocket_connect(terminal_socket_url(server, terminal["name"]))
    try:
        deadline = time.monotonic() + 1.5 * IDLE_TIMEOUT
        while time.monotonic() < deadline:
            await socket.write_message(json.dumps(["stdin", "echo typed\r"]))
            time.sleep(POLL)
            assert server.status()["state"] == "running"
    finally:
        socket.close()

    status = server.wait_for(lambda s: s["state"] == "paused", "paused once nobody worked")
    assert status["paused"]["reason"] == "idle"


@pytest.fixture
def jp_server_config(store_dir):
    return server_config(str(store_dir))


async def test_document_changes_count_and_reads_do_not(api):
    """Documents edited or saved (contents PUT/POST/PATCH/DELETE) are activity; a GET is not."""
    activity = api.serverapp.web_app.settings["gkeresume_orchestrator"].activity
    before = activity.last()
    for method, path, body in (("GET", "api/contents", None), ("GET", "api/kernels", None),
                               ("GET", "api/status", None)):
        code, _ = await api.call(method, path, body)
        assert code == 200
    assert activity.last() == before
    moves = [("POST", "api/contents", {"type": "notebook"}),
             ("PUT", "api/contents/notes.txt", {"type": "file", "format": "text",
                                                "content": "hello"}),
             ("PATCH", "api/contents/notes.txt", {"path": "renamed.txt"}),
             ("DELETE", "api/contents/renamed.txt", None)]
    for method, path, body in moves:
        last = activity.last()
        code, _ = await api.call(method, path, body)
        assert code in (200, 201, 204), (method, path)
        await _until(lambda last=last: activity.last() > last, f"{method} {path} counted")


async def _until(predicate, what: str) -> None:
    """Wait until ``predicate()`` (the contents events reach their listeners in a task; the idle
    clock moves): a safety deadline, not a speed check."""
    deadline = time.monotonic() + 30
    while not predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def test_an_idle_workspace_without_kernels_gives_the_pod_back(api):
    """Issue 29.3: a tab open and no kernel (nothing to checkpoint): the idle pause needed a
    live kernel, so such a pod kept its GPU forever. Now the idle check releases it at once,
    with no snapshot and no paused record; a failed release waits a whole timeout before the
    next try; with a kernel alive it is a pause again, never a bare release; a paused
    workspace nobody resumes is released too, its record kept."""
    orchestrator = api.serverapp.web_app.settings["gkeresume_orchestrator"]
    assert (await api.status())["kernels"] == []
    long_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    timeout = 5.0
    watcher = IdleWatcher(orchestrator, lambda: long_ago, timeout=timeout, pause_busy=False,
                          log=logging.getLogger("test"))
    RecordingRelease.fail_with = "the Hub said no"
    assert not await watcher.check()
    assert len(RecordingRelease.calls) == 1
    assert not await watcher.check() and len(RecordingRelease.calls) == 1  # not at once again
    await _until(lambda: watcher.idle_seconds() >= timeout, "a timeout after the failure")
    RecordingRelease.fail_with = None
    assert await watcher.check()  # returned False before: "not kids" ended the check
    assert len(RecordingRelease.calls) == 2
    status = await api.status()
    assert (status["state"], status["paused"], status["operation"]) == ("running", None, None)
    assert (await api.call("GET", "gkeresume/api/snapshots"))[1]["snapshots"] == []

    await api.new_session("kept.ipynb")
    assert not await orchestrator.release_without_kernels("idle")
    assert len(RecordingRelease.calls) == 2

    # paused (the record written, the kernels stopped) and nobody resumes: released as well,
    # the record kept for the next pod
    await api.pause({"when_busy": "queue"})
    status = await api.settle()
    assert status["state"] == "paused" and len(RecordingRelease.calls) == 3, status
    watcher = IdleWatcher(orchestrator, lambda: long_ago, timeout=timeout, pause_busy=False,
                          log=logging.getLogger("test"))
    assert orchestrator.gateway.live_ids() == []
    # our own operation's end restarted the clock
    await _until(lambda: watcher.idle_seconds() >= timeout, "idle after the pause")
    assert await watcher.check() and len(RecordingRelease.calls) == 4
    assert (await api.status())["paused"] == status["paused"]


def test_the_environment_sets_the_idle_timeout(monkeypatch):
    """``GKERESUME_IDLE_TIMEOUT`` (whole seconds) overrides ``c.GkeResume.idle_timeout`` as
    ``GKERESUME_SHUTDOWN_BUDGET`` overrides the budget: a platform's manifest turns the idle
    pause on without a config file; anything else is refused with the fix."""
    settings = GkeResume(idle_timeout=2700)
    monkeypatch.delenv("GKERESUME_IDLE_TIMEOUT", raising=False)
    assert settings.resolved_idle_timeout() == 2700
    for raw, seconds in ((" 1800 ", 1800), ("0", 0)):
        monkeypatch.setenv("GKERESUME_IDLE_TIMEOUT", raw)
        assert settings.resolved_idle_timeout() == seconds
    for bad in ("soon", "12.5", "-1", "1e3", "30m"):
        monkeypatch.setenv("GKERESUME_IDLE_TIMEOUT", bad)
        with pytest.raises(InvalidInputError, match=r"GKERESUME_IDLE_TIMEOUT=.*whole seconds"):
            settings.resolved_idle_timeout()



async def test_an_idle_pause_says_since_when_and_after_how_long(api):
    """Issue 27.6: after an idle pause nothing said that nobody had been active, since when,
    nor after how long. The paused record (what the lab and a fresh pod read) now says it:
    ``idle`` with the last activity's time, the seconds idle when the pause began, and the
    timeout."""
    orchestrator = api.serverapp.web_app.settings["gkeresume_orchestrator"]
    kid = await api.new_session("idle.ipynb")
    await api.run_cell(kid, "kept = 7")
    last = datetime(2026, 11, 30, 10, 14, 5, tzinfo=timezone.utc)
    watcher = IdleWatcher(orchestrator, lambda: last, timeout=60, pause_busy=False,
                          log=logging.getLogger("test"))
    assert await watcher.check()
    status = await api.settle()
    paused = status["paused"]
    assert status["state"] == "paused" and paused["reason"] == "idle", status
    idle = paused["idle"]
    assert idle["since"] == "2026-11-30T10:14:05Z" and idle["timeout"] == 60
    now = datetime.now(timezone.utc)
    assert (paused_at := datetime.fromisoformat(paused["paused_at"].replace("Z", "+00:00"))) <= now
    assert 60 < idle["seconds"] <= (paused_at - last).total_seconds() + 1


async def test_a_persons_input_in_a_lab_counts_and_polls_do_not(api):
    """Issue 27.9: a person reading and moving through the lab (keys, pointer, scrolling) was
    idle to the server. The lab reports such input (``POST /gkeresume/api/activity``, at most
    every ``report_every`` seconds, which the reply says: a third of the idle timeout, never
    more than a minute); it is activity of kind ``input``. The lab's polls still are not."""
    orchestrator = api.serverapp.web_app.settings["gkeresume_orchestrator"]
    activity = orchestrator.activity
    before = activity.last()
    for path in ("gkeresume/api/status", "api/kernels", "api/sessions", "gkeresume/api/snapshots"):
        assert (await api.call("GET", path))[0] == 200
    assert activity.last() == before and "input" not in activity.seen()
    code, reply = await api.call("POST", "gkeresume/api/activity", {})
    assert code == 200
    timeout = orchestrator.settings.idle_timeout
    assert reply == {"report_every": input_report_every(timeout)}
    assert input_report_every(60) == 20 and input_report_every(3600) == 60
    assert activity.seen()["input"] > before and activity.last() == activity.seen()["input"]
    code, _ = await api.call("POST", "gkeresume/api/activity", {"kind": "keys"})
    assert code == 400  # the body says nothing: an unknown field is a mistake, said plainly
