"""CUDA storages reach blobs through the engine's pinned ring (simulated driver, real local store).

The blob written from device memory must be byte-for-byte the blob the CPU path writes for the
same bytes (same digest: content addressing and dedup hold across paths), read back verified,
with host memory bounded by the ring.
"""

from __future__ import annotations

import pytest
from fixtures_gpu import SimulatedDriver
from traitlets.config import Config

import kernel_hooks.cuda_engine as cuda_engine
from jupyter_gkeresume.snapshot import SigningKey, SnapshotStore
from jupyter_gkeresume.snapshot.blobfile import read_verified
from jupyter_gkeresume.snapshot.writer import SnapshotWriter
from kernel_hooks.blobwriter import BlobWriter, plan_blobs
from kernel_hooks.cuda_engine import CudaEngine
from kernel_hooks.storages import CollectedStorage

np = pytest.importorskip("numpy")
CHUNK = 64 << 10
KEY = SigningKey(b"blobwriter-test-key")


@pytest.fixture
def engine(monkeypatch):
    driver = SimulatedDriver(gpus=2, progress="random", seed=11)
    engine = CudaEngine(driver, config=Config({"CudaEngine": {"chunk_bytes": CHUNK, "buffers": 3}}))
    monkeypatch.setattr(cuda_engine, "_engine", engine)
    return engine


def stored(key: str, data: bytes, device: str, owner: str, driver=None,
           dtype: str = "float16") -> CollectedStorage:
    if device == "cpu":
        array = np.frombuffer(bytearray(data), dtype=np.uint8)
        return CollectedStorage(key, "numpy", dtype, len(data), "cpu", owner, array,
                                array.ctypes.data)
    ptr = driver.device_buffer(int(device.split(":")[1]), data)
    return CollectedStorage(key, "torch", dtype, len(data), device, owner, None, ptr)


def read_entries(store: SnapshotStore, digest: str) -> list[bytes]:
    entries: dict[int, bytearray] = {}

    def destination(entry: int, nbytes: int) -> memoryview:
        entries[entry] = bytearray(nbytes)
        return memoryview(entries[entry])

    with store.open_blob(digest) as (f, size):
        read_verified(f, digest, size, destination)
    return [bytes(entries[i]) for i in sorted(entries)]


def test_cuda_storages_stream_into_the_same_blobs_as_host_bytes(engine, tmp_path):
    driver = engine._drv
    rng = np.random.default_rng(0)
    big = rng.integers(0, 256, 20 * CHUNK + 6, dtype=np.uint8).tobytes()  # > 1 MiB: own blob
    small = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in (10, 4096, 0, 2 * CHUNK)]
    items = [stored("s0", big, "cuda:1", "model", driver)] + [
        stored(f"s{i + 1}", data, ("cuda:0", "cpu")[i % 2], "opt", driver)
        for i, data in enumerate(small)
    ]
    store = SnapshotStore(str(tmp_path / "store"), "ws-gpu")
    written = BlobWriter(SnapshotWriter(store, KEY), concurrency=2).write_all(plan_blobs(items))
    assert written.new_bytes > 0 and written.reused_bytes == 0
    expected = {"s0": big, **{f"s{i + 1}": d for i, d in enumerate(small)}}
    for key, ref in written.refs.items():
        assert read_entries(store, ref.blob)[ref.entry] == expected[key]
        assert ref.device == next(m.device for m in items if m.key == key)
    assert driver.pinned_peak <= 3 * CHUNK

    # The same bytes from host memory give the same blobs: nothing new is written.
    host_items = [stored(m.key, expected[m.key], "cpu", m.owner, dtype=m.dtype) for m in items]
    again = BlobWriter(SnapshotWriter(store, KEY)).write_all(plan_blobs(host_items))
    assert {r.blob for r in again.refs.values()} == {r.blob for r in written.refs.values()}
    assert again.new_bytes == 0


def test_unchanged_device_blobs_are_hashed_but_not_written_again(engine, tmp_path):
    driver = engine._drv
    data = bytes(range(256)) * 4096
    item = stored("s0", data, "cuda:0", "w", driver)
    store = SnapshotStore(str(tmp_path / "store"), "ws-gpu")
    first = BlobWriter(SnapshotWriter(store, KEY)).write_all([[item]])
    copies_first = driver.calls.count("copy")
    second = BlobWriter(SnapshotWriter(store, KEY)).write_all([[item]])
    assert first.refs == second.refs and second.new_bytes == 0
    assert driver.calls.count("copy") - copies_first == copies_first // 2  # one pass, not two
