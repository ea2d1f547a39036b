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


async def test_a_failed_resume_can_be_paused_again_keeping_what_did_not_come_back(api, store_dir):
    a = await api.new_session("a.ipynb")
    b = await api.new_session("b.ipynb")
    await api.run_cell(a, "x = 'a'")
    await api.run_cell(b, "y = 'b'")
    status = await api.pause()
    assert status["state"] == "paused", status
    lost = {k["notebook"]: k["snapshot_id"] for k in status["paused"]["kernels"]}["b.ipynb"]
    (store_dir / "server-ws" / "snapshots" / f"{lost}.json").unlink()  # b cannot come back

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
