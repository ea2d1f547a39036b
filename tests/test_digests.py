"""The digest registry, blob names of both algorithms in one store, hash-while-write, and the
per-algorithm skip-cache of the blob writer."""

from __future__ import annotations

import hashlib
import io
import os

import blake3
import numpy as np
import pytest
import xxhash

from jupyter_gkeresume.errors import IntegrityError, InvalidInputError
from jupyter_gkeresume.snapshot import SigningKey, SnapshotStore, SnapshotWriter, backends, digests
from jupyter_gkeresume.snapshot import store as store_module
from jupyter_gkeresume.snapshot.blobfile import blob_digest, layout_for, read_verified
from jupyter_gkeresume.snapshot.digests import ALGORITHMS, BLAKE3, DEFAULT, SHA256, algorithm_of
from kernel_hooks import blobwriter
from kernel_hooks.blobwriter import BlobWriter, cache_key, remember_blob

DATA = bytes(range(256)) * 4096  # 1 MiB
KEY = SigningKey(b"digests-test-key")


def test_registry_names_each_algorithm_by_its_digest_string():
    sha = hashlib.sha256(DATA).hexdigest()
    b3 = "b3-" + blake3.blake3(DATA).hexdigest()
    assert SHA256.of([DATA]) == sha
    assert BLAKE3.of([DATA[:1000], DATA[1000:]], len(DATA)) == b3
    assert algorithm_of(sha) is SHA256 and algorithm_of(b3) is BLAKE3
    assert DEFAULT is BLAKE3 and set(ALGORITHMS) == {SHA256, BLAKE3}
    assert digests.hex_part(b3) == b3[3:] and digests.hex_part(sha) == sha
    assert digests.is_digest(sha) and digests.is_digest(b3) and digests.validate_digest(b3) == b3


@pytest.mark.parametrize("bad", [
    "", "b3-", "B3-" + "a" * 64, "b3-" + "A" * 64, "a" * 63, "a" * 65, "b3-" + "a" * 63,
    "sha256-" + "a" * 64, "a" * 64 + "\n", "b3-" + "a" * 64 + "\n", "\n" + "a" * 64,
    "../" + "a" * 61, "b3-../" + "a" * 58, None, 12, b"a" * 64,
])
def test_malformed_digests_are_refused(bad):
    with pytest.raises(InvalidInputError, match="not a blob digest"):
        algorithm_of(bad)
    assert not isinstance(bad, str) or not digests.is_digest(bad)


def test_big_buffers_hash_the_same_with_every_core():
    big = np.random.default_rng(1).integers(0, 255, digests.PARALLEL_HASH_BYTES + 4097, dtype=np.uint8)
    assert BLAKE3.of([big], big.nbytes) == BLAKE3.of([big], 0)  # threaded vs one thread
    assert BLAKE3.of([big], big.nbytes) == "b3-" + blake3.blake3(big.tobytes()).hexdigest()


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
def test_read_verified_uses_the_algorithm_the_digest_names(algorithm):
    entries = [b"x" * 5000, bytes(range(200))]
    layout = layout_for([("uint8", len(e)) for e in entries])
    digest = blob_digest(layout, entries, algorithm)
    data = layout.header + b"".join(entries)
    read_verified(io.BytesIO(data), digest, len(data), lambda i, n: None)
    other = next(a for a in ALGORITHMS if a is not algorithm)
    wrong_name = other.prefix + digests.hex_part(digest)  # same hex under the other algorithm's name
    with pytest.raises(IntegrityError, match="does not match"):
        read_verified(io.BytesIO(data), wrong_name, len(data), lambda i, n: None)


def test_store_keeps_both_kinds_side_by_side(tmp_path):
    store = SnapshotStore(str(tmp_path), "ws")
    entries = [b"same bytes" * 100]
    layout = layout_for([("uint8", len(entries[0]))])
    names = {a.name: blob_digest(layout, entries, a) for a in ALGORITHMS}
    for digest in names.values():
        store.write_blob(digest, [layout.header, *entries])
    sha_hex = names["sha256"]
    assert store.blob_path(names["blake3"]).endswith(f"/{digests.hex_part(names['blake3'])[:2]}/"
                                                    f"{names['blake3']}.safetensors")
    assert store.blob_path(sha_hex).endswith(f"/{sha_hex[:2]}/{sha_hex}.safetensors")
    assert {b.digest for b in store.list_blobs()} == set(names.values())
    for digest in names.values():
        with store.open_blob(digest) as (f, size):
            read_verified(f, digest, size, lambda i, n: None)


def test_write_blob_hashing_names_the_file_by_its_bytes_in_one_pass(tmp_path):
    store = SnapshotStore(str(tmp_path), "ws")
    payload = np.arange(3 << 20, dtype=np.uint8)  # 3 MiB: several write chunks with small ones
    layout = layout_for([("uint8", payload.nbytes)])
    parts = [layout.header, payload]
    digest, new = store.write_blob_hashing(parts, BLAKE3, layout.size)
    assert new and digest == blob_digest(layout, [payload], BLAKE3)
    assert store.has_blob(digest, layout.size)
    assert store.list_partial_writes() == []  # the temporary file was linked, then dropped
    # the same name again: ours replace what is there (a new file, young for gc), not new
    path = store.blob_path(digest)
    inode = os.stat(path).st_ino
    os.utime(path, (1, 1))
    assert store.write_blob_hashing(parts, BLAKE3, layout.size) == (digest, False)
    assert os.stat(path).st_ino != inode and os.stat(path).st_mtime > 1
    assert [b.digest for b in store.list_blobs()] == [digest] and store.list_partial_writes() == []
    with store.open_blob(digest) as (f, size):
        read_verified(f, digest, size, lambda i, n: None)


def test_the_one_pass_write_hashes_each_chunk_just_before_it_copies_it(tmp_path, monkeypatch):
    """Issue 31 item 4: each byte read from memory once. The hash sees a chunk of at most
    ``OBSERVED_CHUNK`` (it stays in the core's cache) and the very same chunk is written next;
    the digest is the one a separate pass gives, and the file holds the bytes."""
    events: list[tuple[str, bytes]] = []

    class Recording(io.BytesIO):
        def write(self, data):
            events.append(("write", bytes(data)))
            return super().write(data)

    payload = np.random.default_rng(0).integers(0, 256, (3 << 20) + 12345, dtype=np.uint8)
    parts = [b"header", payload, b"", memoryview(b"tail" * 1000)]
    hasher = BLAKE3.new(0)

    def observe(chunk):
        events.append(("hash", bytes(chunk)))
        hasher.update(chunk)

    out = Recording()
    backends.write_parts(out, parts, observe, backends.OBSERVED_CHUNK)
    assert [kind for kind, _ in events] == ["hash", "write"] * (len(events) // 2)
    assert all(h == w for (_, h), (_, w) in zip(events[::2], events[1::2], strict=True))
    assert max(len(data) for _, data in events) == backends.OBSERVED_CHUNK
    joined = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
    assert out.getvalue() == joined and BLAKE3.finish(hasher) == BLAKE3.of(parts)

    store = SnapshotStore(str(tmp_path), "ws")  # the store's one pass names it the same way
    steps = []
    write = store.backend.write_named_by_content
    monkeypatch.setattr(store.backend, "write_named_by_content",
                        lambda *args: steps.append(args[-1]) or write(*args))
    layout = layout_for([("uint8", payload.nbytes)])
    digest, _ = store.write_blob_hashing([layout.header, payload], BLAKE3, layout.size)
    assert digest == blob_digest(layout, [payload], BLAKE3)
    with store.open_blob(digest) as (f, _):
        assert f.read() == layout.header + payload.tobytes()
    # a blob BLAKE3 hashes with every core is fed big chunks: 1 MiB pieces cost its threads more
    monkeypatch.setattr(store_module, "PARALLEL_HASH_BYTES", 1 << 20)
    assert store.write_blob_hashing([layout.header, payload], BLAKE3, layout.size)[0] == digest
    assert steps == [backends.OBSERVED_CHUNK, backends.WRITE_CHUNK]


@pytest.mark.parametrize("damage", ["truncated", "other bytes of the same size"])
def test_write_blob_hashing_replaces_whatever_was_under_the_name(tmp_path, damage):
    """A file under the digest's name is never kept as the blob: truncated, or other bytes of
    the same size planted under the predictable name (issue 22 item 3)."""
    store = SnapshotStore(str(tmp_path), "ws")
    layout = layout_for([("uint8", len(DATA))])
    digest, _ = store.write_blob_hashing([layout.header, DATA], BLAKE3, layout.size)
    path = store.blob_path(digest)
    with open(path, "r+b") as f:
        if damage == "truncated":
            f.truncate(100)
        else:
            f.write(os.urandom(layout.size))
    assert store.write_blob_hashing([layout.header, DATA], BLAKE3, layout.size) == (digest, False)
    assert store.blob_size(digest) == layout.size and store.list_partial_writes() == []
    with store.open_blob(digest) as (f, size):
        read_verified(f, digest, size, lambda i, n: None)


def test_write_blob_hashing_leaves_nothing_when_a_part_fails(tmp_path):
    store = SnapshotStore(str(tmp_path), "ws")

    def parts():
        yield b"head"
        raise OSError("device went away")

    with pytest.raises(Exception, match="device went away"):
        store.write_blob_hashing(parts(), BLAKE3, 100)
    assert store.list_blobs() == [] and store.list_partial_writes() == []


def blob_writer(store: SnapshotStore) -> BlobWriter:
    return BlobWriter(SnapshotWriter(store, KEY))


@pytest.fixture
def empty_cache(monkeypatch):
    monkeypatch.setattr(blobwriter, "_digest_cache", type(blobwriter._digest_cache)())
    return blobwriter._digest_cache


def test_new_content_is_written_once_then_reused_from_the_cache(tmp_path, empty_cache):
    store = SnapshotStore(str(tmp_path), "ws")
    array = np.arange(1 << 18, dtype=np.float32)
    writer = blob_writer(store)
    digest, size, new = writer.write_views([("float32", array)])
    assert new and algorithm_of(digest) is DEFAULT
    assert len(empty_cache) == 1
    os.utime(store.blob_path(digest), (1, 1))  # old: a reuse must refresh it for gc
    assert writer.write_views([("float32", array)]) == (digest, size, False)
    assert os.stat(store.blob_path(digest)).st_mtime > 1
    store.delete_blob(digest)  # gone from the store (say, another gc): written again by name
    assert writer.write_views([("float32", array)]) == (digest, size, True)
    assert store.has_blob(digest, size)


def test_new_dtypes_and_sizes_are_keyed_on_the_way_and_seen_ones_before_writing(
        tmp_path, empty_cache, monkeypatch):
    """Issue 31 item 4: content whose dtypes and sizes no cached blob has cannot hit, so its
    xxh3 key is taken chunk by chunk while the blob is hashed and written (no pass of its own
    over the bytes), and it is the key a whole pass gives: the same bytes hit next time. Content
    of a shape seen before is keyed first, so unchanged bytes are never written again. Blobs
    from 64 MiB (hashed by every core, in 16 MiB chunks) too."""
    passes = []
    whole_pass = xxhash.xxh3_128_digest
    monkeypatch.setattr(xxhash, "xxh3_128_digest", lambda v: passes.append(len(v)) or whole_pass(v))
    store = SnapshotStore(str(tmp_path), "ws")
    writer = blob_writer(store)
    for array in (np.arange(3 << 18, dtype=np.float32), np.zeros(70 << 20, dtype=np.uint8)):
        view = memoryview(array).cast("B")
        digest, size, new = writer.write_views([("float32", array)])
        assert new and passes == []
        assert digest == blob_digest(layout_for([("float32", array.nbytes)]), [view], DEFAULT)
        assert cache_key(DEFAULT, ["float32"], [view]) in empty_cache
        passes.clear()
        assert writer.write_views([("float32", array)]) == (digest, size, False)
        assert passes == [array.nbytes]  # the seen shape: keyed first, a hit, nothing written
        passes.clear()
        changed = array.copy()
        changed[-1] += 1
        other, _, new = writer.write_views([("float32", changed)])
        assert new and other != digest and passes == [array.nbytes]
        passes.clear()


def test_skip_cache_is_per_algorithm(tmp_path, empty_cache):
    """A sha256 digest learned from a v1 resume never names a blob the writer makes now."""
    store = SnapshotStore(str(tmp_path), "ws")
    array = np.arange(1 << 16, dtype=np.int64)
    view = memoryview(array).cast("B")
    layout = layout_for([("int64", array.nbytes)])
    sha = blob_digest(layout, [view], SHA256)
    remember_blob(sha, ["int64"], [view])
    assert cache_key(SHA256, ["int64"], [view]) in empty_cache
    assert cache_key(BLAKE3, ["int64"], [view]) not in empty_cache
    digest, _, new = blob_writer(store).write_views([("int64", array)])
    assert new and digest == blob_digest(layout, [view], BLAKE3) != sha
    assert cache_key(BLAKE3, ["int64"], [view]) in empty_cache


def test_a_remembered_blake3_blob_is_reused_without_writing(tmp_path, empty_cache):
    """What a resume read and verified is reused by the next checkpoint (not written again)."""
    store = SnapshotStore(str(tmp_path), "ws")
    array = np.arange(1 << 16, dtype=np.int64)
    layout = layout_for([("int64", array.nbytes)])
    digest, _ = store.write_blob_hashing([layout.header, array], BLAKE3, layout.size)
    remember_blob(digest, ["int64"], [memoryview(array).cast("B")])
    assert blob_writer(store).write_views([("int64", array.copy())]) == (digest, layout.size, False)


def test_new_content_the_store_already_has_is_reported_reused(tmp_path, empty_cache):
    """Another kernel (or the GPU path) wrote these bytes: hashed while written, then the blob
    there is kept and nothing counts as new."""
    store = SnapshotStore(str(tmp_path), "ws")
    array = np.arange(1 << 16, dtype=np.int64)
    first = blob_writer(store).write_views([("int64", array)])
    empty_cache.clear()
    assert blob_writer(store).write_views([("int64", array.copy())]) == (first[0], first[1], False)
    assert store.list_partial_writes() == []


def test_a_resume_seeds_the_skip_cache_so_nothing_it_read_is_written_again(tmp_path, monkeypatch,
                                                                           empty_cache):
    """Every storage blob a resume read and verified (a tensor and an array alone, a pack of two
    arrays) is in the skip-cache after it: the next checkpoint claims them, the files are not
    written again. (Restored arrays once sat on uint8 buffers: labelled uint8, their blobs got
    other headers and were written again at the first checkpoint after every resume.)"""
    import torch

    import kernel_hooks
    from jupyter_gkeresume.snapshot import load_manifest, load_signing_key

    monkeypatch.setenv("GKERESUME_SIGNING_KEY", "skip-cache-test-key-" + "3" * 32)
    root = str(tmp_path / "store")
    saved = {"w": torch.randn(300_000), "a": np.arange(300_000.0),
             "pack": [np.arange(20_000.0), np.arange(30_000, dtype=np.int32)]}
    first = kernel_hooks.checkpoint(namespace=saved, store=root, workspace="ws")
    store = SnapshotStore(root, "ws")
    manifest = load_manifest(store, first.snapshot_id, load_signing_key(workspace="ws"))
    ours = [ref for ref in manifest.storages.values() if ref.owner in saved]
    blobs = {ref.blob for ref in ours}
    assert len(blobs) == 3 and len(ours) == 4
    inodes = {d: os.stat(store.blob_path(d)).st_ino for d in blobs}
    empty_cache.clear()  # a fresh kernel: nothing learned from the checkpoint

    restored: dict = {}
    kernel_hooks.resume(first.snapshot_id, namespace=restored, store=root, workspace="ws")
    assert blobs <= set(empty_cache.values())
    again = kernel_hooks.checkpoint(namespace=restored, store=root, workspace="ws")
    assert again.bytes_reused >= sum(manifest.blobs[d] for d in blobs)
    assert {d: os.stat(store.blob_path(d)).st_ino for d in blobs} == inodes
    assert restored["pack"][1].dtype == np.int32 and restored["a"].base.dtype == np.float64
