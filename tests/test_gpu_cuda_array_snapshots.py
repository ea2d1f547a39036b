"""``__cuda_array_interface__`` objects through a whole checkpoint and resume, without torch.

The CUDA engine runs over the simulated driver (``fixtures_gpu.SimulatedDriver``: host memory
stands in for device memory, copies are really asynchronous), the store is a real local store.
A fresh driver for the resume plays the next pod: other pointers, maybe fewer GPUs, less memory,
or none at all. The same path runs through the real cuda-python bindings in a real kernel in
``test_gpu_real_bindings.py``, and on a real GPU in ``test_gpu_device.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_gpu import SimulatedDriver
from traitlets.config import Config

import kernel_hooks.cuda_engine as cuda_engine
import kernel_hooks.left_behind as left_behind
import kernel_hooks.loader as loader
import kernel_hooks.resume_plan as resume_plan
from jupyter_gkeresume.snapshot import SigningKey, SnapshotStore
from kernel_hooks.capture import take_checkpoint
from kernel_hooks.cuda_arrays import CudaArray
from kernel_hooks.cuda_engine import CudaEngine
from kernel_hooks.placeholders import Uncaptured
from kernel_hooks.restore import take_resume

np = pytest.importorskip("numpy")
KEY = SigningKey(b"cuda-array-test-key-0123456789abcdef")


class DeviceArray:
    """A minimal third-party CUDA array: device memory and the interface, nothing else."""

    def __init__(self, ptr: int, shape: tuple, typestr: str, strides: tuple | None = None):
        self.ptr, self.shape, self.typestr, self.strides = ptr, shape, typestr, strides

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, False),
                "strides": self.strides, "version": 3}


def objects_skipped(result) -> list:
    """What the checkpoint left out of the namespace; in this (pytest) process its child
    processes and open files (named too, ``left_behind``) are the test run's, not the arrays'."""
    return [s for s in result.skipped if s.type not in left_behind.KINDS]


def use_engine(monkeypatch, gpus: int = 2, memory: int = 1 << 30) -> CudaEngine | None:
    """Make the process-wide engine one over a fresh simulated driver (None: no GPU)."""
    engine = None
    if gpus:
        driver = SimulatedDriver(gpus=gpus, memory=memory, progress="random", seed=gpus)
        config = Config({"CudaEngine": {"chunk_bytes": 4096, "buffers": 3}})
        engine = CudaEngine(driver, config=config)
    monkeypatch.setattr(cuda_engine, "_engine", engine)
    return engine


def device_bytes(engine: CudaEngine, array) -> bytes:
    face = array.__cuda_array_interface__
    ptr = face["data"][0] - array.info.offset
    return b"".join(bytes(c) for c in engine.device_to_host_chunks(
        ptr, array.info.nbytes, engine.pointer_device(ptr)))


@pytest.fixture
def saved(monkeypatch, tmp_path):
    """A namespace of CUDA arrays on cuda:1 checkpointed; returns (store, expected values)."""
    engine = use_engine(monkeypatch, gpus=2)
    matrix = np.arange(64 * 96, dtype=np.float16).reshape(64, 96)
    ptr = engine._drv.device_buffer(1, matrix.tobytes())
    namespace = {
        "weights": DeviceArray(ptr, (64, 96), "<f2"),
        "flat": DeviceArray(ptr, (64 * 96,), "<f2"),  # same span: shares memory after resume
        "nested": {"rows": DeviceArray(ptr + 2 * 96 * 63, (32,), "<f2", (-2 * 96 * 2,)),
                   "note": "kept"},
    }
    store = SnapshotStore(str(tmp_path / "store"), "ws-cuda-arrays")
    result = take_checkpoint(namespace, store, KEY, name="arrays")
    assert objects_skipped(result) == []
    expected = {"weights": matrix, "flat": matrix.reshape(-1), "rows": matrix[::-2, 0]}
    return store, expected


def test_cuda_arrays_come_back_on_their_gpu_sharing_memory(saved, monkeypatch):
    store, expected = saved
    engine = use_engine(monkeypatch, gpus=2)  # the next pod: same GPUs, other pointers
    namespace: dict = {}
    report = take_resume(namespace, store, KEY, reference="arrays")
    assert report.not_restored == [] and report.warnings == []
    weights, flat, rows = namespace["weights"], namespace["flat"], namespace["nested"]["rows"]
    assert all(isinstance(a, CudaArray) for a in (weights, flat, rows))
    assert {a.allocation.device_index for a in (weights, flat, rows)} == {1}
    assert weights.allocation is flat.allocation  # one span, one device allocation
    assert rows.allocation is not weights.allocation  # another span: its own copy
    assert device_bytes(engine, weights) == expected["weights"].tobytes()
    face = rows.__cuda_array_interface__
    assert face["shape"] == (32,) and face["strides"] == (-384,)
    start = face["data"][0] - rows.allocation.ptr
    span = np.frombuffer(device_bytes(engine, rows), dtype=np.uint8)
    got = np.ndarray((32,), np.float16, buffer=span, offset=start, strides=(-384,))
    np.testing.assert_array_equal(got, expected["rows"])
    assert namespace["nested"]["note"] == "kept"


def test_fewer_gpus_map_by_order(saved, monkeypatch):
    store, expected = saved
    engine = use_engine(monkeypatch, gpus=1)
    namespace: dict = {}
    report = take_resume(namespace, store, KEY, reference="arrays")
    assert report.not_restored == []
    assert any("cuda:1 does not exist here" in w for w in report.warnings), report.warnings
    assert namespace["weights"].allocation.device_index == 0
    assert device_bytes(engine, namespace["flat"]) == expected["flat"].tobytes()


def test_without_a_gpu_they_come_back_as_numpy_arrays(saved, monkeypatch):
    store, expected = saved
    use_engine(monkeypatch, gpus=0)
    namespace: dict = {}
    report = take_resume(namespace, store, KEY, reference="arrays")
    assert report.not_restored == []
    assert any("no GPU here" in w for w in report.warnings), report.warnings
    np.testing.assert_array_equal(namespace["weights"], expected["weights"])
    np.testing.assert_array_equal(namespace["nested"]["rows"], expected["rows"])
    assert np.shares_memory(namespace["weights"], namespace["flat"])


def test_gpus_that_cuda_python_cannot_drive_get_numpy_arrays_and_the_reason(saved, monkeypatch):
    store, expected = saved
    use_engine(monkeypatch, gpus=0)
    # torch sees 2 GPUs with room to spare, cuda-python cannot drive them
    monkeypatch.setattr(resume_plan, "gpu_count", lambda engine, storages: 2)
    monkeypatch.setattr(resume_plan, "usable_bytes", lambda engine, index: 1 << 30)
    namespace: dict = {}
    report = take_resume(namespace, store, KEY, reference="arrays")
    assert report.not_restored == []
    [warning] = report.warnings
    assert warning.startswith("CUDA arrays come back on the CPU as NumPy arrays: no usable CUDA")
    np.testing.assert_array_equal(namespace["weights"], expected["weights"])


def test_what_does_not_fit_stays_on_the_cpu_and_is_named(saved, monkeypatch):
    store, expected = saved
    # 12,700 bytes less the 5% reserve: room for the 11,906-byte span, not the 12,288-byte one.
    use_engine(monkeypatch, gpus=2, memory=12_700)
    namespace: dict = {}
    report = take_resume(namespace, store, KEY, reference="arrays")
    assert report.not_restored == []
    assert [w for w in report.warnings if "not free here" in w] == [
        "weights: needs 12.0 KiB on cuda:1, not free here: restored on the CPU"
    ]
    assert isinstance(namespace["weights"], np.ndarray)
    np.testing.assert_array_equal(namespace["flat"], expected["flat"])
    assert isinstance(namespace["nested"]["rows"], CudaArray)


def test_an_allocation_that_fails_after_all_is_caught_and_named(saved, monkeypatch):
    store, expected = saved
    use_engine(monkeypatch, gpus=2, memory=12_700)  # weights fit, then rows no longer do
    monkeypatch.setattr(resume_plan, "usable_bytes", lambda engine, index: 1 << 30)
    namespace: dict = {}
    report = take_resume(namespace, store, KEY, reference="arrays")
    assert report.not_restored == []
    assert "nested: did not fit on cuda:1: restored on the CPU" in report.warnings
    assert isinstance(namespace["weights"], CudaArray)
    np.testing.assert_array_equal(namespace["nested"]["rows"], expected["rows"])


def test_gpu_storages_stream_to_the_device_without_host_copies(saved, monkeypatch):
    store, expected = saved
    engine = use_engine(monkeypatch, gpus=2)
    host_buffers = []
    real_allocate = loader._allocate
    monkeypatch.setattr(loader, "_allocate",
                        lambda ref, **over: host_buffers.append(ref.nbytes)
                        or real_allocate(ref, **over))
    namespace: dict = {}
    take_resume(namespace, store, KEY, reference="arrays")
    # Host buffers only for host storages (torch's RNG state when torch is imported), none for
    # the storages bound for a GPU: those went through the ring only.
    storages = store_manifest(store).storages.values()
    assert sorted(host_buffers) == sorted(s.nbytes for s in storages if s.device == "cpu")
    assert any(s.device != "cpu" for s in storages)
    assert engine._drv.pinned_peak == engine.host_bytes
    assert device_bytes(engine, namespace["flat"]) == expected["flat"].tobytes()


def test_a_damaged_blob_costs_only_the_arrays_that_use_it(saved, monkeypatch):
    store, _ = saved
    use_engine(monkeypatch, gpus=2)
    manifest_storages = store_manifest(store).storages.values()
    path = Path(store.blob_path(max(manifest_storages, key=lambda s: s.nbytes).blob))
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    namespace: dict = {}
    report = take_resume(namespace, store, KEY, reference="arrays")
    assert sorted(s.name for s in report.not_restored) == ["flat", "weights"]
    assert isinstance(namespace["nested"]["rows"], CudaArray)


def store_manifest(store: SnapshotStore, name: str = "arrays"):
    from jupyter_gkeresume.snapshot import load_manifest, resolve

    return load_manifest(store, resolve(store, name, KEY), KEY)


def test_without_an_engine_a_foreign_cuda_array_is_a_named_placeholder(monkeypatch, tmp_path):
    use_engine(monkeypatch, gpus=0)
    store = SnapshotStore(str(tmp_path / "store"), "ws-cuda-arrays")
    namespace = {"stats": {"mean": 0.5, "buffer": DeviceArray(0xDEAD0000, (4,), "<f4")}}
    result = take_checkpoint(namespace, store, KEY)
    assert [(s.name, s.inside) for s in objects_skipped(result)] == [("stats", True)]
    assert "cuda-python" in objects_skipped(result)[0].reason
    restored: dict = {}
    take_resume(restored, store, KEY)
    assert restored["stats"]["mean"] == 0.5
    assert isinstance(restored["stats"]["buffer"], Uncaptured)


def test_a_checkpoint_says_why_gpu_memory_did_not_go_through_the_engine(monkeypatch):
    from kernel_hooks.capture import _gpu_warnings
    from kernel_hooks.storages import CollectedStorage

    def storage(device: str, nbytes: int) -> CollectedStorage:
        return CollectedStorage("s0", "torch", "float16", nbytes, device, "model", None, 0)

    use_engine(monkeypatch, gpus=0)
    [warning] = _gpu_warnings([storage("cuda:0", 3 << 30), storage("cpu", 5)])
    assert warning.startswith("3.0 GiB of GPU memory copied by torch through host memory")
    assert "not through the CUDA engine's pinned ring: no usable CUDA driver" in warning
    assert _gpu_warnings([storage("cpu", 5)]) == []
    use_engine(monkeypatch, gpus=1)
    assert _gpu_warnings([storage("cuda:0", 3 << 30)]) == []


def test_torch_tensors_saved_on_a_gpu_torch_cannot_use_here_come_back_on_the_cpu(
    monkeypatch, tmp_path
):
    """A GPU the driver offers but this torch cannot use (a CPU build on a GPU node): the
    tensors come back on the CPU with the reason, the restore does not fail."""
    import dataclasses

    torch = pytest.importorskip("torch")
    from jupyter_gkeresume.snapshot import sign

    use_engine(monkeypatch, gpus=1)
    store = SnapshotStore(str(tmp_path / "store"), "ws-cuda-arrays")
    weights = torch.arange(4096, dtype=torch.float32)
    result = take_checkpoint({"weights": weights}, store, KEY, name="torch")
    # As if taken on a GPU: the tensor's storage recorded on cuda:0 (manifest re-signed).
    manifest = store_manifest(store, "torch")
    manifest.storages = {k: dataclasses.replace(ref, device="cuda:0") if ref.owner == "weights"
                         else ref for k, ref in manifest.storages.items()}
    sign(manifest, KEY)
    store.delete_manifest(result.snapshot_id)
    store.commit_manifest(result.snapshot_id, manifest.to_json())

    namespace: dict = {}
    report = take_resume(namespace, store, KEY, reference="torch")
    assert report.not_restored == []
    assert any(w.startswith("torch cannot use cuda:0 here") for w in report.warnings)
    assert torch.equal(namespace["weights"], weights)
