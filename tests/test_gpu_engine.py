"""The CUDA transfer engine on a machine without a GPU.

Against the real cuda-python here (no driver): no engine, nothing raised. Against
``SimulatedDriver`` (tests/fixtures_gpu.py, asynchronous streams over host memory): the ring
moves the right bytes in the right order within its pinned bound, refuses bad ranges before any
copy, and cleans up on every exit. ``tests/test_gpu_device.py`` runs the same engine on a GPU.
"""

from __future__ import annotations

import gc
import os
import pickle
import sys
import threading

import pytest
from fixtures_gpu import INVALID_VALUE, SimulatedDriver
from traitlets.config import Config, Configurable

import kernel_hooks.cuda_engine as cuda_engine
from jupyter_gkeresume.errors import InvalidInputError
from kernel_hooks.cuda_engine import CudaEngine, DeviceRange, get_engine
from kernel_hooks.errors import CudaError, CudaOutOfMemoryError

CHUNK = 4096


def make_engine(driver: SimulatedDriver, chunk: int = CHUNK, buffers: int = 3) -> CudaEngine:
    config = Config({"CudaEngine": {"chunk_bytes": chunk, "buffers": buffers}})
    return CudaEngine(driver, config=config)


def pattern(nbytes: int, seed: int = 0) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(nbytes))


def test_no_driver_here_means_no_engine_and_no_error(monkeypatch):
    monkeypatch.setattr(cuda_engine, "_engine", cuda_engine._UNSET)
    assert get_engine() is None
    assert get_engine() is None  # decided once, cached


def test_no_cuda_python_means_no_engine(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    monkeypatch.setattr(cuda_engine, "_engine", cuda_engine._UNSET)
    assert get_engine() is None


def test_get_engine_with_a_driver_takes_ipython_config(monkeypatch):
    driver = SimulatedDriver()

    class Shell(Configurable):
        pass

    shell = Shell(config=Config({"CudaEngine": {"buffers": 5, "chunk_bytes": 8192}}))
    monkeypatch.setattr(cuda_engine, "cuda_driver", lambda: driver)
    monkeypatch.setattr(cuda_engine, "_ipython_shell", lambda: shell)
    monkeypatch.setattr(cuda_engine, "_engine", cuda_engine._UNSET)
    engine = get_engine()
    assert isinstance(engine, CudaEngine) and engine is get_engine()
    assert (engine.buffers, engine.chunk_bytes, engine.host_bytes) == (5, 8192, 5 * 8192)
    assert engine.device_count == 1
    monkeypatch.setattr(cuda_engine, "_engine", cuda_engine._UNSET)
    monkeypatch.setattr(cuda_engine, "_ipython_shell", lambda: None)
    assert get_engine().buffers == 4  # the default ring: 4 x 64 MiB


@pytest.mark.parametrize("nbytes", [0, 1, CHUNK - 1, CHUNK, 3 * CHUNK, 10 * CHUNK + 17])
def test_device_to_host_yields_every_byte_in_order_within_the_ring(simulated_driver, nbytes):
    engine = make_engine(simulated_driver)
    data = pattern(nbytes)
    ptr = simulated_driver.device_buffer(1, data)
    got = []
    for chunk in engine.device_to_host_chunks(ptr, nbytes, 1):
        assert 0 < len(chunk) <= CHUNK and chunk.readonly
        got.append(bytes(chunk))
    assert b"".join(got) == data
    assert simulated_driver.pinned_peak <= 3 * CHUNK
    assert all(not s.pending for s in simulated_driver.streams.values())
    assert simulated_driver._stack == []  # every context pushed was popped


def test_many_ranges_on_two_devices_stream_in_one_pipeline(simulated_driver):
    engine = make_engine(simulated_driver)
    blobs = [pattern(n, seed) for seed, n in enumerate([5 * CHUNK + 3, 0, 10, 2 * CHUNK])]
    ranges = [
        DeviceRange(simulated_driver.device_buffer(i % 2, b), len(b), i % 2)
        for i, b in enumerate(blobs)
    ]
    got: dict[int, bytearray] = {}
    for part, chunk in engine.device_to_host_ranges(ranges):
        got.setdefault(part, bytearray()).extend(chunk)
    assert [bytes(got.get(i, b"")) for i in range(len(blobs))] == blobs
    assert simulated_driver.pinned_peak == 3 * CHUNK


def test_host_memory_is_bounded_by_the_ring_whatever_the_size():
    driver = SimulatedDriver(progress="random", seed=3)
    engine = make_engine(driver, chunk=CHUNK, buffers=2)
    ptr = driver.device_buffer(0, pattern(64 * CHUNK))
    total = sum(len(c) for c in engine.device_to_host_chunks(ptr, 64 * CHUNK, 0))
    assert total == 64 * CHUNK
    assert driver.pinned_peak == engine.host_bytes == 2 * CHUNK


@pytest.mark.parametrize("source", ["bytes", "bytearray", "memoryview"])
def test_host_to_device_round_trip(simulated_driver, source):
    engine = make_engine(simulated_driver)
    data = pattern(7 * CHUNK + 5, seed=9)
    src = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data)}[source]
    ptr = simulated_driver.device_buffer(0, bytes(len(data)))
    engine.host_to_device(src, ptr, 0)
    # host_to_device returns only when the device holds the bytes: read without running the GPU.
    assert simulated_driver.read(ptr, len(data)) == data
    assert b"".join(bytes(c) for c in engine.device_to_host_chunks(ptr, len(data), 0)) == data


@pytest.mark.parametrize("progress", ["lazy", "eager", "random"])
def test_uploads_from_many_threads_land_whole_within_the_ring(progress):
    simulated_driver = SimulatedDriver(gpus=2, progress=progress, seed=5)
    engine = make_engine(simulated_driver, buffers=3)
    jobs = [(pattern(n, seed=i), i % 2) for i, n in enumerate((5 * CHUNK + 3, CHUNK, 17, 9 * CHUNK))]
    targets = [simulated_driver.device_buffer(device, bytes(len(data))) for data, device in jobs]

    def upload(up, i):
        data, device = jobs[i]
        for offset in range(0, len(data), 2 * CHUNK + 1):  # ragged pieces, as storage reads give
            up.write(targets[i] + offset, device, data[offset : offset + 2 * CHUNK + 1])

    with engine.uploads() as up:
        threads = [threading.Thread(target=upload, args=(up, i)) for i in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        up.synchronize(1)
        assert simulated_driver.read(targets[1], len(jobs[1][0])) == jobs[1][0]
    for (data, _), ptr in zip(jobs, targets, strict=True):
        assert simulated_driver.read(ptr, len(data)) == data
    assert simulated_driver.pinned_peak == engine.host_bytes


def test_host_to_device_refuses_non_contiguous_sources():
    np = pytest.importorskip("numpy")
    driver = SimulatedDriver()
    engine = make_engine(driver)
    ptr = driver.device_buffer(0, bytes(64))
    with pytest.raises(InvalidInputError, match="C-contiguous"):
        engine.host_to_device(np.arange(32, dtype=np.int16)[::2], ptr, 0)


def test_a_chunk_kept_past_its_turn_fails_loudly():
    driver = SimulatedDriver()
    engine = make_engine(driver)
    ptr = driver.device_buffer(0, pattern(4 * CHUNK))
    it = engine.device_to_host_chunks(ptr, 4 * CHUNK, 0)
    first = next(it)
    next(it)
    with pytest.raises(ValueError, match="released"):
        bytes(first)
    it.close()


def test_a_chunk_still_exported_is_refused_rather_than_overwritten():
    """E.g. a hash of it still running in another thread when the loop moves on."""
    driver = SimulatedDriver()
    engine = make_engine(driver)
    ptr = driver.device_buffer(0, pattern(4 * CHUNK))
    kept = []
    with pytest.raises(CudaError, match=r"copy it with bytes\(chunk\)"):
        for chunk in engine.device_to_host_chunks(ptr, 4 * CHUNK, 0):
            kept.append(pickle.PickleBuffer(chunk))  # holds a buffer export, as a busy reader
    assert all(not s.pending for s in driver.streams.values())


def test_stopping_early_drains_copies_and_frees_the_engine(simulated_driver):
    engine = make_engine(simulated_driver)
    data = pattern(12 * CHUNK)
    ptr = simulated_driver.device_buffer(0, data)
    for i, chunk in enumerate(engine.device_to_host_chunks(ptr, len(data), 0)):
        assert bytes(chunk) == data[i * CHUNK : (i + 1) * CHUNK]
        if i == 1:
            break
    gc.collect()
    assert all(not s.pending for s in simulated_driver.streams.values())
    assert b"".join(bytes(c) for c in engine.device_to_host_chunks(ptr, len(data), 0)) == data


def test_a_nested_transfer_in_the_same_thread_is_refused():
    driver = SimulatedDriver()
    engine = make_engine(driver)
    ptr = driver.device_buffer(0, pattern(4 * CHUNK))
    it = engine.device_to_host_chunks(ptr, 4 * CHUNK, 0)
    next(it)
    with pytest.raises(CudaError, match="already running in this thread"):
        next(engine.device_to_host_chunks(ptr, 4 * CHUNK, 0))
    with pytest.raises(CudaError, match="already running in this thread"):
        engine.host_to_device(b"x", ptr, 0)
    it.close()
    engine.host_to_device(b"x", ptr, 0)


def test_another_thread_waits_for_the_running_transfer():
    driver = SimulatedDriver(progress="eager")
    engine = make_engine(driver)
    ptr = driver.device_buffer(0, pattern(4 * CHUNK))
    it = engine.device_to_host_chunks(ptr, 4 * CHUNK, 0)
    next(it)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (engine.host_to_device(b"y", ptr, 0), done.set()))
    worker.start()
    assert not done.wait(0.2)
    it.close()
    worker.join(30)
    assert done.is_set() and driver.read(ptr, 1) == b"y"


@pytest.mark.parametrize(
    ("offset", "nbytes", "device", "message"),
    [
        (0, 10, 1, "is memory of cuda:0, not of cuda:1"),
        (100, 200, 0, "is not CUDA device memory"),
        (0, 10, 2, "no CUDA device 2 here"),
        (0, -1, 0, "bad device range"),
    ],
)
def test_bad_ranges_are_refused_before_any_copy(offset, nbytes, device, message):
    driver = SimulatedDriver(gpus=2)
    engine = make_engine(driver)
    ptr = driver.device_buffer(0, bytes(256))
    with pytest.raises(InvalidInputError, match=message):
        engine.device_to_host_chunks(ptr + offset, nbytes, device)
    if nbytes > 0:
        with pytest.raises(InvalidInputError, match=message):
            engine.host_to_device(bytes(nbytes), ptr + offset, device)
    assert "copy" not in driver.calls


def test_a_host_pointer_is_not_device_memory():
    driver = SimulatedDriver()
    engine = make_engine(driver)
    host = bytearray(64)
    import ctypes

    address = ctypes.addressof((ctypes.c_char * 64).from_buffer(host))
    with pytest.raises(InvalidInputError, match="not CUDA device memory"):
        engine.device_to_host_chunks(address, 64, 0)


def test_pinned_memory_refused_is_a_clear_error_and_nothing_leaks():
    driver = SimulatedDriver(pinned_limit=2 * CHUNK)
    engine = make_engine(driver, buffers=3)
    ptr = driver.device_buffer(0, bytes(CHUNK))
    with pytest.raises(CudaOutOfMemoryError, match=r"cannot pin 12.0 KiB .*CudaEngine.chunk_bytes"):
        list(engine.device_to_host_chunks(ptr, CHUNK, 0))
    assert driver.pinned == {}


def test_pinning_refused_for_another_reason_says_that_reason():
    driver = SimulatedDriver()
    driver.cuMemHostAlloc = lambda size, flags: (INVALID_VALUE, None)
    engine = make_engine(driver, buffers=3)
    ptr = driver.device_buffer(0, bytes(CHUNK))
    with pytest.raises(CudaError, match=r"cuMemHostAlloc failed: .*CUDA_ERROR_INVALID_VALUE") as info:
        list(engine.device_to_host_chunks(ptr, CHUNK, 0))
    assert not isinstance(info.value, CudaOutOfMemoryError)


def test_driver_failures_become_cuda_errors_with_the_driver_words():
    driver = SimulatedDriver()
    engine = make_engine(driver)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_CONTEXT"):
        engine._call("cuMemGetInfo")


def test_synchronize_all_waits_on_active_contexts_only():
    driver = SimulatedDriver(gpus=3, progress="lazy")
    engine = make_engine(driver)
    engine.memory_info(1)  # the engine now holds a context (and a stream) on GPU 1
    dev = engine._devices[1]
    with engine._current(dev):
        engine._call("cuEventRecord", dev.events[0], dev.stream)
    assert any(s.pending for s in driver.streams.values())
    engine.synchronize_all()
    assert all(not s.pending for s in driver.streams.values())
    assert driver.primary_refs == [0, 1, 0]  # GPUs 0 and 2 were idle: no context made there


def test_memory_info_allocate_and_free_on_collection():
    driver = SimulatedDriver(memory=1 << 20)
    engine = make_engine(driver)
    assert engine.memory_info(0) == (1 << 20, 1 << 20)
    allocation = engine.allocate(1000, 0)
    assert engine.memory_info(0) == ((1 << 20) - 1000, 1 << 20)
    assert engine.pointer_device(allocation.ptr) == 0
    del allocation
    gc.collect()
    assert engine.memory_info(0)[0] == 1 << 20
    with pytest.raises(InvalidInputError):
        engine.memory_info(5)


def test_an_allocation_outliving_close_never_frees_into_the_new_context():
    """After close() released its context, an old allocation's address may belong to a newer
    allocation (the driver destroyed the context and reused it): collecting the old one must
    not free anything."""
    driver = SimulatedDriver(memory=1 << 20)
    engine = make_engine(driver)
    old = engine.allocate(1000, 0)
    engine.close()
    new = engine.allocate(500, 0)
    frees = []
    real_free = driver.cuMemFree
    driver.cuMemFree = lambda ptr: frees.append(int(ptr)) or real_free(ptr)
    del old
    gc.collect()
    assert frees == []
    new_ptr = new.ptr
    del new
    gc.collect()
    assert frees == [new_ptr]


def test_close_gives_everything_back(simulated_driver):
    engine = make_engine(simulated_driver)
    ptr = simulated_driver.device_buffer(1, pattern(5 * CHUNK))
    assert len(b"".join(bytes(c) for c in engine.device_to_host_chunks(ptr, 5 * CHUNK, 1))) > 0
    engine.close()
    assert simulated_driver.pinned == {}
    assert simulated_driver.streams == {} and simulated_driver.events == {}
    assert simulated_driver.primary_refs == [0, 0]


def test_bad_ring_configuration_is_refused():
    with pytest.raises(InvalidInputError, match="buffers >= 2"):
        make_engine(SimulatedDriver(), buffers=1)
    with pytest.raises(InvalidInputError, match="chunk_bytes >= 4096"):
        make_engine(SimulatedDriver(), chunk=100)


def test_importing_the_engine_never_touches_the_driver(tmp_path):
    import subprocess

    code = (
        "import sys; sys.modules['cuda.bindings'] = None\n"
        "import kernel_hooks.cuda_engine as e, kernel_hooks.cuda_arrays, kernel_hooks.cuda_plan\n"
        "print(e.get_engine())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        cwd=os.path.dirname(os.path.dirname(__file__)), check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"


def test_a_transfer_on_one_gpu_makes_no_context_on_the_others():
    driver = SimulatedDriver(gpus=2)
    engine = make_engine(driver)
    ptr = driver.device_buffer(1, pattern(CHUNK))
    assert b"".join(bytes(c) for c in engine.device_to_host_chunks(ptr, CHUNK, 1)) == pattern(CHUNK)
    assert driver.primary_refs == [0, 1]
    fresh = SimulatedDriver()
    make_engine(fresh).close()  # an engine never used pins nothing
    assert fresh.pinned_peak == 0 and fresh.primary_refs == [0]
