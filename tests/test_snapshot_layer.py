"""The snapshot layer: one manifest reader, the writer's commit protocol, the store's own errors,
and the local store's private files (issues 11, 12.9, 13.2, 13.8)."""

from __future__ import annotations

import json
import os
import stat
from datetime import datetime, timezone
from pathlib import Path

import pytest
from fixtures_lifecycle import make_snapshot, put_blob

from jupyter_gkeresume.cli import main
from jupyter_gkeresume.errors import (
    CommitConflictError,
    IntegrityError,
    InvalidInputError,
    ManifestError,
    NotFoundInStore,
    SnapshotNotFoundError,
    SnapshotRefusedError,
    StoreError,
)
from jupyter_gkeresume.snapshot import (
    Manifest,
    ObjectRecord,
    SigningKey,
    SnapshotStore,
    SnapshotWriter,
    StorageRef,
    backends,
    list_snapshots,
    load_manifest,
    newest_verified,
    resolve,
    verify_committed,
)
from jupyter_gkeresume.snapshot.blobfile import blob_digest, layout_for
from jupyter_gkeresume.snapshot.digests import DEFAULT
from jupyter_gkeresume.snapshot.lease import RestoreLease

PLANTED = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)


def planted(store: SnapshotStore, **kwargs) -> Manifest:
    """An unsigned manifest whose id sorts after every real one (``99991231T235959Z-...``)."""
    return make_snapshot(store, None, [b"planted"], when=PLANTED, **kwargs)


# -- 13.2: only verified snapshots count ------------------------------------------------------
def test_a_planted_unsigned_manifest_never_becomes_latest(local_store, signing_key):
    real = [make_snapshot(local_store, signing_key, [bytes([i]) * 10]) for i in range(2)]
    evil = planted(local_store)
    assert local_store.list_snapshot_ids()[-1] == evil.snapshot_id
    assert resolve(local_store, None, signing_key) == real[1].snapshot_id
    assert resolve(local_store, "latest", signing_key) == real[1].snapshot_id
    assert newest_verified(local_store, signing_key).snapshot_id == real[1].snapshot_id
    rows = {r.snapshot_id: r for r in list_snapshots(local_store, signing_key, {})}
    assert "is unsigned" in rows[evil.snapshot_id].error
    assert rows[evil.snapshot_id].objects == 0  # what it claims is not shown as fact
    assert rows[real[1].snapshot_id].error is None


def test_latest_with_only_refused_snapshots_says_why(local_store, signing_key):
    with pytest.raises(SnapshotNotFoundError, match="no snapshot 'latest'"):
        resolve(local_store, "latest", signing_key)
    evil = planted(local_store)
    with pytest.raises(SnapshotRefusedError, match=f"no snapshot in this workspace verifies: the "
                                                   f"newest, {evil.snapshot_id}, was refused: "):
        resolve(local_store, "latest", signing_key)


def test_cli_gc_keep_last_is_not_steered_by_a_planted_manifest(local_store, signing_key,
                                                                 monkeypatch, capsys):
    real = [make_snapshot(local_store, signing_key, [bytes([i]) * 10]) for i in range(3)]
    evil = planted(local_store)
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", signing_key.secret.decode())
    code = main(["--store", local_store.url, "--workspace", local_store.workspace, "--json",
                 "gc", "--keep-last", "1", "--dry-run"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["snapshots_deleted"] == [real[0].snapshot_id, real[1].snapshot_id]
    assert "never deleted by a policy" in out["retention"]["keep"][evil.snapshot_id][0]
    assert out["retention"]["keep"][real[2].snapshot_id] == ["one of the last 1"]


# -- 12.9: refused by name says so --------------------------------------------------------------
def tamper(store: SnapshotStore, snapshot_id: str) -> None:
    path = Path(store.manifest_path(snapshot_id))
    data = json.loads(path.read_bytes())
    data["notebook"] = "elsewhere.ipynb"
    path.write_text(json.dumps(data))


def test_a_tampered_snapshot_asked_for_by_name_is_refused_with_the_reason(local_store, signing_key):
    m = make_snapshot(local_store, signing_key, [b"a"], name="baseline")
    tamper(local_store, m.snapshot_id)
    with pytest.raises(SnapshotRefusedError) as info:
        resolve(local_store, "baseline", signing_key)
    text = str(info.value)
    assert f"snapshot {m.snapshot_id} named 'baseline' exists but was refused" in text
    assert "signature mismatch (tampered)" in text and "known:" not in text
    assert isinstance(info.value, IntegrityError)
    with pytest.raises(SnapshotRefusedError, match=r"exists but was refused.*tampered"):
        load_manifest(local_store, m.snapshot_id, signing_key)


def test_a_name_signed_with_another_key_is_refused_and_a_verified_one_wins(local_store, signing_key):
    good = make_snapshot(local_store, signing_key, [b"a"], name="base")
    make_snapshot(local_store, SigningKey(b"someone-else"), [b"b"], name="base")
    assert resolve(local_store, "base", signing_key) == good.snapshot_id
    foreign = make_snapshot(local_store, SigningKey(b"someone-else"), [b"c"], name="theirs")
    with pytest.raises(SnapshotRefusedError, match="signed with another key") as info:
        resolve(local_store, "theirs", signing_key)
    assert info.value.snapshot_id == foreign.snapshot_id
    with pytest.raises(SnapshotNotFoundError, match="no snapshot 'nothing'"):
        resolve(local_store, "nothing", signing_key)


# -- the store's own errors ---------------------------------------------------------------------
def test_builtin_file_errors_do_not_leave_the_store(local_store, signing_key):
    with pytest.raises(NotFoundInStore, match="not in"):
        local_store.read_manifest_bytes("20261130T101500Z-000aaa")
    with pytest.raises(NotFoundInStore):
        with local_store.open_blob("ab" * 32):
            pass
    local_store.write_record("lease-k.0", b"a", create_only=True)
    with pytest.raises(CommitConflictError):
        local_store.write_record("lease-k.0", b"b", create_only=True)
    local_store.delete_manifest("20261130T101500Z-000aaa")  # already gone: not an error
    assert not issubclass(NotFoundInStore, OSError)


# -- the writer's commit protocol ---------------------------------------------------------------
def blob(*entries: bytes) -> tuple[str, int, list[object]]:
    layout = layout_for([("uint8", len(e)) for e in entries])
    return blob_digest(layout, entries), layout.size, [layout.header, *entries]


def manifest_for(store: SnapshotStore, blobs: dict[str, int], snapshot_id: str) -> Manifest:
    graph = next(iter(blobs))
    return Manifest(
        snapshot_id=snapshot_id, workspace=store.workspace, created="2026-11-30T10:15:00+00:00",
        graph_blob=graph, objects=[ObjectRecord("x", "bytes", "saved", bytes=1)],
        storages={"s0": StorageRef(graph, 0, 1, "uint8", "cpu", "numpy", "x")}, blobs=blobs,
        records=["x"], graph_ends=[1],
    )


def test_writer_commits_signed_and_verified(local_store, signing_key):
    writer = SnapshotWriter(local_store, signing_key)
    digest, size, parts = blob(b"x")
    assert writer.put_blob(digest, size, lambda: parts) is True
    assert SnapshotWriter(local_store, signing_key).put_blob(digest, size, lambda: 1 / 0) is False
    manifest = writer.commit(manifest_for(local_store, {digest: size}, "20261130T101500Z-000001"))
    assert manifest.signature is not None
    assert load_manifest(local_store, manifest.snapshot_id, signing_key).to_dict() == manifest.to_dict()
    with pytest.raises(InvalidInputError, match="already committed"):
        writer.put_blob(digest, size, lambda: parts)


def test_writer_puts_a_new_blob_named_while_it_is_written(local_store, signing_key):
    writer = SnapshotWriter(local_store, signing_key)
    _, size, parts = blob(b"fresh")
    digest, new = writer.put_new_blob(size, parts, DEFAULT)
    assert new and digest == blob(b"fresh")[0] and local_store.has_blob(digest, size)
    assert SnapshotWriter(local_store, signing_key).put_new_blob(size, parts, DEFAULT) == (digest, False)
    writer.commit(manifest_for(local_store, {digest: size}, "20261130T101500Z-000004"))
    with pytest.raises(InvalidInputError, match="already committed"):
        writer.put_new_blob(size, parts, DEFAULT)


def test_writer_refuses_a_manifest_naming_a_blob_it_did_not_put(local_store, signing_key):
    writer = SnapshotWriter(local_store, signing_key)
    digest, size, parts = blob(b"x")
    local_store.write_blob(digest, parts)  # in the store, but not claimed: gc could sweep it
    with pytest.raises(ManifestError, match="not written or claimed"):
        writer.commit(manifest_for(local_store, {digest: size}, "20261130T101500Z-000002"))
    assert local_store.list_snapshot_ids() == []


def test_a_commit_that_does_not_verify_is_removed(local_store, signing_key):
    writer = SnapshotWriter(local_store, signing_key)
    digest, size, parts = blob(b"x")
    writer.put_blob(digest, size, lambda: parts)
    local_store.delete_blob(digest)  # a gc that swept between put and commit
    with pytest.raises(IntegrityError, match=f"failed verification: blob {digest[:12]} is missing"):
        writer.commit(manifest_for(local_store, {digest: size}, "20261130T101500Z-000003"))
    assert local_store.list_snapshot_ids() == []


def test_a_commit_conflict_removes_nothing_of_the_other_writer(local_store, signing_key):
    first = make_snapshot(local_store, signing_key, [b"first"])
    writer = SnapshotWriter(local_store, signing_key)
    digest, size, parts = blob(b"x")
    writer.put_blob(digest, size, lambda: parts)
    with pytest.raises(CommitConflictError):
        writer.commit(manifest_for(local_store, {digest: size}, first.snapshot_id))
    assert load_manifest(local_store, first.snapshot_id, signing_key).to_dict() == first.to_dict()


def test_metadata_verification_checks_sizes_and_full_checks_digests(local_store, signing_key):
    m = make_snapshot(local_store, signing_key, [b"a" * 100])
    target = Path(local_store.blob_path(m.storages["s0"].blob))
    raw = bytearray(target.read_bytes())
    raw[-1] ^= 0xFF  # same size, other bytes
    target.write_bytes(bytes(raw))
    assert verify_committed(local_store, signing_key, m.snapshot_id).snapshot_id == m.snapshot_id
    with pytest.raises(IntegrityError, match="does not match its digest"):
        verify_committed(local_store, signing_key, m.snapshot_id, mode="full")
    target.write_bytes(bytes(raw[:-1]))
    with pytest.raises(IntegrityError, match=f"holds {len(raw) - 1} bytes, the manifest says {len(raw)}"):
        verify_committed(local_store, signing_key, m.snapshot_id)
    with pytest.raises(InvalidInputError, match="verify mode"):
        verify_committed(local_store, signing_key, m.snapshot_id, mode="fast")
    unsigned = make_snapshot(local_store, None, [b"b"])
    with pytest.raises(SnapshotRefusedError, match="unsigned"):
        verify_committed(local_store, signing_key, unsigned.snapshot_id)


# -- 13.8: the local store is private ------------------------------------------------------------
def test_every_file_the_local_store_writes_is_private(tmp_path, signing_key):
    old = os.umask(0)  # the modes must not depend on the umask
    try:
        store = SnapshotStore(str(tmp_path / "home" / "store"), "ws-private")
        m = make_snapshot(store, signing_key, [b"a" * 10, b"b" * 2_000_000])
        store.write_record("paused", b'{"kernels": []}')
        store.write_record("events", b"[]")
        lease = RestoreLease(store, m.snapshot_id.lower())
        lease.acquire()
        lease.release()
    finally:
        os.umask(old)
    files, folders = [], [tmp_path / "home"]
    for parent, dirs, names in os.walk(tmp_path / "home"):
        folders += [Path(parent) / d for d in dirs]
        files += [Path(parent) / n for n in names]
    kinds = {f.parent.name if f.parent.parent.name != "blobs" else "blobs" for f in files}
    assert kinds == {"blobs", "snapshots", "records"}
    assert {oct(stat.S_IMODE(f.stat().st_mode)) for f in files} == {"0o600"}
    assert {oct(stat.S_IMODE(d.stat().st_mode)) for d in folders} == {"0o700"}


def test_a_blob_hashed_while_written_is_private_and_its_folders_fsynced(tmp_path, monkeypatch):
    synced = []
    real = backends.fsync_path
    monkeypatch.setattr(backends, "fsync_path", lambda folder: (synced.append(folder), real(folder)))
    old = os.umask(0)
    try:
        store = SnapshotStore(str(tmp_path / "store"), "ws")
        _, size, parts = blob(b"c" * 1000)
        digest, _ = store.write_blob_hashing(parts, DEFAULT, size)
    finally:
        os.umask(old)
    path = Path(store.blob_path(digest))
    assert oct(stat.S_IMODE(path.stat().st_mode)) == "0o600"
    assert {oct(stat.S_IMODE(d.stat().st_mode)) for d in (path.parent, path.parent.parent)} == {"0o700"}
    assert str(path.parent) in synced and str(path.parent.parent) in synced


def resident_pages(path: Path) -> int:
    """How many of the file's pages are in the page cache (``mincore`` over a private mapping,
    which faults nothing in)."""
    import ctypes
    import mmap

    size = path.stat().st_size
    vector = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
    libc = ctypes.CDLL(None, use_errno=True)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as mapping:
        view = (ctypes.c_char * size).from_buffer(mapping)
        try:
            done = libc.mincore(ctypes.c_void_p(ctypes.addressof(view)), ctypes.c_size_t(size),
                                vector)
        finally:
            del view
    assert done == 0, os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vector)


def filesystem_of(path: Path) -> str:
    """The type of the filesystem holding ``path`` (the longest mount point above it)."""
    mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    return max(((point, kind) for point, kind in mounts
                if str(path).startswith(point.rstrip("/") + "/")), key=lambda m: len(m[0]))[1]


def test_a_written_blob_leaves_the_page_cache_and_a_small_record_stays(tmp_path):
    """Big local files are dropped from the page cache once durable (``UNCACHED_BYTES``), so
    the next blob's writes reuse that memory; small records stay cached. (On tmpfs the pages
    are the file: nothing to drop.)"""
    if filesystem_of(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip(f"{tmp_path} is on tmpfs: its pages are the file")
    store = SnapshotStore(str(tmp_path / "store"), "ws")
    _, size, parts = blob(b"d" * (4 << 20))
    digest, _ = store.write_blob_hashing(parts, DEFAULT, size)
    small = tmp_path / "store" / "ws" / "small.json"
    store.backend.put(str(small), b"{}" * 100)
    assert resident_pages(Path(store.blob_path(digest))) == 0
    assert resident_pages(small) == 1


def test_created_directories_are_fsynced_into_their_parents(tmp_path, monkeypatch):
    synced = []
    real = backends.fsync_path
    monkeypatch.setattr(backends, "fsync_path", lambda d: (synced.append(d), real(d)))
    store = SnapshotStore(str(tmp_path / "new" / "store"), "ws")
    digest, _ = put_blob(store, b"x")
    folder = Path(store.blob_path(digest)).parent
    created = [folder, folder.parent, folder.parent.parent, tmp_path / "new" / "store",
               tmp_path / "new"]
    for path in created:
        assert str(path.parent) in synced, path  # each new directory made durable in its parent
    assert str(folder) in synced  # and the file in its directory


def test_a_store_directory_writable_by_others_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(StoreError, match=r"writable by group or others.*chmod go-w"):
        SnapshotStore(str(shared), "ws")
    shared.chmod(0o755)
    (shared / "ws").mkdir(mode=0o775)
    (shared / "ws").chmod(0o775)
    with pytest.raises(StoreError, match="writable by group or others"):
        SnapshotStore(str(shared), "ws")


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory of another user needs root")
def test_a_store_directory_of_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 12345, 12345)
    with pytest.raises(StoreError, match="belongs to another user"):
        SnapshotStore(str(theirs), "ws")


def test_a_local_blob_read_through_the_store_leaves_the_page_cache(local_store, advised):
    """What is read from a blob lives in the reader's buffers after it: the file's cached pages
    are dropped (a resume of a session of half the memory otherwise holds it twice, and the
    kernel reclaims the cache in the resuming process's time)."""
    digest, _ = put_blob(local_store, b"cached bytes " * 1000)
    with local_store.open_blob(digest) as (f, size):
        f.read(size)
        assert advised == []
    assert advised == [(local_store.blob_path(digest), os.POSIX_FADV_DONTNEED)]
