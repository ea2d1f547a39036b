"""Snapshot format v1 pieces without a kernel: blob files, local store commit, ids, workspace."""

from __future__ import annotations

import io
import os
import time

import numpy as np
import pytest
from fixtures_lifecycle import make_snapshot
from safetensors.numpy import load_file

from jupyter_gkeresume.errors import CommitConflictError, IntegrityError, InvalidInputError, ManifestError
from jupyter_gkeresume.snapshot import Manifest, StorageRef
from jupyter_gkeresume.snapshot.blobfile import blob_digest, layout_for, read_verified
from jupyter_gkeresume.snapshot.format import (
    PathRecord,
    validate_snapshot_id,
    validate_snapshot_name,
)
from jupyter_gkeresume.snapshot.signing import verify
from jupyter_gkeresume.snapshot.store import SnapshotStore
from jupyter_gkeresume.workspace import resolve_store_url, resolve_workspace_id
from kernel_hooks.loader import read_order


def make_blob(arrays: list[np.ndarray]) -> tuple[bytes, str]:
    layout = layout_for([(a.dtype.name, a.nbytes) for a in arrays])
    digest = blob_digest(layout, arrays)
    return layout.header + b"".join(a.tobytes() for a in arrays), digest


def test_blobs_are_plain_safetensors_files(tmp_path):
    arrays = [np.arange(6, dtype=np.float32), np.array([1, 2], dtype=np.int64),
              np.zeros(3, dtype=np.uint8)]
    data, _ = make_blob(arrays)
    (tmp_path / "b.safetensors").write_bytes(data)
    loaded = load_file(str(tmp_path / "b.safetensors"))
    for i, a in enumerate(arrays):
        np.testing.assert_array_equal(loaded[str(i)], a)


def test_same_content_same_digest_and_layout_is_deterministic():
    a = [np.arange(1000, dtype=np.float64)]
    assert make_blob(a)[1] == make_blob([a[0].copy()])[1]
    assert make_blob(a)[1] != make_blob([a[0] + 1])[1]


def test_read_verified_fills_buffers_and_catches_damage():
    arrays = [np.arange(50_000, dtype=np.float32), np.arange(7, dtype=np.int16)]
    data, digest = make_blob(arrays)
    out = [np.empty_like(a) for a in arrays]
    read_verified(io.BytesIO(data), digest, len(data), lambda i, n: memoryview(out[i]).cast("B"))
    for got, want in zip(out, arrays, strict=True):
        np.testing.assert_array_equal(got, want)
    flipped = bytearray(data)
    flipped[-3] ^= 1
    with pytest.raises(IntegrityError, match="corrupt"):
        read_verified(io.BytesIO(bytes(flipped)), digest, len(data), lambda i, n: None)
    with pytest.raises(IntegrityError):
        read_verified(io.BytesIO(data[:-10]), digest, len(data), lambda i, n: None)
    with pytest.raises(IntegrityError, match="header"):
        read_verified(io.BytesIO(b"\xff" * 64), digest, 64, lambda i, n: None)


def test_local_store_commit_is_create_only_and_blobs_are_durable(tmp_path):
    store = SnapshotStore(str(tmp_path), "ws")
    data, digest = make_blob([np.arange(10, dtype=np.float32)])
    store.write_blob(digest, [data])
    store.write_blob(digest, [data])  # idempotent
    assert store.has_blob(digest, len(data)) and not store.has_blob(digest, len(data) + 1)
    sid = "20261130T101500Z-a1b2c3"
    store.commit_manifest(sid, b"{}")
    with pytest.raises(CommitConflictError):
        store.commit_manifest(sid, b"{}")
    assert store.list_snapshot_ids() == [sid]
    leftovers = [p for p in (tmp_path / "ws").rglob("*") if ".tmp-" in p.name]
    assert leftovers == []


@pytest.mark.parametrize("bad", ["../x", "20261130T101500Z-A1B2C3", "x/../../y", "", 5])
def test_ids_and_names_are_validated(bad):
    with pytest.raises(InvalidInputError):
        validate_snapshot_id(bad)


@pytest.mark.parametrize("bad", ["../../etc", "latest", "a b", "x" * 101, "20261130T101500Z-a1b2c3"])
def test_bad_names_are_refused(bad):
    with pytest.raises(InvalidInputError):
        validate_snapshot_name(bad)


def test_workspace_id_is_stable_across_pods():
    hub = {"JUPYTERHUB_USER": "Ana@Example.org", "JUPYTERHUB_SERVER_NAME": "gpu", "HOSTNAME": "pod-1"}
    assert resolve_workspace_id(env=hub) == resolve_workspace_id(env={**hub, "HOSTNAME": "pod-2"})
    assert resolve_workspace_id(env=hub).startswith("hub-ana-example-org-gpu.")  # + digest
    kf = {"NB_PREFIX": "/notebook/team/trainer"}
    assert resolve_workspace_id(env=kf) == "kf-team-trainer"
    assert resolve_workspace_id(env={"GKERESUME_WORKSPACE": "mine", **kf}) == "mine"
    with pytest.raises(InvalidInputError):
        resolve_workspace_id("../escape")


def test_store_url_resolution_order(tmp_path):
    assert resolve_store_url("gs://b/p", env={"GKERESUME_STORE": "x"}) == "gs://b/p"
    assert resolve_store_url(None, env={"GKERESUME_STORE": str(tmp_path)}) == str(tmp_path)
    assert resolve_store_url(None, env={}).endswith(os.path.join("gkeresume", "store"))


def test_a_local_store_opens_where_fsspec_would_open_it_without_fsspec(tmp_path, monkeypatch):
    """A plain path or ``file://`` URL names the folder fsspec's ``LocalFileSystem`` would (so a
    store written before is found again), opened without fsspec (its import reads every
    distribution's entry points); any other URL goes to fsspec; ``fs`` is there for tools."""
    import fsspec

    from jupyter_gkeresume.snapshot.backends import LocalBackend, local_root

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for url in ("store", "./store", ".", str(tmp_path / "store") + "/", f"file://{tmp_path}/store",
                "~/store", "store/../other", "/"):
        assert local_root(url) == fsspec.core.url_to_fs(url)[1], url
        if url != "/":  # not opened: it would make /ws
            store = SnapshotStore(url, "ws")
            assert isinstance(store.backend, LocalBackend)
            assert store.root == f"{local_root(url).rstrip('/')}/ws"
    for url in ("gs://bucket/prefix", "memory://x", "simplecache::gs://bucket/x", ""):
        assert local_root(url) is None, url
    from fsspec.implementations.local import LocalFileSystem

    assert isinstance(store.fs, LocalFileSystem) and store.fs.isdir(str(tmp_path))


def test_claiming_a_blob_refreshes_its_age_for_gc(tmp_path):
    store = SnapshotStore(str(tmp_path), "ws")
    data, digest = make_blob([np.arange(10, dtype=np.float32)])
    assert not store.claim_blob(digest, len(data))
    store.write_blob(digest, [data])
    path = store.blob_path(digest)
    os.utime(path, (1_000_000, 1_000_000))
    (before,) = store.list_blobs()
    assert before.mtime == 1_000_000
    assert store.claim_blob(digest, len(data))
    (after,) = store.list_blobs()
    assert after.mtime > 1_000_000_000
    assert not store.claim_blob(digest, len(data) + 1)


def test_deeply_nested_blob_header_is_an_integrity_error():
    header = b"[" * 100_000
    raw = len(header).to_bytes(8, "little") + header
    with pytest.raises(IntegrityError):
        read_verified(io.BytesIO(raw), "0" * 64, len(raw), lambda i, n: None)


def test_claiming_a_blob_on_gcs_refreshes_its_age(gcs_bucket):
    store = SnapshotStore(gcs_bucket.url, "ws", gcs_bucket.storage_options)
    data, digest = make_blob([np.arange(10, dtype=np.float32)])
    store.write_blob(digest, [data])
    (before,) = store.list_blobs()
    time.sleep(1.1)
    assert store.claim_blob(digest, len(data))
    (after,) = store.list_blobs()
    assert after.mtime >= before.mtime + 1


def test_snapshot_ids_sort_by_creation_time_within_a_second():
    from datetime import datetime, timezone

    from jupyter_gkeresume.snapshot.catalog import new_snapshot_id

    base = datetime(2026, 11, 30, 10, 15, 0, tzinfo=timezone.utc)
    ids = [new_snapshot_id(base.replace(microsecond=ms * 1000)) for ms in (0, 1, 15, 16, 500, 999)]
    assert ids == sorted(ids)
    assert all(validate_snapshot_id(i) for i in ids)


def test_populating_new_memory_faults_it_in_and_keeps_what_it_holds():
    """The resume faults in each host buffer at once before reading into it: on Linux 5.14+
    that is one madvise call, which must never change bytes already there; a range smaller
    than a page is left alone."""
    import platform

    from kernel_hooks.memory import populate

    release = tuple(int(x) for x in platform.release().split("-")[0].split(".")[:2])
    data = np.arange(3 << 20, dtype=np.uint8)  # 3 MiB, partly touched
    expected = data.copy()
    done = populate(data.ctypes.data, data.nbytes)
    assert done is (platform.system() == "Linux" and release >= (5, 14))
    assert np.array_equal(data, expected)
    fresh = np.empty(1 << 20, dtype=np.uint8)
    assert populate(fresh.ctypes.data, fresh.nbytes) is done
    fresh[:] = 7
    assert int(fresh.sum()) == 7 << 20
    assert populate(data.ctypes.data + 1, 100) is False


def test_blob_crc32c_is_signed_optional_and_checked(local_store, signing_key):
    """``blob_crc32c`` is part of what the signature covers, absent from older manifests (which
    still parse), and must name listed blobs with 32-bit values."""
    m = make_snapshot(local_store, signing_key)
    assert "blob_crc32c" not in m.to_dict() and Manifest.from_json(m.to_json()).blob_crc32c == {}
    m.blob_crc32c = {m.graph_blob: 0xDEADBEEF}
    assert Manifest.from_json(m.to_json()).blob_crc32c == {m.graph_blob: 0xDEADBEEF}
    with pytest.raises(IntegrityError, match="signature mismatch"):
        verify(m, signing_key)
    for bad, fragment in (({"b3-" + "0" * 64: 1}, "names unlisted blob"),
                          ({m.graph_blob: 1 << 32}, "is not a crc32c"),
                          ({m.graph_blob: "x"}, "wrong type")):
        with pytest.raises(ManifestError, match=fragment):
            Manifest.from_dict({**m.to_dict(), "blob_crc32c": bad})


def test_hash_seed_is_signed_optional_and_checked(local_store, signing_key):
    """``hash_seed`` (the kernel's PYTHONHASHSEED) is covered by the signature, absent from
    older manifests and from those of a kernel with random hashes (which still parse and keep
    their signature), and must be a seed Python accepts: it goes into a kernel's environment."""
    m = make_snapshot(local_store, signing_key)
    assert "hash_seed" not in m.to_dict() and Manifest.from_json(m.to_json()).hash_seed is None
    m.hash_seed = "4294967295"
    assert Manifest.from_json(m.to_json()).hash_seed == "4294967295"
    with pytest.raises(IntegrityError, match="signature mismatch"):
        verify(m, signing_key)
    for bad in ("4294967296", "-1", "1 ", "random", "\u0663", 7):
        with pytest.raises(ManifestError, match="hash_seed"):
            Manifest.from_dict({**m.to_dict(), "hash_seed": bad})


def test_extra_paths_are_optional_and_checked(local_store, signing_key):
    """``extra_paths`` is absent from older manifests (which keep their signature); each names
    an absolute normalized directory, a listed blob, one mode per file and files inside it."""
    m = make_snapshot(local_store, signing_key)
    assert "extra_paths" not in m.to_dict() and Manifest.from_json(m.to_json()).extra_paths == []
    good = {"path": "/data/x", "blob": m.graph_blob, "files": ["a", "s/b"], "modes": [420, 493]}
    parsed = Manifest.from_dict({**m.to_dict(), "extra_paths": [good]}).extra_paths
    assert parsed == [PathRecord("/data/x", m.graph_blob, ["a", "s/b"], [420, 493])]
    for bad, fragment in (({"path": "data/x"}, "absolute normalized"),
                          ({"path": "/data/../x"}, "absolute normalized"),
                          ({"blob": "b3-" + "0" * 64}, "unlisted blob"),
                          ({"modes": [420]}, "bad modes"),
                          ({"modes": [420, 1 << 16]}, "bad modes"),
                          ({"files": ["a", "../b"]}, "not relative and inside"),
                          ({"files": ["a", "s/../../b"]}, "not relative and inside"),
                          ({"files": ["a", "/b"]}, "not relative and inside")):
        with pytest.raises(ManifestError, match=fragment):
            Manifest.from_dict({**m.to_dict(), "extra_paths": [{**good, **bad}]})


def test_blobs_are_read_big_ones_first_then_in_the_order_the_unpickler_needs_them():
    """A resume reads the blobs that bound the read time first, then the others in pickling
    order (``s0, s1, ...``: the unpickler waits for each storage's verified blob)."""
    sizes = {"big": 900, "s2-blob": 10, "s0-blob": 30, "s1-blob": 20, "other-big": 1000}
    storages = {f"s{i}": StorageRef(blob, 0, 1, "uint8", "cpu", "numpy", "x") for i, blob in
                enumerate(["s0-blob", "s1-blob", "s2-blob", "big", "other-big", "s0-blob"])}
    storages = dict(sorted(storages.items()))  # as a manifest parses: keys sorted as text
    manifest = Manifest("20261201T000000Z-000001", "ws", "", "s0-blob", [], storages, sizes)
    assert read_order(manifest, 4) == ["other-big", "big", "s0-blob", "s1-blob", "s2-blob"]
    assert read_order(manifest, 1) == ["s0-blob", "s1-blob", "s2-blob", "big", "other-big"]


def test_blob_layouts_of_few_entries_are_kept_and_those_of_many_are_not():
    """A checkpoint asks for every blob's layout again: those of few entries are kept (the same
    object next time), those of many small storages are made each time (kept, their headers
    would grow with the session); both are the same bytes as a layout made afresh."""
    from jupyter_gkeresume.snapshot import blobfile

    few = [("float32", 4096 * (i + 1)) for i in range(blobfile.KEPT_LAYOUT_ENTRIES)]
    many = [("float32", 4096 * (i + 1)) for i in range(blobfile.KEPT_LAYOUT_ENTRIES + 1)]
    assert blobfile.layout_for(few) is blobfile.layout_for(list(few))
    kept = blobfile._kept_layout.cache_info().currsize
    assert blobfile.layout_for(many) is not blobfile.layout_for(many)
    assert blobfile._kept_layout.cache_info().currsize == kept
    for entries in (few, many):
        assert blobfile.layout_for(entries) == blobfile._layout(tuple(entries))
