"""The shutdown checkpoint (issue 12.6) with a real ``jupyter server`` process and a real
SIGTERM: with one busy and two idle notebooks, every idle one is saved within the budget, the
busy one is reported in the paused record with its reason, and nothing waits for its cell."""

from __future__ import annotations

import json


def test_sigterm_saves_every_idle_kernel_and_reports_the_busy_one(server_process, tmp_path):
    store = tmp_path / "store"
    server = server_process("srv", {"GkeResume": {
        "store_url": str(store), "workspace_id": "down-ws", "release_backend": "none",
        "shutdown_checkpoint_timeout": 60}})
    idle_one, idle_two = server.new_session("one.ipynb"), server.new_session("two.ipynb")
    busy = server.new_session("train.ipynb")
    server.run_cell(idle_one, "a = 1")
    server.run_cell(idle_two, "b = 2")
    server.start_busy(busy, "import time\nwhile True: time.sleep(0.1)")  # a training loop

    assert server.stop() == 0
    record = json.loads((store / "down-ws" / "records" / "paused.json").read_text())
    assert record["reason"] == "shutdown"
    assert sorted(k["notebook"] for k in record["kernels"]) == ["one.ipynb", "two.ipynb"]
    [not_saved] = record["not_saved"]
    assert not_saved["notebook"] == "train.ipynb" and "busy" in not_saved["reason"]
    for entry in record["kernels"]:
        assert (store / "down-ws" / "snapshots" / f"{entry['snapshot_id']}.json").exists()
