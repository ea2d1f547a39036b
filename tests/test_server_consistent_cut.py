"""A pause is a consistent cut (issue 12.1), on a real in-process server with real kernels: from
its start until it completes, fails or is cancelled, no cell runs in any of its kernels and no
kernel or session starts; afterwards everything goes on as before.

The pause is kept in flight deterministically: notebook A holds an object whose pickling waits
for a flag file (``Gate``), so A's checkpoint runs until the test lets it end.

A pause asked for while a cell runs (14.3) is queued: it waits for the cell (never interrupted),
saying which one in ``operation.waiting_for``; meanwhile the other notebooks keep running cells
(the hold starts when the pause itself starts), and no kernel can start.
"""

from __future__ import annotations

import asyncio

import pytest
from fixtures_server import SETTLE_TIMEOUT, reply_to, server_config

from jupyter_gkeresume.kernel_client import own_client
from jupyter_gkeresume.kernel_protocol import PAUSING_MESSAGE


@pytest.fixture
def jp_server_config(store_dir):
    return server_config(str(store_dir))


class LongCell:
    """A cell in ``kernel_id`` that runs until ``finish()``."""

    def __init__(self, api, kernel_id: str, flag):
        self.api, self.kernel_id, self.flag = api, kernel_id, flag
        self.kernel = api.serverapp.kernel_manager.get_kernel(kernel_id)

    async def start(self) -> None:
        self.client = own_client(self.kernel)
        self.client.start_channels(hb=False)  # see tests/test_server_kernel_call.py
        await self.client.wait_for_ready(timeout=60)
        self.msg_id = self.client.execute(
            f"import os, time\nwhile not os.path.exists({str(self.flag)!r}): time.sleep(0.05)\n"
            "long_cell_done = True")
        for _ in range(1200):
            if self.kernel.execution_state == "busy":
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the long cell never started")

    async def finish(self) -> dict:
        self.flag.write_text("go")
        try:
            return await reply_to(self.client, self.msg_id)
        finally:
            self.client.stop_channels()


async def wait_held(api, kernel_id: str) -> None:
    for _ in range(int(SETTLE_TIMEOUT / 0.05)):
        status = await api.status()
        [row] = [k for k in status["kernels"] if k["kernel_id"] == kernel_id]
        if row["held"]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"kernel {kernel_id} never held: {status}")


GATE_MODULE = """
import os, time


class Gate:
    \"\"\"Pickling it waits for a flag file: a checkpoint of its kernel stays in flight.\"\"\"

    def __init__(self, flag):
        self.flag = flag

    def __reduce__(self):
        while not os.path.exists(self.flag):
            time.sleep(0.05)
        return (Gate, (self.flag,))
"""


async def start_pause_in_flight(api, tmp_path):
    """Notebooks a (checkpoint held at a ``Gate``) and b; a pause in flight, both held.
    Returns ``(a, b, open_gate)``."""
    (tmp_path / "gatemod").mkdir()
    (tmp_path / "gatemod" / "slowgate.py").write_text(GATE_MODULE)
    flag = tmp_path / "open-the-gate"
    a = await api.new_session("a.ipynb")
    b = await api.new_session("b.ipynb")
    await api.run_cell(a, f"import sys\nsys.path.insert(0, {str(tmp_path / 'gatemod')!r})\n"
                          f"import slowgate\ngate = slowgate.Gate({str(flag)!r})")
    await api.run_cell(b, "ran = []")
    code, body = await api.call("POST", "gkeresume/api/pause", {"release": False})
    assert code == 202, body
    assert body["operation"]["cancellable"] is True
    await wait_held(api, a)
    await wait_held(api, b)
    return a, b, lambda: flag.write_text("go")


async def test_no_cell_runs_and_no_kernel_starts_during_a_pause(api, tmp_path):
    a, b, open_gate = await start_pause_in_flight(api, tmp_path)

    status, text = await api.try_cell(b, "ran.append(1)\nprint('ran')")
    assert status == "error" and PAUSING_MESSAGE in text, text
    code, body = await api.call("POST", "api/sessions", {
        "path": "c.ipynb", "name": "c.ipynb", "type": "notebook", "kernel": {"name": "python3"}})
    assert code == 409 and "pausing" in body["message"], (code, body)
    code, body = await api.call("POST", "api/kernels", {"name": "python3"})
    assert code == 409 and "pausing" in body["message"], (code, body)
    assert (await api.status())["state"] == "pausing"

    open_gate()
    status = await api.settle()
    assert status["state"] == "running" and status["last_error"] is None, status
    saved = {k["notebook"]: k["result"]["saved"] for k in status["kernels"]}
    assert "gate" in saved["a.ipynb"] and "ran" in saved["b.ipynb"]
    # the refused cell did not run, and now cells and kernels run again
    assert await api.run_cell(b, "print(ran)") == "[]\n"
    assert await api.run_cell(a, "print(type(gate).__name__)") == "Gate\n"
    assert await api.new_session("c.ipynb")


async def test_cancel_mid_pause_and_everything_goes_on(api, tmp_path):
    code, body = await api.call("POST", "gkeresume/api/cancel", {})
    assert code == 409 and "no pause in flight" in body["message"]
    a, b, open_gate = await start_pause_in_flight(api, tmp_path)
    status = await api.status()
    assert status["operation"]["cancellable"] is True

    code, body = await api.call("POST", "gkeresume/api/cancel", {})
    assert code == 202, body
    assert body["operation"]["kind"] == "pause"
    open_gate()  # a's checkpoint ends by itself; its hold is lifted after it
    status = await api.settle()
    assert status["state"] == "running", status
    assert status["reason"] == "pause cancelled, nothing was released"
    assert status["paused"] is None and status["last_error"] is None
    assert await api.run_cell(b, "ran.append(2)\nprint(ran)") == "[2]\n"
    assert await api.run_cell(a, "print(type(gate).__name__)") == "Gate\n"
    assert await api.new_session("c.ipynb")


async def queue_behind_a_long_cell(api, tmp_path):
    """a runs its second cell (until ``cell.finish()``), b is idle; a pause (the default
    ``when_busy: queue``) is queued behind a's cell. Returns ``(a, b, cell, status)``."""
    a = await api.new_session("a.ipynb")
    b = await api.new_session("b.ipynb")
    await api.run_cell(a, "before = 1")
    await api.run_cell(b, "ran = []")
    cell = LongCell(api, a, tmp_path / "flag")
    await cell.start()
    for refuse in ({"when_busy": "refuse", "release": False}, {"when_idle": False}):
        code, body = await api.call("POST", "gkeresume/api/pause", refuse)
        assert code == 409 and "busy" in body["message"], (code, body)
    code, body = await api.call("POST", "gkeresume/api/pause", {"release": False})
    assert code == 202, body
    for _ in range(int(SETTLE_TIMEOUT / 0.05)):
        status = await api.status()
        if status["operation"]["waiting_for"] is not None:
            return a, b, cell, status
        await asyncio.sleep(0.05)
    raise AssertionError(f"the pause never said what it waits for: {status}")


async def test_a_pause_queues_behind_a_running_cell(api, tmp_path):
    a, b, cell, status = await queue_behind_a_long_cell(api, tmp_path)
    waiting = status["operation"]["waiting_for"]
    assert waiting["kernel_id"] == a and waiting["notebook"] == "a.ipynb", waiting
    assert waiting["execution_count"] == 2 and waiting["running_seconds"] >= 0, waiting
    assert status["state"] == "pausing" and status["operation"]["cancellable"] is True
    # meanwhile the other notebook runs its cells; no kernel may start (it would be left out)
    assert await api.run_cell(b, "ran.append(1)\nprint(ran)") == "[1]\n"
    code, body = await api.call("POST", "api/kernels", {"name": "python3"})
    assert code == 409 and "queued behind cell 2 of a.ipynb" in body["message"], (code, body)
    assert not any(k["held"] for k in (await api.status())["kernels"])

    reply = await cell.finish()  # never interrupted: it ends, then the pause runs as usual
    assert reply["content"]["status"] == "ok"
    status = await api.settle()
    assert status["state"] == "running" and status["last_error"] is None, status
    saved = {k["notebook"]: k["result"]["saved"] for k in status["kernels"]}
    assert "long_cell_done" in saved["a.ipynb"] and "ran" in saved["b.ipynb"]


async def test_cancel_withdraws_a_queued_pause(api, tmp_path):
    a, _, cell, _ = await queue_behind_a_long_cell(api, tmp_path)
    code, body = await api.call("POST", "gkeresume/api/cancel", {})
    assert code == 202, body
    status = await api.settle()
    assert status["state"] == "running" and status["last_snapshot"] is None, status
    assert status["reason"] == "pause cancelled, nothing was released"
    reply = await cell.finish()  # the cell was never interrupted
    assert reply["content"]["status"] == "ok"
    assert await api.run_cell(a, "print(long_cell_done)") == "True\n"


async def test_destructive_calls_during_an_operation_are_409(api, tmp_path):
    """Issue 12.5: no snapshot is deleted and no paused record discarded while an operation runs
    (a pause may be about to name that snapshot in its record)."""
    first = await api.new_session("first.ipynb")
    await api.run_cell(first, "v = 1")
    older = (await api.pause({"release": False}))["last_snapshot"]["id"]
    await api.call("DELETE", f"api/sessions/{(await api.call('GET', 'api/sessions'))[1][0]['id']}")

    _, _, open_gate = await start_pause_in_flight(api, tmp_path)
    code, body = await api.call("DELETE", f"gkeresume/api/snapshots/{older}")
    assert code == 409 and "in flight" in body["message"], (code, body)
    code, body = await api.call("DELETE", "gkeresume/api/paused")
    assert code == 409 and "in flight" in body["message"], (code, body)
    open_gate()
    assert (await api.settle())["state"] == "running"
    code, _ = await api.call("DELETE", f"gkeresume/api/snapshots/{older}")
    assert code == 204
