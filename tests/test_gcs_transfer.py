"""The GCS transfer layer against fake-gcs-server (and the fault proxy where faults matter):
crc32c sent with every upload and checked against the stored object, resumable chunks resumed
from the session's offset (buffered and streamed parts alike), parallel composite uploads.

fake-gcs-server stores whatever bytes arrive and computes its own crc32c: it never refuses a
mismatching one (checked in ``test_corrupted_simple_upload_is_caught``), so on the emulator the
comparison with the stored object's crc32c is what catches corruption; real GCS refuses it
server-side, which ``test_gcs_refusing_the_crc32c_is_restartable`` plays with a 400."""

from __future__ import annotations

import json
import os

import crc32c
import gcsfs
import pytest
from test_gcs_store import CHUNK, make_blob, read_back

from jupyter_gkeresume.errors import StoreError
from jupyter_gkeresume.snapshot import checksum
from jupyter_gkeresume.snapshot.store import SnapshotStore
from jupyter_gkeresume.snapshot.transfer import (
    ChecksumMismatch,
    CompositePolicy,
    StoredObject,
    stored_checksum,
    upload,
    upload_object,
)

NO_COMPOSITE = CompositePolicy(threshold=0)


def filesystem(bucket) -> gcsfs.GCSFileSystem:
    return gcsfs.GCSFileSystem(**bucket.storage_options)


def blob_bytes(size: int, seed: int = 1) -> list[bytes]:
    """``size`` random bytes in three uneven parts (chunks span parts)."""
    data = os.urandom(size)
    cut1, cut2 = size // 3 + 1, size // 2 + 7
    return [data[:cut1], data[cut1:cut2], data[cut2:]]


def expected(parts: list[bytes]) -> StoredObject:
    data = b"".join(parts)
    return StoredObject(len(data), crc32c.crc32c(data))


def upload_and_read_back(fs, path: str, parts: list[bytes], composite) -> StoredObject:
    """Upload ``parts``; the reply, the stored object's size and crc32c, and its bytes must all
    match what was sent."""
    stored = upload_object(fs, path, parts, CHUNK, composite=composite)
    assert stored == expected(parts)
    assert stored_checksum(fs, path) == (stored.size, stored.crc32c)
    assert fs.cat_file(path) == b"".join(parts)
    return stored


def leftovers(fs, bucket) -> list[str]:
    fs.invalidate_cache()
    return [p for p in fs.find(bucket.url) if ".tmp-" in p]


# -- crc32c -------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, 10, CHUNK, 3 * CHUNK + 5])
def test_upload_sends_its_crc32c_and_checks_the_stored_object(gcs_faulty, size):
    fs, path = filesystem(gcs_faulty.bucket), f"{gcs_faulty.bucket.url}/o"
    parts = blob_bytes(size)
    stored = upload_and_read_back(fs, path, parts, NO_COMPOSITE)
    sent = [f for f in gcs_faulty.proxy.forwarded if "upload" in f.path]
    ours = checksum.to_base64(stored.crc32c)
    if size <= CHUNK:  # one simple upload: the crc32c is in its metadata part
        assert f'"crc32c": "{ours}"'.encode() in sent[-1].head
    else:  # the final request of the resumable session carries it
        assert sent[-1].headers.get("X-Goog-Hash") == f"crc32c={ours}"


def test_corrupted_simple_upload_is_caught(gcs_faulty):
    """The emulator accepts a corrupted body (its answer is 200); our comparison catches it and
    removes the object."""
    fs, path = filesystem(gcs_faulty.bucket), f"{gcs_faulty.bucket.url}/o"
    parts = blob_bytes(CHUNK - 100)
    gcs_faulty.proxy.inject("corrupt", match="uploadType=multipart", after_bytes=5000)
    with pytest.raises(ChecksumMismatch, match="corrupted"):
        upload_object(fs, path, parts, CHUNK)
    assert gcs_faulty.proxy.outcomes("uploadType=multipart") == ["200"]
    assert not fs.exists(path)


def test_simple_upload_from_several_parts_is_sent_again_whole_on_a_retry(gcs_faulty):
    """The multipart body is sent from the caller's parts as they are (no joined copy); a
    transient failure sends all of it again and the stored object is exactly the parts."""
    fs, path = filesystem(gcs_faulty.bucket), f"{gcs_faulty.bucket.url}/o"
    parts = blob_bytes(CHUNK - 100)
    gcs_faulty.proxy.inject("drop_request", match="uploadType=multipart", after_bytes=3000)
    gcs_faulty.proxy.inject("status", match="uploadType=multipart", status=503)
    upload_and_read_back(fs, path, parts, NO_COMPOSITE)
    outcomes = gcs_faulty.proxy.outcomes("uploadType=multipart")
    assert outcomes[-1] == "200" and len(outcomes) == 3, outcomes


def test_a_resumable_upload_of_parts_sends_each_chunk_once_the_last_with_the_checksum(gcs_faulty):
    """Parts of exactly three chunks, cut unevenly: three chunk requests, each a chunk gathered
    from the parts as they are; the third finishes the object (with the crc32c), no empty
    finalizing request after it."""
    fs, path = filesystem(gcs_faulty.bucket), f"{gcs_faulty.bucket.url}/o"
    parts = blob_bytes(3 * CHUNK)
    upload_and_read_back(fs, path, parts, NO_COMPOSITE)
    chunks = [f for f in gcs_faulty.proxy.forwarded if "upload_id=" in f.path]
    assert [f.size for f in chunks] == [CHUNK] * 3
    assert "X-Goog-Hash" in chunks[-1].headers and "X-Goog-Hash" not in chunks[0].headers


def test_corrupted_chunk_is_caught(gcs_faulty):
    fs, path = filesystem(gcs_faulty.bucket), f"{gcs_faulty.bucket.url}/o"
    parts = blob_bytes(4 * CHUNK)
    gcs_faulty.proxy.inject("corrupt", match="upload_id=", skip=1, after_bytes=1234)
    with pytest.raises(ChecksumMismatch):
        upload_object(fs, path, parts, CHUNK)
    assert not fs.exists(path)


def test_store_restarts_an_upload_corrupted_on_the_way(gcs_faulty):
    b = gcs_faulty.bucket
    store = SnapshotStore(b.url, "ws", b.storage_options, chunk_bytes=CHUNK)
    digest, parts, size = make_blob(3 * CHUNK + 10)
    gcs_faulty.proxy.inject("corrupt", match="upload_id=", after_bytes=99)
    store.write_blob(digest, parts)
    assert store.has_blob(digest, size)
    assert read_back(store, digest) == b"".join(bytes(p) for p in parts[1:])


def test_gcs_refusing_the_crc32c_is_restartable(gcs_faulty):
    """Real GCS answers a final request whose X-Goog-Hash does not match with a 400: that is a
    ``ChecksumMismatch`` (restartable), not a permanent failure."""
    fs, path = filesystem(gcs_faulty.bucket), f"{gcs_faulty.bucket.url}/o"
    refusal = 'Provided CRC32C "AAAAAA==" doesn\'t match calculated CRC32C "yZRlqg==".'
    gcs_faulty.proxy.inject("status", match="upload_id=", skip=2, status=400, message=refusal)
    with pytest.raises(ChecksumMismatch, match="GCS refused"):
        upload_object(fs, path, blob_bytes(2 * CHUNK + 1), CHUNK)
    gcs_faulty.proxy.inject("status", match="uploadType=multipart", status=400, message=refusal)
    with pytest.raises(ChecksumMismatch):
        upload_object(fs, path, blob_bytes(100), CHUNK)


# -- resuming from the session's offset ---------------------------------------------------------
@pytest.mark.parametrize("fault", ["drop_request", "drop_response"])
@pytest.mark.parametrize("streamed", [False, True])
def test_interrupted_chunk_resumes_from_the_sessions_offset(gcs_faulty, fault, streamed):
    """The connection dies during the 5th of 8 chunks (before it arrived, or after it arrived
    but before the answer): the session is asked what it holds and only the rest is sent. One
    session, every byte received once; a streamed (one-shot iterator) blob resumes too."""
    fs, path = filesystem(gcs_faulty.bucket), f"{gcs_faulty.bucket.url}/o"
    parts = blob_bytes(8 * CHUNK)
    gcs_faulty.proxy.inject(fault, match="upload_id=", skip=4, after_bytes=100_000)
    stored = upload_object(fs, path, iter(parts) if streamed else parts, CHUNK, composite=NO_COMPOSITE)
    assert stored == expected(parts)
    assert fs.cat_file(path) == b"".join(parts)
    proxy = gcs_faulty.proxy
    started = [f for f in proxy.forwarded if "uploadType=resumable" in f.path and "upload_id" not in f.path]
    assert len(started) == 1  # never restarted
    assert "status query 308" in proxy.outcomes("upload_id=")
    assert proxy.forwarded_bytes("upload_id=") == stored.size  # nothing received twice
    # each of the 8 chunks reached the service exactly once (a restart would send all 8 again)
    assert sum(1 for f in proxy.forwarded if "upload_id=" in f.path and f.size) == 8
    assert proxy.outcomes("upload_id=").count("200") == 1


def test_streamed_blob_through_the_store_survives_a_lost_reply(gcs_faulty):
    """Before: a streamed blob whose chunk reply was lost failed (its parts cannot be read
    again for a restart). Now it resumes inside its session."""
    b = gcs_faulty.bucket
    store = SnapshotStore(b.url, "ws", b.storage_options, chunk_bytes=CHUNK)
    digest, parts, size = make_blob(CHUNK + 3, 3 * CHUNK, 11)
    gcs_faulty.proxy.inject("drop_response", match="upload_id=", skip=1)
    gcs_faulty.proxy.inject("status", match="upload_id=", count=2, status=503)
    store.write_blob(digest, (p for p in parts))
    assert store.has_blob(digest, size)
    assert read_back(store, digest) == b"".join(bytes(p) for p in parts[1:])


# -- parallel composite upload ------------------------------------------------------------------
SMALL_PARTS = CompositePolicy(threshold=CHUNK, part_bytes=CHUNK, parallel=4)
#: Parts of two chunks: each a resumable session, its name in the session-starting URL.
RESUMABLE_PARTS = CompositePolicy(threshold=CHUNK, part_bytes=2 * CHUNK, parallel=4)


@pytest.mark.parametrize("size", [CHUNK + 1, 5 * CHUNK + 7, 40 * CHUNK])
def test_large_blob_goes_up_in_composed_parts(gcs_faulty, size):
    fs, path = filesystem(gcs_faulty.bucket), f"{gcs_faulty.bucket.url}/o"
    parts = blob_bytes(size)
    upload_and_read_back(fs, path, parts, SMALL_PARTS)
    [compose] = [f for f in gcs_faulty.proxy.forwarded if f.path.split("?")[0].endswith("/compose")]
    components = json.loads(compose.head)["sourceObjects"]
    assert 2 <= len(components) <= 32
    assert leftovers(fs, gcs_faulty.bucket) == []


def composes(proxy) -> int:
    return sum(1 for f in proxy.forwarded if f.path.split("?")[0].endswith("/compose"))


def test_composite_through_the_store_by_environment(gcs_faulty, monkeypatch):
    monkeypatch.setenv("GKERESUME_COMPOSITE_MIB", "1")
    b = gcs_faulty.bucket
    store = SnapshotStore(b.url, "ws", b.storage_options, chunk_bytes=CHUNK)
    digest, parts, size = make_blob(3 << 20, 100)
    store.write_blob(digest, parts)
    assert composes(gcs_faulty.proxy) == 1
    assert store.has_blob(digest, size)
    assert read_back(store, digest) == b"".join(bytes(p) for p in parts[1:])
    assert [b.digest for b in store.list_blobs()] == [digest]
    assert store.list_partial_writes() == []


def test_failed_part_fails_the_blob_and_leaves_no_parts(gcs_faulty):
    fs, path = filesystem(gcs_faulty.bucket), f"{gcs_faulty.bucket.url}/o"
    gcs_faulty.proxy.inject("status", match=".part02", count=10**6, status=403)
    with pytest.raises(OSError, match="Forbidden"):
        upload_object(fs, path, blob_bytes(6 * CHUNK), CHUNK, composite=RESUMABLE_PARTS)
    gcs_faulty.proxy.clear()
    assert not fs.exists(path)
    assert leftovers(fs, gcs_faulty.bucket) == []


def test_corrupted_part_is_caught_and_the_store_restarts(gcs_faulty):
    b = gcs_faulty.bucket
    store = SnapshotStore(b.url, "ws", b.storage_options, chunk_bytes=CHUNK)
    digest, parts, _ = make_blob(6 * CHUNK)
    gcs_faulty.proxy.inject("corrupt", match="upload_id=", skip=1, after_bytes=777)
    with pytest.raises(ChecksumMismatch):
        upload_object(store.fs, store.blob_path(digest), parts, CHUNK, composite=RESUMABLE_PARTS)
    assert not store.has_blob(digest) and store.list_partial_writes() == []
    gcs_faulty.proxy.inject("corrupt", match="upload_id=", skip=1, after_bytes=777)
    with pytest.MonkeyPatch.context() as m:
        m.setenv("GKERESUME_COMPOSITE_MIB", "1")
        store.write_blob(digest, parts)
    assert composes(gcs_faulty.proxy) == 1  # the first attempt failed before composing
    assert read_back(store, digest) == b"".join(bytes(p) for p in parts[1:])


def test_parts_a_writer_left_behind_are_partial_writes_for_gc(gcs_faulty):
    """Compose refused and the cleanup too (as if the writer died): the parts are exactly what
    ``list_partial_writes`` reports, and ``delete_partial_write`` removes them."""
    b = gcs_faulty.bucket
    store = SnapshotStore(b.url, "ws", b.storage_options, chunk_bytes=CHUNK)
    digest, parts, _ = make_blob(3 * CHUNK)
    gcs_faulty.proxy.inject("status", match="/compose", count=10**6, status=403)
    gcs_faulty.proxy.inject("status", match="DELETE", count=10**6, status=403)
    gcs_faulty.proxy.inject("status", match="/batch", count=10**6, status=403)
    with pytest.raises(OSError):
        upload(store.fs, store.blob_path(digest), parts, CHUNK, composite=SMALL_PARTS)
    gcs_faulty.proxy.clear()
    partial = store.list_partial_writes()
    assert len(partial) >= 2
    assert all(p.startswith(store.blob_path(digest) + ".tmp-") for p, _, _ in partial)
    assert store.list_blobs() == []
    for path, _, _ in partial:
        store.delete_partial_write(path)
    assert store.list_partial_writes() == []


def test_composite_policy_from_environment():
    assert CompositePolicy.from_env({}) == CompositePolicy()
    assert CompositePolicy.from_env({"GKERESUME_COMPOSITE_MIB": "0"}).applies(10**12) is False
    assert CompositePolicy.from_env({"GKERESUME_COMPOSITE_MIB": "256"}) == CompositePolicy(256 << 20)
    assert CompositePolicy.from_env({"GKERESUME_COMPOSITE_MIB": "1"}).part_bytes == 512 << 10
    with pytest.raises(ValueError, match="GKERESUME_COMPOSITE_MIB"):
        CompositePolicy.from_env({"GKERESUME_COMPOSITE_MIB": "lots"})
    with pytest.raises(ValueError, match="256 KiB"):
        CompositePolicy(part_bytes=1000)


def test_stored_checksum_elsewhere_has_no_crc(tmp_path):
    import fsspec

    fs = fsspec.filesystem("file")
    path = str(tmp_path / "blob")
    assert upload_object(fs, path, [b"abc", b"de"], CHUNK) == StoredObject(5, None)
    assert stored_checksum(fs, path) == (5, None)


def test_store_error_names_the_store_when_every_attempt_is_corrupted(gcs_faulty):
    b = gcs_faulty.bucket
    store = SnapshotStore(b.url, "ws", b.storage_options, chunk_bytes=CHUNK, retries=1)
    digest, parts, _ = make_blob(5000)
    gcs_faulty.proxy.inject("corrupt", match="uploadType=multipart", count=10, after_bytes=3000)
    with pytest.raises(StoreError, match=r"write blob failed in SnapshotStore.*ChecksumMismatch"):
        store.write_blob(digest, parts)
    assert not store.has_blob(digest)
