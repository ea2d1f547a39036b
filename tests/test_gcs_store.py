"""SnapshotStore on gs:// against a real GCS API (fake-gcs-server): streaming blobs, atomic commit,
create-only races, thread safety; and the local and generic-fsspec paths kept working."""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from fixtures_lifecycle import make_snapshot

from jupyter_gkeresume.errors import (
    CommitConflictError,
    IntegrityError,
    InvalidInputError,
    ManifestError,
    StoreError,
)
from jupyter_gkeresume.snapshot import Manifest, checksum
from jupyter_gkeresume.snapshot import store as store_module
from jupyter_gkeresume.snapshot.backends import LocalBackend
from jupyter_gkeresume.snapshot.blobfile import blob_digest, layout_for, read_verified
from jupyter_gkeresume.snapshot.digests import DEFAULT
from jupyter_gkeresume.snapshot.manifests import scan_manifests
from jupyter_gkeresume.snapshot.signing import SigningKey
from jupyter_gkeresume.snapshot.store import SnapshotStore, describe, resolve_concurrency
from jupyter_gkeresume.snapshot.writer import SnapshotWriter, verify_committed

CHUNK = 256 << 10  # the smallest chunk GCS allows: many chunks from small test data


def make_blob(*sizes: int, seed: int = 0) -> tuple[str, list[object], int]:
    """A real blob (safetensors layout) of uint8 entries: (digest, parts, size)."""
    entries = [os.urandom(n) if seed == 0 else bytes([seed % 256]) * n for n in sizes]
    layout = layout_for([("uint8", len(e)) for e in entries])
    return blob_digest(layout, entries), [layout.header, *entries], layout.size


def read_back(store: SnapshotStore, digest: str) -> bytes:
    entries: list[bytearray] = []
    with store.open_blob(digest) as (f, size):
        def destination(entry: int, nbytes: int):
            entries.append(bytearray(nbytes))
            return memoryview(entries[-1])

        read_verified(f, digest, size, destination)
    return b"".join(entries)


def gcs_store(bucket, **kwargs) -> SnapshotStore:
    return SnapshotStore(bucket.url, "ws", bucket.storage_options, chunk_bytes=CHUNK, **kwargs)


@pytest.mark.parametrize("sizes", [(), (0,), (10,), (CHUNK - 200,), (CHUNK * 2,), (3 * CHUNK + 7, 5, CHUNK)])
def test_blob_round_trip_in_chunks(gcs_bucket, sizes):
    store = gcs_store(gcs_bucket)
    digest, parts, size = make_blob(*sizes)
    assert not store.has_blob(digest)
    store.write_blob(digest, parts)
    assert store.has_blob(digest, size)
    assert not store.has_blob(digest, size + 1)
    assert read_back(store, digest) == b"".join(bytes(p) for p in parts[1:])
    assert [b.digest for b in store.list_blobs()] == [digest]


def test_blob_from_a_one_shot_generator(gcs_bucket):
    store = gcs_store(gcs_bucket)
    digest, parts, size = make_blob(CHUNK + 3, 2 * CHUNK, 11)
    store.write_blob(digest, (p for p in parts))
    assert store.has_blob(digest, size)
    assert read_back(store, digest) == b"".join(bytes(p) for p in parts[1:])


def test_a_blob_named_after_its_bytes_is_uploaded_once(gcs_bucket):
    """No renames on GCS: the digest is computed first, and a blob the bucket has is claimed."""
    store = gcs_store(gcs_bucket)
    digest, parts, size = make_blob(CHUNK + 5, 9)
    sent: list[int] = []
    writer = SnapshotWriter(store, SigningKey(b"k" * 32))
    assert writer.put_new_blob(size, parts, DEFAULT, sent=sent.append) == (digest, True)
    assert sent == [size]  # an upload is told once it completed
    assert writer.put_new_blob(size, parts, DEFAULT, sent=sent.append) == (digest, False)
    assert sent == [size]
    assert read_back(store, digest) == b"".join(bytes(p) for p in parts[1:])
    assert [b.digest for b in store.list_blobs()] == [digest]


def test_ranged_reads_seek_and_read(gcs_bucket):
    store = gcs_store(gcs_bucket)
    digest, parts, size = make_blob(3 * CHUNK)
    store.write_blob(digest, parts)
    whole = b"".join(bytes(p) for p in parts)
    with store.open_blob(digest) as (f, stored):
        assert stored == size
        f.seek(size - 100)
        assert f.read(1000) == whole[-100:]
        f.seek(10)
        assert f.read(5) == whole[10:15]
        assert f.read(0) == b""


def test_big_reads_stream_into_the_callers_buffer(gcs_bucket):
    store = gcs_store(gcs_bucket)
    digest, parts, size = make_blob(3 << 20)
    store.write_blob(digest, parts)
    whole = b"".join(bytes(p) for p in parts)
    with store.open_blob(digest) as (f, stored):
        assert stored == size
        f.seek(12345)  # inside the first window: served from it (a short read is allowed)
        head = f.read(2 << 20)
        assert head == whole[12345 : 12345 + len(head)] and len(head) > 1000
        f.seek((1 << 20) + 5)  # past the window: streamed straight into the buffer
        target = bytearray(3 << 19)
        assert f.readinto(target) == len(target)
        assert target == whole[(1 << 20) + 5 : (1 << 20) + 5 + len(target)]
        assert f.read() == whole[(1 << 20) + 5 + len(target) :]


def test_half_written_blob_is_never_visible(gcs_bucket):
    store = gcs_store(gcs_bucket)
    digest, parts, _ = make_blob(4 * CHUNK)

    def failing():
        yield parts[0]
        yield memoryview(parts[1])[: 2 * CHUNK + 5]  # two chunks are already up
        raise RuntimeError("device lost")

    with pytest.raises(StoreError, match="device lost"):
        store.write_blob(digest, failing())
    assert not store.has_blob(digest)
    assert store.list_blobs() == []
    store.fs.invalidate_cache()
    assert store.fs.find(gcs_bucket.url) == []


def test_concurrent_blob_writes_and_reads(gcs_bucket):
    store = gcs_store(gcs_bucket, concurrency=8)
    blobs = [make_blob(CHUNK * (i % 3) + 1000 * i, seed=i + 1) for i in range(16)]
    with ThreadPoolExecutor(store.concurrency) as pool:
        list(pool.map(lambda b: store.write_blob(b[0], b[1]), blobs))
        contents = list(pool.map(lambda b: read_back(store, b[0]), blobs))
    for (_digest, parts, _), content in zip(blobs, contents, strict=True):
        assert content == b"".join(bytes(p) for p in parts[1:])
    assert len(store.list_blobs()) == len({b[0] for b in blobs})


def test_rewriting_an_existing_blob_is_harmless(gcs_bucket):
    store = gcs_store(gcs_bucket)
    digest, parts, size = make_blob(CHUNK + 1)
    store.write_blob(digest, parts)
    store.write_blob(digest, parts)
    assert store.has_blob(digest, size)
    assert read_back(store, digest) == bytes(parts[1])


def test_manifest_commit_is_create_only(gcs_bucket):
    store = gcs_store(gcs_bucket)
    sid = "20260101T000000Z-abcdef"
    store.commit_manifest(sid, b'{"first": 1}')
    with pytest.raises(CommitConflictError, match="already committed"):
        store.commit_manifest(sid, b'{"second": 2}')
    assert store.read_manifest_bytes(sid) == b'{"first": 1}'
    assert store.list_snapshot_ids() == [sid]


def test_racing_commits_exactly_one_wins(gcs_bucket):
    """Two stores (two gcsfs clients, as two pods) commit the same ids at the same moment."""
    stores = [gcs_store(gcs_bucket), gcs_store(gcs_bucket)]
    ids = [f"20260101T0000{i:02d}Z-abcdef" for i in range(12)]
    for sid in ids:
        barrier = threading.Barrier(2)

        def commit(who: int, sid: str = sid, barrier: threading.Barrier = barrier):
            barrier.wait()
            try:
                stores[who].commit_manifest(sid, f'{{"writer": {who}}}'.encode())
                return who
            except CommitConflictError:
                return None

        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(commit, [0, 1]))
        winners = [w for w in outcomes if w is not None]
        assert len(winners) == 1, outcomes
        assert stores[1].read_manifest_bytes(sid) == f'{{"writer": {winners[0]}}}'.encode()
    assert stores[0].list_snapshot_ids() == ids


def test_records_create_only_and_overwrite(gcs_bucket):
    store = gcs_store(gcs_bucket)
    assert store.read_record("paused") is None
    store.write_record("paused", b"1")
    store.write_record("paused", b"2")
    assert store.read_record("paused") == b"2"
    store.write_record("lease-k1.0", b"a", create_only=True)
    with pytest.raises(CommitConflictError):
        store.write_record("lease-k1.0", b"b", create_only=True)
    store.delete_record("lease-k1.0")
    assert store.read_record("lease-k1.0") is None


@pytest.mark.parametrize("name", ["lease-../x", "lease-", "lease-A", "lease-a/b", "other"])
def test_record_names_are_checked(tmp_path, name):
    with pytest.raises(InvalidInputError):
        SnapshotStore(str(tmp_path), "ws").record_path(name)


def test_missing_bucket_is_a_clean_store_error(gcs_bucket):
    missing = type(gcs_bucket)("gs://no-such-bucket-x", gcs_bucket.endpoint,
                               gcs_bucket.storage_options)
    store = gcs_store(missing)
    digest, parts, _ = make_blob(10)
    with pytest.raises(StoreError) as info:
        store.write_blob(digest, parts)
    assert "no-such-bucket-x" in str(info.value)
    assert store.list_snapshot_ids() == []


def test_local_store_unchanged(tmp_path):
    store = SnapshotStore(str(tmp_path), "ws")
    assert isinstance(store.backend, LocalBackend) and store.concurrency == 4
    digest, parts, size = make_blob(100, 5000)
    store.write_blob(digest, parts)
    assert store.has_blob(digest, size)
    assert read_back(store, digest) == bytes(parts[1]) + bytes(parts[2])
    store.commit_manifest("20260101T000000Z-abcdef", b"m")
    with pytest.raises(CommitConflictError):
        store.commit_manifest("20260101T000000Z-abcdef", b"n")
    leftovers = [n for _, _, files in os.walk(tmp_path) for n in files if ".tmp-" in n]
    assert leftovers == []


def test_generic_fsspec_store_streams_and_discards_partial_writes():
    store = SnapshotStore(f"memory://gk-{os.getpid()}-{id(object())}", "ws")
    digest, parts, _ = make_blob(CHUNK * 2)
    store.write_blob(digest, parts)
    assert read_back(store, digest) == bytes(parts[1])

    def failing():
        yield parts[0]
        raise RuntimeError("boom")

    other = hashlib.sha256(b"other").hexdigest()
    with pytest.raises(StoreError):
        store.write_blob(other, failing())
    assert not store.has_blob(other)


def test_concurrency_setting(monkeypatch):
    assert resolve_concurrency(None, local=False, env={}) == 8
    assert resolve_concurrency(None, local=True, env={"GKERESUME_CONCURRENCY": " 32 "}) == 32
    assert resolve_concurrency(3, local=True, env={"GKERESUME_CONCURRENCY": "32"}) == 3
    for bad in ("0", "many", "9999"):
        with pytest.raises(InvalidInputError, match="GKERESUME_CONCURRENCY"):
            resolve_concurrency(None, local=False, env={"GKERESUME_CONCURRENCY": bad})
    with pytest.raises(InvalidInputError, match="256 KiB"):
        SnapshotStore("memory://x", "ws", chunk_bytes=1000)


def test_error_messages_mask_credentials():
    exc = OSError(
        "POST http://h/upload/o?uploadType=resumable&upload_id=SECRET1 failed; "
        "Authorization: Bearer ya29.SECRET2 access_token=SECRET3 gs://user:SECRET4@bucket/x"
    )
    text = describe(exc)
    assert "OSError" in text and "http://h/upload/o" in text
    for secret in ("SECRET1", "SECRET2", "SECRET3", "SECRET4"):
        assert secret not in text


@pytest.fixture(params=["local", "gcs"])
def either_store(request, tmp_path) -> SnapshotStore:
    """The same workspace on a local directory and on fake-gcs-server."""
    if request.param == "local":
        return SnapshotStore(str(tmp_path / "store"), "ws")
    return gcs_store(request.getfixturevalue("gcs_bucket"))


def test_an_oversized_manifest_is_refused_reading_no_more_than_the_cap(either_store, signing_key,
                                                                        monkeypatch):
    """A planted manifest bigger than any manifest may be costs a listing only the cap (one
    ranged read on GCS), is listed as refused with its id, and the others still verify; a
    manifest over the cap is never committed."""
    monkeypatch.setattr(store_module, "MAX_MANIFEST_BYTES", 4096)
    store = either_store
    good = make_snapshot(store, signing_key)
    planted = "20261201T000000Z-0ba5ed"
    store.backend.put(store.manifest_path(planted), b'{"pad": "' + b"x" * 100_000 + b'"}')
    reads = []
    real_read = store.backend.read
    monkeypatch.setattr(store.backend, "read", lambda path, limit=None: reads.append(
        len(data := real_read(path, limit))) or data)
    listed = {m.snapshot_id: m for m in scan_manifests(store, signing_key)}
    assert listed[good.snapshot_id].verified
    assert "larger than 4096 bytes" in listed[planted].refused
    assert planted in listed[planted].refused and max(reads) <= 4097
    with pytest.raises(ManifestError, match="more than the 4096"):
        store.commit_manifest("20261201T000001Z-0ba5ed", b" " * 5000)


def zero_tensor_blob() -> tuple[str, list[object], int]:
    """The blob of ``torch.zeros(4096)``: its name is predictable by anyone (16,504 bytes)."""
    entries = [bytes(4 * 4096)]
    layout = layout_for([("float32", len(entries[0]))])
    return blob_digest(layout, entries), [layout.header, *entries], layout.size


def plant(store: SnapshotStore, digest: str, size: int) -> None:
    """Other bytes of the same size under a blob's name, as someone with write access could."""
    store.backend.put(store.blob_path(digest), os.urandom(size))


def test_a_blob_planted_under_a_predictable_name_is_replaced_by_ours(either_store, signing_key):
    """Issue 22 item 3: a checkpoint never reuses what it finds under a blob's name without
    knowing it holds its bytes. Locally the writer's own bytes always replace the file; on GCS
    the stored crc32c must be the one of our bytes, else ours are uploaded over it (also when
    the skip-cache knew the digest: ``put_blob``)."""
    store = either_store
    digest, parts, size = zero_tensor_blob()
    plant(store, digest, size)
    writer = SnapshotWriter(store, signing_key)
    assert writer.put_new_blob(size, parts, DEFAULT)[0] == digest
    assert read_back(store, digest) == bytes(4 * 4096)  # read_verified checks the digest
    if store.hashes_while_writing:
        return  # locally a known digest is claimed by size: only this writer wrote that name
    plant(store, digest, size)
    assert SnapshotWriter(store, signing_key).put_blob(digest, size, lambda: parts) is True
    assert read_back(store, digest) == bytes(4 * 4096)


def test_metadata_verification_compares_the_signed_crc32c(either_store, signing_key):
    """The crc32c of every blob (where the store keeps one) is in the signed manifest, so the
    default (metadata) verification catches a blob replaced by other bytes of the same size
    after it was claimed; older manifests without it still read and verify."""
    store = either_store
    digest, parts, size = zero_tensor_blob()
    store.write_blob(digest, parts)
    writer = SnapshotWriter(store, signing_key)
    assert writer.put_blob(digest, size, lambda: parts) is False  # claimed: the bytes match
    manifest = Manifest(snapshot_id="20261201T000000Z-c0ffee", workspace=store.workspace,
                        created="2026-12-01T00:00:00+00:00", graph_blob=digest, objects=[],
                        storages={}, blobs={digest: size})
    committed = writer.commit(manifest)
    if store.hashes_while_writing:
        assert committed.blob_crc32c == {}  # a local directory keeps no crc32c
        return
    assert committed.blob_crc32c == {digest: store.blob_stat(digest)[1]}
    plant(store, digest, size)
    with pytest.raises(IntegrityError, match="holds other bytes than the manifest signed"):
        verify_committed(store, signing_key, manifest.snapshot_id)


def test_a_blob_costs_one_metadata_request_per_check_and_no_listing(gcs_faulty):
    """Claiming a new blob, writing it and checking it: each check is one object GET (404 while
    absent), never a bucket listing beside it (gcsfs's ``info`` lists the prefix too, which on
    GCS is a Class A operation and on the emulator scans the bucket)."""
    store = SnapshotStore(gcs_faulty.bucket.url, "ws", gcs_faulty.bucket.storage_options,
                          chunk_bytes=CHUNK)
    digest, parts, size = make_blob(CHUNK + 5, 9)
    writer = SnapshotWriter(store, SigningKey(b"k" * 32))
    gcs_faulty.proxy.log.clear()
    assert writer.put_blob(digest, size, lambda: parts)  # absent: claimed no, written
    crc = 0
    for part in parts:
        crc = checksum.extend(crc, part)
    assert store.blob_stat(digest) == (size, crc)
    assert store.blob_stat(DEFAULT.of([b"absent"])) is None
    requests = [f"{method} {path}" for method, path, _ in gcs_faulty.proxy.log]
    listings = [r for r in requests if r.startswith("GET") and r.split("?")[0].endswith("/o")]
    metadata = [r for r in requests if r.startswith("GET") and "/o/" in r and "alt=media" not in r]
    assert listings == []
    assert len(metadata) == 3, requests


def test_reading_a_big_blob_is_two_requests_the_first_window_telling_its_size(gcs_faulty):
    """Opening a blob bigger than the read window fetches the window, whose answer tells the
    blob's size (``Content-Range``): no metadata request; the rest is one streamed GET."""
    store = SnapshotStore(gcs_faulty.bucket.url, "ws", gcs_faulty.bucket.storage_options,
                          chunk_bytes=CHUNK)
    digest, parts, _ = make_blob(3 << 20)
    store.write_blob(digest, parts)
    gcs_faulty.proxy.log.clear()
    assert read_back(store, digest) == b"".join(bytes(p) for p in parts[1:])
    requests = [f"{method} {path}" for method, path, _ in gcs_faulty.proxy.log]
    assert len(requests) == 2 and all("alt=media" in r for r in requests), requests
