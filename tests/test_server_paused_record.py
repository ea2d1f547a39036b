"""The paused record: one format (``PausedRecord``), one error (``StoredRecordError``), one store
accessor (``PausedRecords``) that the server, retention/gc and ``jupyter gkeresume rm`` share."""

from __future__ import annotations

import json

import pytest

from jupyter_gkeresume.errors import StoredRecordError
from jupyter_gkeresume.paused_record import PausedKernel, PausedRecord, PausedRecords
from jupyter_gkeresume.snapshot import SnapshotStore

IDS = ["20261130T101500Z-a1b2c3", "20261130T101501Z-d4e5f6"]


def record(**kernel) -> dict:
    return {"version": 1, "workspace": "ws", "paused_at": "2026-11-30T10:15:00Z",
            "reason": "user", "release_backend": "none", "gpus": 0,
            "kernels": [{"snapshot_id": IDS[0], "notebook": "nb.ipynb", **kernel}]}


def test_a_record_round_trips_and_names_its_snapshots(tmp_path):
    store = SnapshotStore(str(tmp_path), "ws")
    records = PausedRecords(store)
    assert records.read() is None and records.protected_ids() == frozenset()
    written = PausedRecord.new("ws", "idle", "none", 2, [
        PausedKernel(IDS[0], "k1", "python3", "a.ipynb", 10, 5, ["x"], []),
        PausedKernel(IDS[1], "k2", "python3", None, 3, 0, [], [{"name": "g", "reason": "r"}]),
    ])
    records.write(written)
    assert records.read() == written
    assert records.protected_ids() == frozenset(IDS)
    assert json.loads(store.read_record("paused")) == written.to_dict()
    records.delete()
    assert records.read() is None
    records.delete()  # deleting nothing is fine


def test_a_record_without_saved_names_means_not_known():
    parsed = PausedRecord.from_json(json.dumps(record()).encode())
    assert parsed.kernels[0].saved is None
    assert "saved" not in parsed.to_dict()["kernels"][0]
    assert PausedRecord.from_json(parsed.to_json()) == parsed


@pytest.mark.parametrize("saved", ["xy", [1], {"x": 1}, None])
def test_a_paused_record_with_malformed_saved_names_is_refused(saved):
    with pytest.raises(StoredRecordError, match="'saved' is not a list of names"):
        PausedRecord.from_json(json.dumps(record(saved=saved)).encode())


@pytest.mark.parametrize(("raw", "fragment"), [
    (b"{", "not JSON"),
    (b"\xff", "not JSON"),
    (b"[" * 100_000, "not JSON"),
    (b"[]", "unknown version"),
    (json.dumps({**record(), "version": 2}).encode(), "unknown version"),
    (json.dumps({**record(), "gpus": "2"}).encode(), "'gpus'"),
    (json.dumps({**record(), "gpus": True}).encode(), "'gpus'"),
    (json.dumps({**record(), "paused_at": None}).encode(), "'paused_at'"),
    (json.dumps({**record(), "kernels": 3}).encode(), "'kernels'"),
    (json.dumps({**record(), "kernels": [{"snapshot_id": "../x"}]}).encode(), "snapshot"),
    (json.dumps({**record(), "kernels": [3]}).encode(), "kernel entries"),
    (json.dumps(record(notebook="../../etc/passwd")).encode(), "unsafe notebook path"),
    (json.dumps(record(notebook="/abs.ipynb")).encode(), "unsafe notebook path"),
    (json.dumps(record(kernel_id=7)).encode(), "'kernel_id'"),
    (json.dumps(record(skipped="x")).encode(), "'skipped'"),
])
def test_corrupt_records_are_one_error_naming_the_field(tmp_path, raw, fragment):
    store = SnapshotStore(str(tmp_path), "ws")
    store.write_record("paused", raw)
    with pytest.raises(StoredRecordError, match=fragment):
        PausedRecords(store).read()
    with pytest.raises(StoredRecordError):  # retention/gc and `rm` read it the same way
        PausedRecords(store).protected_ids()
