"""Issue 20.11: spot and preemptible nodes give a pod about 15 s after SIGTERM, then SIGKILL.

The shutdown checkpoint of two kernels, a small one and a larger one, is killed at points drawn
from a seeded generator over the length of one whole checkpoint (measured first, here: from
SIGTERM until both snapshots committed): the
server and both kernels get SIGKILL at once, as when the node takes the pod. Afterwards every
kernel whose snapshot committed (its manifest is in the store: the commit) is in the paused
record, and a new server resumes each one with its variables; when none committed, nothing is
recorded and the workspace is ``running``. The budget comes from ``GKERESUME_SHUTDOWN_BUDGET``
(the config says 0, "do not": the environment wins, docs/server.md)."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from jupyter_gkeresume.app import GkeResume
from jupyter_gkeresume.errors import InvalidInputError

WORKSPACE = "spot-ws"
BIG = 160 * 2**20  # bytes in the larger kernel: its checkpoint takes a couple of seconds here
SEED = 2011
POINTS = 3  # kill points after the measured whole checkpoint


def config(store) -> dict:
    return {"GkeResume": {"store_url": str(store), "workspace_id": WORKSPACE,
                          "release_backend": "none", "shutdown_checkpoint_timeout": 0}}


def committed(store) -> set[str]:
    """The snapshots whose manifest is in the store (the commit; temporaries are named apart)."""
    return {p.stem for p in (store / WORKSPACE / "snapshots").glob("*.json")}


def start_two_kernels(server) -> list[int]:
    """``small.ipynb`` and ``big.ipynb`` with their variables; returns the kernels' pids."""
    small, big = server.new_session("small.ipynb"), server.new_session("big.ipynb")
    server.run_cell(small, "small = 'kept'")
    server.run_cell(big, f"import numpy as np\nbig = np.arange({BIG // 8}, dtype=np.int64)")
    return [int(server.run_cell(kid, "import os\nprint(os.getpid())")) for kid in (small, big)]


def kill_all(server, pids: list[int]) -> None:
    """SIGKILL the kernels, then the server: nothing commits after this (a pod's end)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # it had already stopped
            pass
    server.process.kill()
    server.process.wait()


EXPECTED = {"small.ipynb": ("print(small)", "kept\n"),
            "big.ipynb": ("print(big.size, int(big[-1]))", f"{BIG // 8} {BIG // 8 - 1}\n")}


def check_after_restart(server_process, name: str, store) -> int:
    """A new server on ``store``: every committed snapshot is in the record and resumes;
    returns how many kernels came back."""
    done = committed(store)
    server = server_process(name, config(store))
    status = server.status()
    if not done:
        assert status["state"] == "running" and status["paused"] is None, status
        assert not (store / WORKSPACE / "records" / "paused.json").exists()
        return 0
    assert status["state"] == "paused", status
    assert {k["snapshot_id"] for k in status["paused"]["kernels"]} == done, status["paused"]
    code, body = server.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    status = server.wait_for(lambda s: s["operation"] is None, "resumed")
    assert status["state"] == "ready", status
    assert len(status["kernels"]) == len(done)
    for kernel in status["kernels"]:
        code, expected = EXPECTED[kernel["notebook"]]
        assert server.run_cell(kernel["kernel_id"], code) == expected
    server.process.kill()
    server.process.wait()
    return len(done)


def test_sigkill_at_any_point_leaves_every_committed_kernel_resumable(server_process, tmp_path):
    env = {"GKERESUME_SHUTDOWN_BUDGET": "120"}
    store = tmp_path / "whole"
    server = server_process("whole", config(store), env)
    start_two_kernels(server)
    t0 = time.monotonic()
    server.process.send_signal(signal.SIGTERM)  # and the whole checkpoint runs
    while len(committed(store)) < 2:  # its length: until the second snapshot commits
        assert server.process.poll() is None, server.log()
        time.sleep(0.02)
    whole = time.monotonic() - t0
    assert server.process.wait(timeout=120) == 0, server.log()
    assert check_after_restart(server_process, "whole-after", store) == 2

    rng = random.Random(SEED)
    came_back = []
    for point in range(POINTS):
        store = tmp_path / f"point{point}"
        server = server_process(f"point{point}", config(store), env)
        pids = start_two_kernels(server)
        server.process.send_signal(signal.SIGTERM)
        time.sleep(rng.uniform(0.0, 1.0) * whole)
        kill_all(server, pids)
        came_back.append(check_after_restart(server_process, f"point{point}-after", store))
    print(f"whole checkpoint {whole:.1f} s; kernels back per kill point: {came_back}")


def test_the_environment_sets_the_budget(monkeypatch):
    """``GKERESUME_SHUTDOWN_BUDGET`` overrides ``c.GkeResume.shutdown_checkpoint_timeout``; a
    value that is not a number of seconds is refused with the fix."""
    settings = GkeResume(shutdown_checkpoint_timeout=25)
    monkeypatch.delenv("GKERESUME_SHUTDOWN_BUDGET", raising=False)
    assert settings.resolved_shutdown_budget() == 25
    monkeypatch.setenv("GKERESUME_SHUTDOWN_BUDGET", " 12.5 ")
    assert settings.resolved_shutdown_budget() == 12.5
    monkeypatch.setenv("GKERESUME_SHUTDOWN_BUDGET", "0")
    assert settings.resolved_shutdown_budget() == 0
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv("GKERESUME_SHUTDOWN_BUDGET", bad)
        with pytest.raises(InvalidInputError, match="GKERESUME_SHUTDOWN_BUDGET"):
            settings.resolved_shutdown_budget()
