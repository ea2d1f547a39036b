"""Checkpoint on SIGTERM, idle pause and auto-resume, with real ``jupyter server`` processes
(short timeouts), plus the idle policy's busy-kernel rule on an in-process server."""

from __future__ import annotations

import json
import os
import time

import pytest
from fixtures_server import reply_to, server_config

from jupyter_gkeresume.idle import IdleWatcher
from jupyter_gkeresume.kernel_client import own_client


def gk_config(store, **traits):
    return {"GkeResume": {"store_url": str(store), "workspace_id": "life-ws",
                          "release_backend": "none", **traits}}


def record(store):
    path = store / "life-ws" / "records" / "paused.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_sigterm_checkpoints_then_a_new_server_auto_resumes(server_process, tmp_path):
    store = tmp_path / "store"
    first = server_process("first", gk_config(store, shutdown_checkpoint_timeout=90))
    kid = first.new_session("analysis.ipynb")
    first.run_cell(kid, "import numpy as np\nresult = np.linspace(0, 1, 1001)\nnote = 'kept'")

    assert first.stop() == 0  # a real SIGTERM, as from a pod deletion or a culler
    paused = record(store)
    assert paused is not None, first.log()
    assert paused["reason"] == "shutdown"
    [entry] = paused["kernels"]
    assert entry["notebook"] == "analysis.ipynb"
    assert (store / "life-ws" / "snapshots" / f"{entry['snapshot_id']}.json").exists()
    assert '"event": "shutdown"' in first.log() and '"outcome": "checkpointed"' in first.log()

    second = server_process("second", gk_config(store, auto_resume=True))
    status = second.wait_for(lambda s: s["state"] in ("ready", "failed"), "resumed")
    assert status["state"] == "ready", status
    assert record(store) is None
    [kernel] = status["kernels"]
    assert kernel["notebook"] == "analysis.ipynb"
    out = second.run_cell(kernel["kernel_id"], "print(result[500], note)")
    assert out == "0.5 kept\n"
    assert second.stop() == 0  # ready -> the shutdown hook checkpoints again, cleanly
    assert record(store)["reason"] == "shutdown"


def test_sigterm_without_kernels_and_with_checkpoint_disabled(server_process, tmp_path):
    store = tmp_path / "store"
    idle = server_process("empty", gk_config(store))
    assert idle.stop() == 0
    assert '"outcome": "nothing to checkpoint"' in idle.log()
    off = server_process("off", gk_config(store, shutdown_checkpoint_timeout=0))
    off.run_cell(off.new_session("n.ipynb"), "a = 1")
    assert off.stop() == 0
    assert record(store) is None


def test_idle_server_pauses_itself(server_process, tmp_path):
    store = tmp_path / "store"
    server = server_process("idle", gk_config(store, idle_timeout=6))  # > kernel start to 1st cell: ~2.5 s
    kid = server.new_session("idle.ipynb")
    server.run_cell(kid, "counter = 12345")
    status = server.wait_for(lambda s: s["state"] == "paused", "paused when idle")
    assert status["paused"]["reason"] == "idle"
    assert record(store)["kernels"][0]["kernel_id"] == kid
    assert status["kernels"] == []  # backend none: the kernels (and their GPU memory) are gone
    code, body = server.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    status = server.wait_for(lambda s: s["operation"] is None, "resumed")
    assert status["state"] == "ready", status
    assert server.run_cell(status["kernels"][0]["kernel_id"], "print(counter)") == "12345\n"


@pytest.fixture
def jp_server_config(tmp_path):
    return server_config(str(tmp_path / "store"))


async def test_idle_policy_skips_busy_kernels(api, tmp_path):
    orch = api.serverapp.web_app.settings["gkeresume_orchestrator"]
    long_ago = api.serverapp.web_app.settings["started"].replace(year=2000)
    watcher = IdleWatcher(orch, lambda: long_ago, timeout=60, pause_busy=False, log=orch.log)
    await orch.ensure_started()
    # (with no kernel an idle workspace gives the pod back: test_server_idle, issue 29.3)
    kid = await api.new_session("busy.ipynb")
    flag = tmp_path / "release-the-cell"
    kernel = api.serverapp.kernel_manager.get_kernel(kid)
    client = own_client(kernel)
    client.start_channels(hb=False)  # see tests/test_server_kernel_call.py
    await client.wait_for_ready(timeout=60)
    cell = client.execute(
        f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.05)")
    deadline = time.monotonic() + 60
    while kernel.execution_state != "busy" and time.monotonic() < deadline:
        await _sleep()
    assert kernel.execution_state == "busy"
    assert await watcher.check() is False  # busy: not paused
    assert (await api.status())["state"] == "running"

    flag.write_text("go")
    await reply_to(client, cell)
    client.stop_channels()
    while kernel.execution_state != "idle" and time.monotonic() < deadline:
        await _sleep()
    assert await watcher.check() is True
    status = await api.settle()
    assert status["state"] == "paused" and status["paused"]["reason"] == "idle"
    assert os.path.exists(tmp_path / "store" / "server-ws" / "records" / "paused.json")


async def _sleep():
    import asyncio

    await asyncio.sleep(0.05)
