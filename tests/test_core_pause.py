"""``%pause`` in a kernel hands over to the real server that runs it; without one it checkpoints."""

from __future__ import annotations

import json


def test_pause_magic_asks_the_server_to_pause_and_release(server_process, tmp_path):
    store = tmp_path / "store"
    server = server_process("srv", {"GkeResume": {
        "store_url": str(store), "workspace_id": "pause-ws", "release_backend": "none"}})
    kid = server.new_session("night.ipynb")
    server.run_cell(kid, "x = 41 + 1")
    out = server.run_cell(kid, "%pause -n bedtime")
    assert "pause requested" in out
    status = server.wait_for(lambda s: s["state"] in ("paused", "failed"), "paused")
    assert status["state"] == "paused", status
    record = json.loads((store / "pause-ws" / "records" / "paused.json").read_text())
    [entry] = record["kernels"]
    manifest = json.loads((store / "pause-ws" / "snapshots" / f"{entry['snapshot_id']}.json")
                          .read_text())
    assert manifest["name"] == "bedtime" and "x" in [o["name"] for o in manifest["objects"]]

    code, _ = server.call("POST", "gkeresume/api/resume", {})
    assert code == 202
    status = server.wait_for(lambda s: s["state"] in ("ready", "failed"), "resumed")
    assert status["state"] == "ready", status
    [kernel] = status["kernels"]
    assert server.run_cell(kernel["kernel_id"], "print(x)") == "42\n"


def test_pause_magic_without_a_server_checkpoints_and_says_so(start_kernel):
    k = start_kernel()
    k.run("y = 7")
    out = k.run("%pause")
    assert "checkpoint" in out and "no release backend is configured" in out
