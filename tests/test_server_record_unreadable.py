"""An unreadable paused record at start (issue 12.8), on a real in-process server: the workspace
refuses every call that could change or depend on the record, status says why, the read is
retried on each request, and once the record can be read the workspace is paused: never
cached as "not paused", never a permanent 500."""

from __future__ import annotations

import json

import pytest
from fixtures_server import server_config

from jupyter_gkeresume.paused_record import PausedKernel, PausedRecord


@pytest.fixture
def jp_server_config(store_dir):
    return server_config(str(store_dir))


def record_path(store_dir):
    path = store_dir / "server-ws" / "records" / "paused.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


async def test_an_unreadable_record_refuses_changes_until_it_can_be_read(api, store_dir):
    path = record_path(store_dir)
    path.write_text("{ not json")
    snapshot_id = "20261130T101500Z-a1b2c3"
    status = await api.status()  # the first request reads the record
    assert "paused record cannot be read" in status["paused_record_error"], status
    assert status["paused"] is None and status["last_error"]["operation"] == "startup"
    for method, route, body in [("POST", "resume", {}), ("POST", "resume", {"snapshot": "latest"}),
                                ("DELETE", f"snapshots/{snapshot_id}", None),
                                ("DELETE", "paused", None)]:
        code, answer = await api.call(method, f"gkeresume/api/{route}", body)
        assert code == 409 and "paused record cannot be read" in answer["message"], (route, code)
    kid = await api.new_session("nb.ipynb")  # kernels run as usual
    assert await api.run_cell(kid, "print(1)") == "1\n"
    for body in ({}, {"release": False}):
        code, answer = await api.call("POST", "gkeresume/api/pause", body)
        assert code == 409 and "paused record cannot be read" in answer["message"]
    assert path.read_text() == "{ not json"  # nothing overwrote it

    record = PausedRecord.new("server-ws", "user", "recording", 0,
                              [PausedKernel(snapshot_id, "old", "python3", "nb.ipynb")])
    path.write_bytes(record.to_json())
    status = await api.status()  # the next request reads it: paused, no 500
    assert status["state"] == "paused" and status["paused_record_error"] is None, status
    assert status["paused"] == json.loads(record.to_json())
    code, _ = await api.call("GET", "gkeresume/api/snapshots")
    assert code == 200
