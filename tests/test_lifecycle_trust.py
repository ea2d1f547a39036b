"""Trust: signed manifests, verified blobs, clear refusals, explicit trust of one snapshot."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from fixtures_lifecycle import make_snapshot, put_blob

from jupyter_gkeresume.errors import IntegrityError, InvalidInputError, ManifestError
from jupyter_gkeresume.snapshot import (
    Manifest,
    SigningKey,
    SnapshotStore,
    load_manifest,
    load_signing_key,
    sign,
)
from jupyter_gkeresume.snapshot.signing import key_of_workspace, known_key_ids
from jupyter_gkeresume.snapshot.verify import verify_snapshot
from jupyter_gkeresume.snapshot.writer import SnapshotWriter


def manifest_file(store: SnapshotStore, snapshot_id: str) -> Path:
    return Path(store.manifest_path(snapshot_id))


def blob_file(store: SnapshotStore, digest: str) -> Path:
    return Path(store.blob_path(digest))


def test_a_sound_snapshot_verifies(local_store, signing_key):
    m = make_snapshot(local_store, signing_key, [b"a" * 100, b"b" * 50])
    progress = []
    report = verify_snapshot(local_store, m.snapshot_id, signing_key,
                             progress=lambda done, total: progress.append((done, total)))
    assert report.ok, report.problems
    assert report.signature == "valid"
    assert report.blobs_checked == 3 and report.bytes_checked == m.total_bytes
    assert progress[-1] == (m.total_bytes, m.total_bytes)
    assert load_manifest(local_store, m.snapshot_id, signing_key).to_dict() == m.to_dict()


def test_tampered_manifest_value_is_refused(local_store, signing_key):
    m = make_snapshot(local_store, signing_key, [b"a" * 10])
    path = manifest_file(local_store, m.snapshot_id)
    data = json.loads(path.read_bytes())
    data["objects"][0]["name"] = "y0"
    path.write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match="signature mismatch \\(tampered\\)"):
        load_manifest(local_store, m.snapshot_id, signing_key)
    report = verify_snapshot(local_store, m.snapshot_id, signing_key)
    assert not report.ok
    assert any("tampered" in p and "refused" in p for p in report.problems)


def test_tampered_manifest_byte_is_refused(local_store, signing_key):
    m = make_snapshot(local_store, signing_key, [b"a" * 10])
    path = manifest_file(local_store, m.snapshot_id)
    raw = bytearray(path.read_bytes())
    raw[raw.index(b"{")] = ord("[")
    path.write_bytes(bytes(raw))
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_manifest(local_store, m.snapshot_id, signing_key)
    report = verify_snapshot(local_store, m.snapshot_id, signing_key)
    assert report.problems and "not valid JSON" in report.problems[0]


def test_tampered_blob_byte_is_refused(local_store, signing_key):
    m = make_snapshot(local_store, signing_key, [b"a" * 100])
    target = blob_file(local_store, m.storages["s0"].blob)
    raw = bytearray(target.read_bytes())
    raw[-1] ^= 0xFF
    target.write_bytes(bytes(raw))
    report = verify_snapshot(local_store, m.snapshot_id, signing_key)
    assert report.signature == "valid"
    assert report.problems == [f"blob {m.storages['s0'].blob[:12]} does not match its digest "
                               "(corrupt)"]


def test_swapped_blob_is_refused(local_store, signing_key):
    m = make_snapshot(local_store, signing_key, [b"a" * 100, b"b" * 100])
    first, second = m.storages["s0"].blob, m.storages["s1"].blob
    blob_file(local_store, first).write_bytes(blob_file(local_store, second).read_bytes())
    report = verify_snapshot(local_store, m.snapshot_id, signing_key)
    assert report.problems == [f"blob {first[:12]} does not match its digest (corrupt)"]


def test_missing_blob_is_reported(local_store, signing_key):
    m = make_snapshot(local_store, signing_key, [b"a" * 100])
    blob_file(local_store, m.storages["s0"].blob).unlink()
    report = verify_snapshot(local_store, m.snapshot_id, signing_key)
    assert report.problems == [f"blob {m.storages['s0'].blob[:12]} is missing"]


def test_unsigned_manifest_is_refused(local_store, signing_key):
    m = make_snapshot(local_store, None, [b"a" * 10])
    with pytest.raises(IntegrityError, match="is unsigned"):
        load_manifest(local_store, m.snapshot_id, signing_key)
    refused = verify_snapshot(local_store, m.snapshot_id, signing_key)
    assert not refused.ok and "is unsigned" in refused.signature
    assert "verify with that key: --key-file OLD" in refused.problems[0]


def test_only_keys_this_workspace_had_verify_its_old_snapshots(local_store, signing_key, tmp_path):
    """Issue 22 item 4: after a key change, an earlier key of the workspace (one that signed a
    snapshot of it here: ``remember_key`` at every commit) verifies its snapshots; a key from
    elsewhere is refused whoever asks, though its signature is valid."""
    old = SigningKey(b"the-old-key-of-this-workspace-0123456789")
    foreign = SigningKey(b"a-key-from-elsewhere-0123456789-abcdef")
    writer = SnapshotWriter(local_store, old)
    digest, size = put_blob(local_store, b"old bytes")
    writer.put_blob(digest, size, lambda: [])
    mine = writer.commit(Manifest(
        snapshot_id="20261201T000000Z-0001d0", workspace=local_store.workspace,
        created="2026-12-01T00:00:00+00:00", graph_blob=digest, objects=[], storages={},
        blobs={digest: size}))
    planted = make_snapshot(local_store, foreign, [b"theirs"])
    (tmp_path / "old.key").write_bytes(old.secret)
    (tmp_path / "foreign.key").write_bytes(foreign.secret)
    assert known_key_ids(local_store.workspace) == [old.key_id]
    with pytest.raises(IntegrityError, match="signed with another key"):
        load_manifest(local_store, mine.snapshot_id, signing_key)
    with_old = key_of_workspace(str(tmp_path / "old.key"), local_store.workspace)
    assert load_manifest(local_store, mine.snapshot_id, with_old).snapshot_id == mine.snapshot_id
    assert verify_snapshot(local_store, mine.snapshot_id, with_old).ok
    with pytest.raises(InvalidInputError, match=f"key {foreign.key_id} from .*foreign.key never "
                                                f"signed a snapshot of workspace {local_store.workspace}"
                                                f" here \\(its keys: {old.key_id}\\): refused"):
        key_of_workspace(str(tmp_path / "foreign.key"), local_store.workspace)
    assert not verify_snapshot(local_store, planted.snapshot_id, with_old).ok
    assert known_key_ids("another-ws") == []


def test_wrong_key_is_refused(local_store, signing_key):
    m = make_snapshot(local_store, SigningKey(b"someone-else"), [b"a"])
    with pytest.raises(IntegrityError, match="signed with another key"):
        load_manifest(local_store, m.snapshot_id, signing_key)
    report = verify_snapshot(local_store, m.snapshot_id, signing_key)
    assert "signed with another key" in report.signature and not report.ok


def test_non_ascii_signature_is_refused_not_crashing(local_store, signing_key):
    m = make_snapshot(local_store, signing_key, [b"a"])
    path = manifest_file(local_store, m.snapshot_id)
    data = json.loads(path.read_bytes())
    data["signature"]["value"] = "\u00e9" * 64
    path.write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match="signature mismatch"):
        load_manifest(local_store, m.snapshot_id, signing_key)


def test_manifest_copied_from_another_workspace_is_reported(tmp_path, signing_key):
    source = SnapshotStore(str(tmp_path / "store"), "ws-a")
    other = SnapshotStore(str(tmp_path / "store"), "ws-b")
    m = make_snapshot(source, signing_key, [b"a"])
    other.commit_manifest(m.snapshot_id, m.to_json())
    report = verify_snapshot(other, m.snapshot_id, signing_key)
    assert "manifest belongs to workspace ws-a, found in ws-b" in report.problems


def test_key_file_is_created_once_with_0600(tmp_path, monkeypatch):
    monkeypatch.delenv("GKERESUME_SIGNING_KEY", raising=False)
    monkeypatch.delenv("GKERESUME_SIGNING_KEY_FILE", raising=False)
    path = str(tmp_path / "data" / "signing.key")
    keys = []
    threads = [threading.Thread(target=lambda: keys.append(load_signing_key(path)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({k.key_id for k in keys}) == 1
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(tmp_path / "data") == ["signing.key"]
    assert load_signing_key(path).key_id == keys[0].key_id


def test_key_from_env_and_missing_secret_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", "from-a-kubernetes-secret-0123456789")
    assert load_signing_key().secret == b"from-a-kubernetes-secret-0123456789"
    monkeypatch.delenv("GKERESUME_SIGNING_KEY")
    monkeypatch.setenv("GKERESUME_SIGNING_KEY_FILE", str(tmp_path / "mounted" / "key"))
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_signing_key()
    empty = tmp_path / "empty.key"
    empty.write_bytes(b"\n")
    with pytest.raises(InvalidInputError, match="is empty"):
        load_signing_key(str(empty))
    assert "secret" not in repr(SigningKey(b"secret"))


def test_a_short_signing_key_is_refused_with_how_to_make_one(tmp_path, monkeypatch):
    """A key anyone can guess forges snapshots that run code: fewer than 32 bytes is refused,
    from the environment and from a file, naming where it came from."""
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", "k")
    with pytest.raises(InvalidInputError, match=r"\$GKERESUME_SIGNING_KEY holds a signing key of "
                                                r"1 bytes; it needs at least 32: make one"):
        load_signing_key()
    monkeypatch.delenv("GKERESUME_SIGNING_KEY")
    short = tmp_path / "short.key"
    short.write_bytes(b"x" * 31 + b"\n")
    with pytest.raises(InvalidInputError, match=f"signing key file {short} holds a signing key of 31"):
        load_signing_key(str(short))
    short.write_bytes(b"x" * 32)
    assert load_signing_key(str(short)).secret == b"x" * 32


def test_references_outside_their_blobs_are_reported(local_store, signing_key):
    m = make_snapshot(local_store, signing_key, [b"a" * 10])
    data = m.to_dict(signed=False)
    data["storages"]["s0"]["nbytes"] = 11
    data["graph_ends"] = [10_000]
    forged = Manifest.from_dict(data)
    sign(forged, signing_key)  # signed by the key holder, yet inconsistent with its blobs
    Path(local_store.manifest_path(m.snapshot_id)).write_bytes(forged.to_json())
    report = verify_snapshot(local_store, m.snapshot_id, signing_key)
    assert report.problems == [
        f"storage s0 points outside blob {m.storages['s0'].blob[:12]}",
        "graph records point past the end of the graph blob",
    ]


def test_the_magics_reports_show_stored_text_escaped():
    """22.7: names, types, reasons and verdict notes come from a snapshot (or a planted one's
    refusal); ``%resume``/``%checkpoint`` print them without control characters, and a
    refused snapshot's error is one escaped line."""
    from kernel_hooks.magics import MagicFailed, format_checkpoint, format_resume
    from kernel_hooks.results import CheckpointResult, ResumeResult, Skipped

    evil = "x\x1b]0;pwned\x07\x1b[2J\r\nOK\u202e"
    resumed = ResumeResult("20261130T101500Z-a1b2c3", restored=[evil],
                           not_restored=[Skipped(evil, evil, evil)], warnings=[evil],
                           verdict={"level": evil, "reasons": [evil]})
    checkpoint = CheckpointResult("20261130T101500Z-a1b2c3", evil, 1, 1, 0, 0.1,
                                  skipped=[Skipped(evil, evil, evil)], warnings=[evil])
    refused = MagicFailed(IntegrityError(f"snapshot x was signed with another key ({evil})"))
    for text in (format_resume(resumed), format_checkpoint(checkpoint),
                 *refused._render_traceback_()):
        assert not any(c in text for c in "\x1b\x07\r\u202e"), text
        assert "x\\x1b]0;pwned\\x07" in text
    assert "\n" not in refused._render_traceback_()[0]
