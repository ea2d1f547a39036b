"""After a failed resume (issue 12.7), on a real in-process server with real kernels: the
kernels that came back can be paused again (and checkpointed at shutdown), and the paused
record keeps the notebooks that did not come back."""

from __future__ import annotations

import json

import pytest
from fixtures_server import server_config


@pytest.fixture
def jp_server_config(store_dir):
    return server_config(str(store_dir))


def stored_record(store_dir):
    return json.loads((store_dir / "server-ws" / "records" / "paused.json").read_text())


async def pause_two_and_lose_b(api, store_dir) -> str:
    """a.ipynb and b.ipynb paused, then b's snapshot manifest removed (b cannot come back);
    returns b's snapshot id."""
    a = await api.new_session("a.ipynb")
    b = await api.new_session("b.ipynb")
    await api.run_cell(a, "x = 'a'")
    await api.run_cell(b, "y = 'b'")
    status = await api.pause()
    assert status["state"] == "paused", status
    lost = {k["notebook"]: k["snapshot_id"] for k in status["paused"]["kernels"]}["b.ipynb"]
    (store_dir / "server-ws" / "snapshots" / f"{lost}.json").unlink()
    return lost


async def test_a_failed_resume_can_be_paused_again_keeping_what_did_not_come_back(api, store_dir):
    lost = await pause_two_and_lose_b(api, store_dir)

    await api.call("POST", "gkeresume/api/resume", {})
    status = await api.settle()
    assert status["state"] == "failed", status
    # the record now names only what did not come back
    assert [k["notebook"] for k in status["paused"]["kernels"]] == ["b.ipynb"]
    assert [k["notebook"] for k in stored_record(store_dir)["kernels"]] == ["b.ipynb"]
    [back] = [k["kernel_id"] for k in status["kernels"] if k["notebook"] == "a.ipynb"]
    assert await api.run_cell(back, "x = x + '!'\nprint(x)") == "a!\n"

    status = await api.pause()
    assert status["state"] == "paused", status
    record = stored_record(store_dir)
    by_notebook = {k["notebook"]: k["snapshot_id"] for k in record["kernels"]}
    assert sorted(by_notebook) == ["a.ipynb", "b.ipynb"] and by_notebook["b.ipynb"] == lost
    assert by_notebook["a.ipynb"] == status["last_snapshot"]["id"]


async def test_a_resume_is_failed_only_once_its_operation_is_over(api, store_dir, monkeypatch):
    """As a finished resume is ``ready`` only with no operation in flight
    (test_server_events), a failed one is ``failed`` only then: the record shortened to what
    did not come back is written before the workspace says ``failed``."""
    orch = api.serverapp.web_app.settings["gkeresume_orchestrator"]
    await pause_two_and_lose_b(api, store_dir)
    during: list[dict] = []
    write = orch.records.write

    def write_and_look(record):
        during.append(orch.state.to_status())
        return write(record)

    monkeypatch.setattr(orch.records, "write", write_and_look)
    await api.call("POST", "gkeresume/api/resume", {})
    status = await api.settle()
    assert status["state"] == "failed" and status["operation"] is None, status
    [looked] = during
    assert looked["operation"] is not None and looked["state"] != "failed", looked
