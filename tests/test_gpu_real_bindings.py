"""The engine and the GPU fingerprint through the REAL cuda-python bindings, on CPU machines.

``tests/fixtures_gpu.py``'s SimulatedDriver replaces cuda-python itself, so it cannot catch a
wrong argument type, a misread result tuple or an enum the bindings refuse. Here the real
``cuda.bindings.driver`` loads a fake ``libcuda.so.1`` (``tests/fakecuda/fake_libcuda.c``) in a
child process (``fixtures_fakecuda``): every call is marshalled for real, and the fake driver
checks what the real one would refuse (no current context, async copies from pageable memory,
foreign or destroyed handles, memory beyond a device's capacity). Copies run synchronously there:
ordering is the simulator's job.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

from fixtures_fakecuda import FakeCuda, MiB

CHUNK = 4096

# Run at the top of every engine snippet: a small-chunk engine on the fake driver, and ``out``.
ENGINE = f"""
import gc, json, os, threading
from cuda.bindings import driver
from kernel_hooks.errors import CudaError
from jupyter_gkeresume.snapshot.fingerprint import cuda_driver
from kernel_hooks.cuda_engine import CudaEngine, DeviceRange
engine = CudaEngine(cuda_driver(), chunk_bytes={CHUNK}, buffers=3)
def out(value):
    print(json.dumps(value))
def raises(fn, *args):
    try:
        fn(*args)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return None
def current():
    err, ctx = driver.cuCtxGetCurrent()
    assert int(err) == 0, err
    return int(ctx)
"""


def run_engine(fakecuda: FakeCuda, body: str, **config: Any) -> Any:
    """Run ``body`` after the ``ENGINE`` prelude in a child on the fake driver; its JSON."""
    return fakecuda.run(ENGINE + textwrap.dedent(body), **config)


def fake_uuid(device: int) -> str:
    """The UUID fake_libcuda.c gives ``device``, as nvidia-smi spells it."""
    h = bytes(0xF0 ^ (16 * device + i) for i in range(16)).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def test_fingerprint_reads_every_gpu_through_the_real_bindings(fakecuda: FakeCuda):
    got = fakecuda.run("""
        import json
        from jupyter_gkeresume.snapshot.fingerprint import cuda_driver, cuda_facts
        print(json.dumps({"driver": cuda_driver().__name__, "facts": cuda_facts()}))
    """, devices=2, memory=48 * MiB)
    assert got["driver"] == "cuda.bindings.driver"
    facts = got["facts"]
    assert facts["driver_version"] == "13.4"
    assert facts["count"] == 2
    assert facts["gpus"] == [
        {"index": i, "name": f"Fake GPU {i}", "uuid": fake_uuid(i), "memory": 48 * MiB,
         "compute_capability": "9.0"}
        for i in range(2)
    ]


def test_fingerprint_name_is_the_drivers_whole_string(fakecuda: FakeCuda):
    got = fakecuda.run("""
        import json
        from jupyter_gkeresume.snapshot.fingerprint import cuda_facts
        print(json.dumps([gpu["name"] for gpu in cuda_facts()["gpus"]]))
    """, devices=1, name="NVIDIA H200 141GB HBM3e")
    assert got == ["NVIDIA H200 141GB HBM3e"]


def test_round_trip_through_the_pinned_ring(fakecuda: FakeCuda):
    """Several chunks plus a ragged tail go up and come back equal; every DMA went through
    pinned memory (the fake refuses any other host memory in an async copy), no chunk is
    bigger than one ring buffer, and a transfer stopped early leaves the engine usable."""
    got = run_engine(fakecuda, f"""
        nbytes = 5 * {CHUNK} + 123
        data = os.urandom(nbytes)
        alloc = engine.allocate(nbytes, 0)
        engine.host_to_device(data, alloc.ptr, 0)
        sizes, back = [], bytearray()
        for chunk in engine.device_to_host_chunks(alloc.ptr, nbytes, 0):
            sizes.append(len(chunk))
            back += chunk
        stopped = engine.device_to_host_chunks(alloc.ptr, nbytes, 0)
        first = bytes(next(stopped))
        stopped.close()  # stopping early drains the stream and frees the engine for the next
        again = b"".join(bytes(c) for c in engine.device_to_host_chunks(alloc.ptr, nbytes, 0))
        out({{"equal": bytes(back) == data, "sizes": sizes, "ring": len(engine._ring),
              "host_bytes": engine.host_bytes, "current_after": current(),
              "first": first == data[:{CHUNK}], "again": again == data}})
    """)
    assert got["equal"] and got["first"] and got["again"]
    assert got["sizes"] == [CHUNK] * 5 + [123]
    assert got["ring"] == 3 and got["host_bytes"] == 3 * CHUNK
    assert got["current_after"] == 0  # every context pushed for a copy was popped again


def test_ranges_on_two_devices_in_one_pipeline(fakecuda: FakeCuda):
    got = run_engine(fakecuda, f"""
        sizes = [(0, 2 * {CHUNK} + 5), (1, 3 * {CHUNK}), (0, 17), (1, {CHUNK} - 1)]
        allocs, datas = [], []
        for device, nbytes in sizes:
            alloc = engine.allocate(nbytes, device)
            data = os.urandom(nbytes)
            engine.host_to_device(data, alloc.ptr, device)
            allocs.append(alloc)
            datas.append(data)
        ranges = [DeviceRange(a.ptr, a.nbytes, a.device_index) for a in allocs]
        back = [bytearray() for _ in ranges]
        order = []
        for pos, chunk in engine.device_to_host_ranges(ranges):
            order.append(pos)
            back[pos] += chunk
        out({{"equal": [bytes(b) == d for b, d in zip(back, datas)], "order": order,
              "owners": [engine.pointer_device(a.ptr + a.nbytes - 1) for a in allocs]}})
    """)
    assert got["equal"] == [True] * 4
    assert got["order"] == sorted(got["order"])  # ranges come in order
    assert got["owners"] == [0, 1, 0, 1]


def test_bad_pointers_are_refused_before_any_copy(fakecuda: FakeCuda):
    got = run_engine(fakecuda, """
        alloc = engine.allocate(1000, 1)
        host = bytearray(64)
        import ctypes
        host_ptr = ctypes.addressof(ctypes.c_char.from_buffer(host))
        out({
            "past_end": raises(engine.device_to_host_chunks, alloc.ptr, 1001, 1),
            "wrong_device": raises(engine.device_to_host_chunks, alloc.ptr, 1000, 0),
            "host_memory": raises(engine.pointer_device, host_ptr),
            "upload_too_big": raises(engine.host_to_device, bytes(2000), alloc.ptr, 1),
            "no_such_device": raises(engine.allocate, 10, 2),
            "ring_made": bool(engine._ring),
            "owner": engine.pointer_device(alloc.ptr + 999),
        })
    """)
    for key in ("past_end", "wrong_device", "host_memory", "upload_too_big", "no_such_device"):
        assert got[key] is not None and got[key][0] == "InvalidInputError", (key, got[key])
    assert "CUDA_ERROR_INVALID_VALUE" in got["past_end"][1]  # the driver's answer, decoded
    assert "not of cuda:0" in got["wrong_device"][1]
    assert not got["ring_made"]  # refused before any pinned memory or copy
    assert got["owner"] == 1


def test_memory_info_allocation_and_free(fakecuda: FakeCuda):
    got = run_engine(fakecuda, """
        before = engine.memory_info(1)
        alloc = engine.allocate(10 << 20, 1)
        during = engine.memory_info(1)
        other = engine.memory_info(0)
        try:
            engine.allocate(60 << 20, 1)
            too_big = None
        except CudaError as exc:
            too_big = str(exc)
        del alloc
        gc.collect()
        out({"before": before, "during": during, "other": other, "too_big": too_big,
             "after": engine.memory_info(1)})
    """, memory=64 * MiB)
    assert got["before"] == [64 * MiB, 64 * MiB]
    assert got["during"] == [54 * MiB, 64 * MiB]
    assert got["other"] == [64 * MiB, 64 * MiB]  # each device counts its own memory
    assert got["too_big"] is not None and "CUDA_ERROR_OUT_OF_MEMORY" in got["too_big"]
    assert got["after"] == [64 * MiB, 64 * MiB]  # collected: cuMemFree went through


def test_synchronize_all_close_and_reuse(fakecuda: FakeCuda):
    """``synchronize_all`` leaves untouched GPUs without a context; ``close`` releases every
    primary context it retained (the driver destroys them) and the engine works again after."""
    got = run_engine(fakecuda, """
        def active(index):
            err, flags, is_active = driver.cuDevicePrimaryCtxGetState(index)
            assert int(err) == 0, err
            return bool(is_active)
        engine.synchronize_all()
        untouched = [active(0), active(1)]
        alloc = engine.allocate(100, 0)
        engine.host_to_device(b"a" * 100, alloc.ptr, 0)
        engine.synchronize_all()
        used = [active(0), active(1)]
        engine.close()
        closed = [active(0), active(1)]
        alloc = engine.allocate(100, 0)
        engine.host_to_device(b"b" * 100, alloc.ptr, 0)
        again = b"".join(bytes(c) for c in engine.device_to_host_chunks(alloc.ptr, 100, 0))
        out({"untouched": untouched, "used": used, "closed": closed, "again": again.decode(),
             "current": current()})
    """)
    assert got["untouched"] == [False, False]
    assert got["used"] == [True, False]
    assert got["closed"] == [False, False]
    assert got["again"] == "b" * 100
    assert got["current"] == 0


def test_callers_context_is_restored_and_threads_have_their_own(fakecuda: FakeCuda):
    """With torch's context of cuda:1 current, a transfer on cuda:0 leaves it current; a
    transfer from another thread (its own, empty context stack) works too."""
    got = run_engine(fakecuda, """
        err, dev1 = driver.cuDevicePrimaryCtxRetain(1)
        assert int(driver.cuCtxPushCurrent(dev1)[0]) == 0
        alloc = engine.allocate(3 * 4096, 0)
        engine.host_to_device(bytes(range(256)) * 48, alloc.ptr, 0)
        result = {}
        def worker():
            result["data"] = b"".join(
                bytes(c) for c in engine.device_to_host_chunks(alloc.ptr, alloc.nbytes, 0))
            result["current"] = current()
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        out({"restored": current() == int(dev1), "worker_ok": result["data"] == bytes(range(256)) * 48,
             "worker_current": result["current"]})
    """)
    assert got == {"restored": True, "worker_ok": True, "worker_current": 0}


def test_get_engine_uses_the_real_driver_with_default_traits(fakecuda: FakeCuda):
    got = fakecuda.run("""
        import json
        from kernel_hooks.cuda_engine import get_engine
        engine = get_engine()
        print(json.dumps({"same": engine is get_engine(), "count": engine.device_count,
                          "host_bytes": engine.host_bytes, "info": engine.memory_info(2)}))
    """, devices=3)
    assert got == {"same": True, "count": 3, "host_bytes": 4 * (64 * MiB),
                   "info": [64 * MiB, 64 * MiB]}


def test_fake_driver_refuses_async_copies_from_pageable_memory(fakecuda: FakeCuda):
    """The guard the round-trip test relies on: through the real bindings, an async copy into
    ordinary (pageable) host memory fails, into cuMemHostAlloc'd memory it works."""
    got = fakecuda.run("""
        import ctypes, json
        from cuda.bindings import driver as d
        assert int(d.cuInit(0)[0]) == 0
        err, ctx = d.cuDevicePrimaryCtxRetain(0)
        d.cuCtxPushCurrent(ctx)
        err, dptr = d.cuMemAlloc(64)
        d.cuMemsetD8(dptr, 7, 64)
        err, stream = d.cuStreamCreate(0)
        pageable = ctypes.create_string_buffer(64)
        err, pinned = d.cuMemHostAlloc(64, 0)
        bad = d.cuMemcpyDtoHAsync(ctypes.addressof(pageable), dptr, 64, stream)[0]
        good = d.cuMemcpyDtoHAsync(pinned, dptr, 64, stream)[0]
        d.cuCtxPopCurrent()
        no_ctx = d.cuMemAlloc(64)[0]
        print(json.dumps({"bad": bad.name, "good": good.name, "no_ctx": no_ctx.name,
                          "bytes": list(ctypes.string_at(pinned, 4))}))
    """)
    assert got == {"bad": "CUDA_ERROR_INVALID_VALUE", "good": "CUDA_SUCCESS",
                   "no_ctx": "CUDA_ERROR_INVALID_CONTEXT", "bytes": [7, 7, 7, 7]}


def test_driver_older_than_the_bindings_counts_as_no_gpu(fakecuda: FakeCuda):
    """A CUDA 12.4 driver under cuda-bindings 13.x. Observed: the driver API itself answers
    (cuInit succeeds, cuDriverGetVersion says 12040, cuDeviceGetCount finds the GPU), only the
    CUDA 13 ABI variants are missing (cuCtxSynchronize_v2 raises FunctionNotFoundError, the
    driver having refused cuGetProcAddress for version 13000) and the runtime refuses the driver
    (cudaGetDeviceCount: cudaErrorInsufficientDriver). ``cuda_driver()`` says "no GPU"."""
    got = fakecuda.run("""
        import json
        import cuda.bindings
        from cuda.bindings import driver as d, runtime
        from jupyter_gkeresume.snapshot.fingerprint import cuda_driver, cuda_facts
        init = d.cuInit(0)[0]
        version = d.cuDriverGetVersion()[1]
        count = d.cuDeviceGetCount()[1]
        try:
            d.cuCtxSynchronize_v2(None)
            v13 = "ok"
        except RuntimeError as exc:
            v13 = type(exc).__name__
        print(json.dumps({
            "bindings_major": int(cuda.bindings.__version__.split(".")[0]),
            "init": init.name, "version": version, "count": count, "v13": v13,
            "runtime": runtime.cudaGetDeviceCount()[0].name,
            "driver": cuda_driver() is None, "facts": cuda_facts(),
        }))
    """, devices=1, driver_version=12040)
    assert got["bindings_major"] >= 13, "this case needs bindings newer than the fake driver"
    assert (got["init"], got["version"], got["count"]) == ("CUDA_SUCCESS", 12040, 1)
    assert got["v13"] == "FunctionNotFoundError"
    assert got["runtime"] == "cudaErrorInsufficientDriver"
    assert got["driver"] is True
    assert got["facts"] == {}


def test_the_gpu_benchmark_runs_on_the_real_bindings(fakecuda: FakeCuda, tmp_path):
    """A smoke run of ``benchmarks/gpu.py`` (its figures mean nothing on a fake driver and a
    CPU model): the script must not first fail on the GPU machine, where device time is short.
    The bandwidth part runs the engine over the real bindings; the end-to-end part pauses and
    resumes a small model on the CPU in real kernels."""
    out = tmp_path / "gpu.json"
    fakecuda.run(f"""
        import json, runpy, sys
        sys.argv = ["gpu.py", "--bytes", "16MiB", "--repeat", "1", "--device", "cpu",
                    "--model-gib", "0.01", "--keep-page-cache", "--store", {str(tmp_path)!r},
                    "--out", {str(out)!r}]
        runpy.run_path("benchmarks/gpu.py", run_name="__main__")
        print(json.dumps("ok"))
    """, memory=64 * MiB)
    result = json.loads(out.read_text())
    bandwidth = result["bandwidth"]
    assert bandwidth["bytes"] == 16 * MiB
    assert all(bandwidth[k] > 0 for k in ("engine_vs_raw", "engine_h2d_vs_raw",
                                          "engine_blake3_GBps"))
    assert result["hardware"]["cuda"]["count"] == 2
    e2e = result["end_to_end"]
    assert e2e["model_bytes"] == 8192 * 8192 * 2  # one fp16 layer
    assert e2e["pause_s"] > 0 and e2e["resume_to_next_cell_s"] > 0
