"""The paused record: one format (``PausedRecord``), one error (``StoredRecordError``), one store
accessor (``PausedRecords``) that the server, retention/gc and ``jupyter gkeresume rm`` share;
signed with the workspace key over its fields and workspace id (issue 22.1)."""

from __future__ import annotations

import json

import pytest

from jupyter_gkeresume.errors import StoredRecordError
from jupyter_gkeresume.paused_record import PausedKernel, PausedRecord, PausedRecords
from jupyter_gkeresume.snapshot import SnapshotStore
from jupyter_gkeresume.snapshot.records import RecordOrder, sign_record
from jupyter_gkeresume.snapshot.signing import SigningKey

KEY = SigningKey(b"paused-record-test-key-" + b"k" * 32)
OTHER_KEY = SigningKey(b"another-workspace-key-" + b"o" * 32)
IDS = ["20261130T101500Z-a1b2c3", "20261130T101501Z-d4e5f6"]


def record(**kernel) -> dict:
    return {"version": 1, "workspace": "ws", "paused_at": "2026-11-30T10:15:00Z",
            "reason": "user", "release_backend": "none", "gpus": 0,
            "kernels": [{"snapshot_id": IDS[0], "notebook": "nb.ipynb", **kernel}]}


def test_a_record_round_trips_and_names_its_snapshots(tmp_path):
    store = SnapshotStore(str(tmp_path), "ws")
    records = PausedRecords(store, lambda: KEY)
    assert records.read() is None and records.protected_ids() == frozenset()
    written = PausedRecord.new("ws", "idle", "none", 2, [
        PausedKernel(IDS[0], "k1", "python3", "a.ipynb", 10, 5, ["x"], []),
        PausedKernel(IDS[1], "k2", "python3", None, 3, 0, [], [{"name": "g", "reason": "r"}]),
    ])
    records.write(written)
    assert records.read() == written
    assert records.protected_ids() == frozenset(IDS)
    stored = json.loads(store.read_record("paused"))
    assert stored.pop("signature")["key_id"] == KEY.key_id
    assert stored.pop("record") == {"kind": "paused", "name": "paused",
                                    "sequence": stored_sequence(store)}
    assert stored == written.to_dict()
    records.delete()
    assert records.read() is None
    records.delete()  # deleting nothing is fine


def stored_sequence(store) -> int:
    return RecordOrder(store.workspace).highest("paused")


def test_a_record_without_saved_names_means_not_known():
    parsed = PausedRecord.from_dict(record())
    assert parsed.kernels[0].saved is None
    assert "saved" not in parsed.to_dict()["kernels"][0]
    assert PausedRecord.from_dict(parsed.to_dict()) == parsed


@pytest.mark.parametrize("saved", ["xy", [1], {"x": 1}, None])
def test_a_paused_record_with_malformed_saved_names_is_refused(saved):
    with pytest.raises(StoredRecordError, match="'saved' is not a list of names"):
        PausedRecord.from_dict(record(saved=saved))


@pytest.mark.parametrize(("data", "fragment"), [
    ({**record(), "version": 2}, "unknown version"),
    ({**record(), "gpus": "2"}, "'gpus'"),
    ({**record(), "gpus": True}, "'gpus'"),
    ({**record(), "paused_at": None}, "'paused_at'"),
    ({**record(), "kernels": 3}, "'kernels'"),
    ({**record(), "kernels": [{"snapshot_id": "../x"}]}, "snapshot"),
    ({**record(), "kernels": [3]}, "kernel entries"),
    (record(notebook="../../etc/passwd"), "unsafe notebook path"),
    (record(notebook="/abs.ipynb"), "unsafe notebook path"),
    (record(kernel_id=7), "'kernel_id'"),
    (record(skipped="x"), "'skipped'"),
])
def test_corrupt_records_are_one_error_naming_the_field(tmp_path, data, fragment):
    """Signed by the right key and still corrupt: the error names the field."""
    store = SnapshotStore(str(tmp_path), "ws")
    store.write_record("paused", sign_record("paused", data, KEY))
    with pytest.raises(StoredRecordError, match=fragment):
        PausedRecords(store, lambda: KEY).read()
    # retention/gc and `rm` read it the same way, and an invalid record protects nothing
    assert PausedRecords(store, lambda: KEY).protected_ids() == frozenset()


@pytest.mark.parametrize(("plant", "fragment"), [
    (lambda: b"{", "not JSON"),
    (lambda: b"\xff", "not JSON"),
    (lambda: b"[" * 100_000, "not JSON"),
    (lambda: b"[]", "not a JSON object"),
    (lambda: json.dumps(record()).encode(), "unsigned"),
    (lambda: sign_record("paused", record(), OTHER_KEY), "signed with another key"),
    (lambda: sign_record("paused", record(), KEY).replace(b"nb.ipynb", b"xx.ipynb"), "tampered"),
    (lambda: sign_record("paused", {**record(), "workspace": "other\x1b]0;pwned\x07"}, KEY),
     r"belongs to workspace 'other\\x1b\]0;pwned\\x07'"),
])
@pytest.mark.parametrize("where", ["local", "gs"])
def test_an_unsigned_tampered_or_foreign_record_is_refused_and_protects_nothing(
        request, tmp_path, plant, fragment, where):
    """A record planted by anyone who can write the prefix (another workspace's record, or
    one naming an old snapshot of another notebook) is refused before any of its fields are
    used, and makes no snapshot undeletable; its text reaches the message escaped. On a local
    store and on fake-gcs-server (where the finding was reproduced across two users)."""
    if where == "gs":
        bucket = request.getfixturevalue("gcs_bucket")
        store = SnapshotStore(bucket.url, "ws", bucket.storage_options)
    else:
        store = SnapshotStore(str(tmp_path), "ws")
    store.write_record("paused", plant())
    with pytest.raises(StoredRecordError, match=fragment) as raised:
        PausedRecords(store, lambda: KEY).read()
    assert "\x1b" not in str(raised.value)
    assert PausedRecords(store, lambda: KEY).protected_ids() == frozenset()
