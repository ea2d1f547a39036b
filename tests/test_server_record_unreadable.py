"""A paused record the server cannot use (issues 12.8, 22.1, 22.2), on a real in-process server
with a record planted in its local store (auto_resume on, as in a Hub deployment).

A record that is corrupt, unsigned, signed with another key or another workspace's is logged and
treated as absent: nothing is restored from it, auto_resume does not start, the snapshots it names
stay deletable, a pause writes a new record over it and ``DELETE paused`` removes it. A record the
workspace signed that pairs a snapshot with another notebook is refused by the kernel."""

from __future__ import annotations

import json
import logging

import pytest
from fixtures_lifecycle import make_snapshot
from fixtures_server import SIGNING_KEY, server_config

from jupyter_gkeresume.paused_record import PausedKernel, PausedRecord, PausedRecords
from jupyter_gkeresume.snapshot import SigningKey, SnapshotStore
from jupyter_gkeresume.snapshot.records import sign_record

KEY = SigningKey(SIGNING_KEY.encode())
GARBAGE = b'{"version": 1, "kernels": "garbage"}'


@pytest.fixture
def jp_server_config(store_dir):
    return server_config(str(store_dir), auto_resume=True)


def store_of(store_dir) -> SnapshotStore:
    return SnapshotStore(str(store_dir), "server-ws")


def record_naming(snapshot_id: str, notebook: str, workspace: str = "server-ws") -> dict:
    return PausedRecord.new(workspace, "user", "recording", 0,
                            [PausedKernel(snapshot_id, "old", "python3", notebook)]).to_dict()


def plant(store_dir, raw: bytes) -> None:
    store_of(store_dir).write_record("paused", raw)


@pytest.mark.parametrize("forge", [
    lambda record: json.dumps(record).encode(),  # unsigned
    lambda record: sign_record("paused", {**record, "workspace": "other-ws"}, KEY),  # another workspace's
    lambda record: sign_record("paused", record, SigningKey(b"someone-else-" + b"k" * 32)),  # another key
])
async def test_a_planted_record_is_ignored_and_protects_nothing(api, store_dir, caplog, forge):
    """22.1: before, the planted record was restored at startup (auto_resume) into
    important.ipynb and made its snapshot undeletable."""
    old = make_snapshot(store_of(store_dir), KEY, notebook="a.ipynb")
    plant(store_dir, forge(record_naming(old.snapshot_id, "important.ipynb")))
    with caplog.at_level(logging.WARNING):
        status = await api.status()  # the first request reads the record (and would auto-resume)
    assert status["state"] == "running" and status["paused"] is None, status
    assert status["operation"] is None and status["kernels"] == [], status
    assert "paused record" in status["paused_record_ignored"], status
    assert any("paused record is ignored" in r.getMessage() for r in caplog.records)
    code, body = await api.call("DELETE", f"gkeresume/api/snapshots/{old.snapshot_id}")
    assert code == 204, (code, body)


async def test_a_corrupt_record_is_removed_by_discarding_it(api, store_dir, caplog):
    """22.2: before, every call answered 409 until someone fixed the store by hand. Its text
    reaches the log escaped (no forged log line)."""
    plant(store_dir, sign_record("paused", {**record_naming("20261130T101500Z-a1b2c3", "nb.ipynb"),
                                  "kernels": "garbage\n[I 00:00 ServerApp] all fine"}, KEY))
    with caplog.at_level(logging.WARNING):
        status = await api.status()
    assert status["state"] == "running" and "'kernels'" in status["paused_record_ignored"], status
    assert not any("\n[I 00:00" in r.getMessage() for r in caplog.records)
    code, body = await api.call("DELETE", "gkeresume/api/paused")
    assert code == 204, (code, body)
    assert store_of(store_dir).read_record("paused") is None
    status = await api.status()
    assert status["paused_record_ignored"] is None
    code, body = await api.call("DELETE", "gkeresume/api/paused")
    assert code == 409 and "nothing is paused" in body["message"]


async def test_a_corrupt_record_never_blocks_a_pause(api, store_dir):
    """22.2: ``{"version":1,"kernels":"garbage"}`` made pause answer 409; now the pause writes
    a new, signed record over it."""
    plant(store_dir, GARBAGE)
    kid = await api.new_session("nb.ipynb")
    await api.run_cell(kid, "x = 1")
    status = await api.pause()
    assert status["state"] == "paused" and status["paused_record_ignored"] is None, status
    record = PausedRecords(store_of(store_dir), lambda: KEY).read()
    assert [k.notebook for k in record.kernels] == ["nb.ipynb"]


async def test_the_kernel_refuses_a_snapshot_of_another_notebook(api, store_dir):
    """22.1: a record (here signed by the workspace itself) that pairs an old snapshot of
    a.ipynb with important.ipynb restored a.ipynb's state into important.ipynb; the kernel now
    compares the snapshot's signed notebook with its own and refuses."""
    old = make_snapshot(store_of(store_dir), KEY, notebook="a.ipynb")
    plant(store_dir, sign_record("paused", record_naming(old.snapshot_id, "important.ipynb"), KEY))
    await api.status()  # startup: auto-resume from the (valid) record
    status = await api.settle()
    assert status["state"] == "failed" and status["paused"] is not None, status
    assert "was taken in a.ipynb, not in important.ipynb" in json.dumps(status), status


async def test_the_shutdown_checkpoint_runs_despite_a_corrupt_record_and_planted_settings(
        api, store_dir, caplog):
    """22.2: a corrupt paused record made the shutdown checkpoint fail (the kernel's state was
    lost at SIGTERM), and a planted unsigned ``{"checkpoint_on_shutdown": false}`` turned it
    off. Now the settings are ignored (logged, the default applies) and the checkpoint writes
    a new record."""
    plant(store_dir, GARBAGE)
    store_of(store_dir).write_record("settings", b'{"checkpoint_on_shutdown": false}')
    with caplog.at_level(logging.WARNING):
        code, settings = await api.call("GET", "gkeresume/api/settings")
    assert code == 200 and settings == {"checkpoint_on_shutdown": True}, settings
    assert any("settings record is ignored" in r.getMessage() and "unsigned" in r.getMessage()
               for r in caplog.records)
    kid = await api.new_session("nb.ipynb")
    await api.run_cell(kid, "x = 1")
    orchestrator = api.serverapp.web_app.settings["gkeresume_orchestrator"]
    assert await orchestrator.shutdown(60) == "checkpointed"
    record = PausedRecords(store_of(store_dir), lambda: KEY).read()
    assert [k.notebook for k in record.kernels] == ["nb.ipynb"]
