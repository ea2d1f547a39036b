"""GPU test support: skip ``@pytest.mark.gpu`` tests without a usable GPU, and a simulated driver.

``SimulatedDriver`` speaks the slice of cuda-python's driver API the engine and ``cuda_facts``
use, with ordinary host memory standing in for device memory. Its streams really are
asynchronous: a copy runs when the simulated GPU gets to it (``progress``: "lazy" = only when
someone waits, "eager" = at once, "random" = at random later driver calls), so an engine that
hands out a buffer before its event, or refills one still in use, delivers wrong bytes. It
checks what the real driver would refuse (no current context, copies to unpinned host memory,
events and streams of another context) and records the pinned memory in use.
On a GPU machine the same engine tests run against the real driver (``tests/test_gpu_device.py``).
"""

from __future__ import annotations

import ctypes
import random
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

SUCCESS, INVALID_VALUE, OUT_OF_MEMORY, INVALID_CONTEXT, INVALID_HANDLE = 0, 1, 2, 201, 400
NAMES = {
    SUCCESS: "CUDA_SUCCESS", INVALID_VALUE: "CUDA_ERROR_INVALID_VALUE",
    OUT_OF_MEMORY: "CUDA_ERROR_OUT_OF_MEMORY", INVALID_CONTEXT: "CUDA_ERROR_INVALID_CONTEXT",
    INVALID_HANDLE: "CUDA_ERROR_INVALID_HANDLE",
}


def gpu_available() -> bool:
    from jupyter_gkeresume.snapshot.fingerprint import cuda_driver

    return cuda_driver() is not None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None and not gpu_available():
        pytest.skip("needs a CUDA GPU with a working driver (none here)")


@dataclass
class _Stream:
    context: int
    pending: list[Any] = field(default_factory=list)


@dataclass
class _Gpu:
    name: str
    memory: int
    uuid: bytes
    allocated: int = 0


def _locked(lock: threading.RLock, method: Any) -> Any:
    def call(*args: Any) -> Any:
        with lock:
            return method(*args)

    return call


class SimulatedDriver:
    """A fake ``cuda.bindings.driver`` over host memory; see the module docstring."""

    CU_MEMHOSTALLOC_PORTABLE = 1
    CUpointer_attribute = SimpleNamespace(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL="ordinal")
    CUstream_flags = SimpleNamespace(CU_STREAM_NON_BLOCKING=1)
    CUevent_flags = SimpleNamespace(CU_EVENT_BLOCKING_SYNC=1, CU_EVENT_DISABLE_TIMING=2)
    CUdevice_attribute = SimpleNamespace(
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor",
    )

    def __init__(self, gpus: int = 1, memory: int = 1 << 30, progress: str = "random",
                 seed: int = 0, pinned_limit: int = 1 << 40):
        self.gpus = [
            _Gpu(f"Simulated GPU {i}", memory, bytes(range(16 * i, 16 * i + 16)))
            for i in range(gpus)
        ]
        self.progress = progress
        self.rng = random.Random(seed)
        self.pinned_limit = pinned_limit
        self.pinned: dict[int, ctypes.Array] = {}
        self.pinned_peak = 0
        self.device_mem: dict[int, tuple[int, ctypes.Array]] = {}  # ptr -> (device, buffer)
        self.streams: dict[int, _Stream] = {}
        self.events: dict[int, list[int]] = {}  # id -> [context, records, records reached]
        self.primary_refs = [0] * gpus
        self.calls: list[str] = []
        self._ids = iter(range(1000, 1 << 30))
        self._local = threading.local()
        # Thread-safe like the real driver: one call at a time (the simulated GPU runs inside).
        lock = threading.RLock()
        for name in dir(type(self)):
            if name.startswith("cu"):
                setattr(self, name, _locked(lock, getattr(self, name)))

    # -- test helpers ------------------------------------------------------------------------
    def device_buffer(self, device: int, data: bytes) -> int:
        """Device memory on ``device`` holding ``data``; returns its address."""
        err, ptr = self._alloc(device, len(data))
        assert err == SUCCESS
        ctypes.memmove(ptr, data, len(data))
        return ptr

    def read(self, ptr: int, nbytes: int) -> bytes:
        return ctypes.string_at(ptr, nbytes)

    @property
    def pinned_bytes(self) -> int:
        return sum(len(b) for b in self.pinned.values())

    def run_all(self) -> None:
        for stream in self.streams.values():
            self._run(stream, len(stream.pending))

    # -- the context stack -------------------------------------------------------------------
    @property
    def _stack(self) -> list[int]:
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack

    def _current_device(self) -> int | None:
        return self._stack[-1] - 1 if self._stack else None

    def _step(self, name: str) -> None:
        """Record the call and let the simulated GPU make progress."""
        self.calls.append(name)
        if self.progress == "eager":
            self.run_all()
        elif self.progress == "random":
            for stream in self.streams.values():
                self._run(stream, self.rng.randint(0, len(stream.pending)))

    def _run(self, stream: _Stream, count: int) -> None:
        for _ in range(count):
            stream.pending.pop(0)()

    # -- driver API (same names, arguments and (error, value) results as cuda-python) --------
    def cuInit(self, flags: int) -> tuple[int]:
        return (SUCCESS,)

    def cuDriverGetVersion(self) -> tuple[int, int]:
        return SUCCESS, 12040

    def cuDeviceGetCount(self) -> tuple[int, int]:
        return SUCCESS, len(self.gpus)

    def cuDeviceGet(self, index: int) -> tuple[int, int]:
        return (SUCCESS, index) if 0 <= index < len(self.gpus) else (INVALID_VALUE, None)

    def cuDeviceGetName(self, size: int, dev: int) -> tuple[int, bytes]:
        return SUCCESS, self.gpus[dev].name.encode().ljust(size, b"\0")

    def cuDeviceTotalMem(self, dev: int) -> tuple[int, int]:
        return SUCCESS, self.gpus[dev].memory

    def cuDeviceGetAttribute(self, attr: str, dev: int) -> tuple[int, int]:
        return SUCCESS, {"major": 9, "minor": 0}[attr]

    def cuDeviceGetUuid(self, dev: int) -> tuple[int, Any]:
        return SUCCESS, SimpleNamespace(bytes=self.gpus[dev].uuid)

    def cuDevicePrimaryCtxGetState(self, dev: int) -> tuple[int, int, int]:
        return SUCCESS, 0, int(self.primary_refs[dev] > 0)

    def cuDevicePrimaryCtxRetain(self, dev: int) -> tuple[int, int]:
        self.primary_refs[dev] += 1
        return SUCCESS, dev + 1

    def cuDevicePrimaryCtxRelease(self, dev: int) -> tuple[int]:
        self.primary_refs[dev] -= 1
        return (SUCCESS,)

    def cuCtxPushCurrent(self, ctx: int) -> tuple[int]:
        self._stack.append(ctx)
        return (SUCCESS,)

    def cuCtxPopCurrent(self) -> tuple[int, int | None]:
        if not self._stack:
            return INVALID_CONTEXT, None
        return SUCCESS, self._stack.pop()

    def cuCtxSynchronize(self) -> tuple[int]:
        self._step("cuCtxSynchronize")
        if not self._stack:
            return (INVALID_CONTEXT,)
        for stream in self.streams.values():
            if stream.context == self._stack[-1]:
                self._run(stream, len(stream.pending))
        return (SUCCESS,)

    def cuStreamCreate(self, flags: int) -> tuple[int, int | None]:
        if not self._stack:
            return INVALID_CONTEXT, None
        sid = next(self._ids)
        self.streams[sid] = _Stream(self._stack[-1])
        return SUCCESS, sid

    def cuStreamDestroy(self, stream: int) -> tuple[int]:
        assert not self.streams[stream].pending, "stream destroyed with work pending"
        del self.streams[stream]
        return (SUCCESS,)

    def cuStreamSynchronize(self, stream: int) -> tuple[int]:
        self._step("cuStreamSynchronize")
        self._run(self.streams[stream], len(self.streams[stream].pending))
        return (SUCCESS,)

    def cuEventCreate(self, flags: int) -> tuple[int, int | None]:
        if not self._stack:
            return INVALID_CONTEXT, None
        eid = next(self._ids)
        self.events[eid] = [self._stack[-1], 0, 0]
        return SUCCESS, eid

    def cuEventDestroy(self, event: int) -> tuple[int]:
        del self.events[event]
        return (SUCCESS,)

    def cuEventRecord(self, event: int, stream: int) -> tuple[int]:
        self._step("cuEventRecord")
        state = self.events[event]
        if self.streams[stream].context != state[0] or self._stack[-1:] != [state[0]]:
            return (INVALID_HANDLE,)
        state[1] += 1
        generation = state[1]
        self.streams[stream].pending.append(lambda: state.__setitem__(2, generation))
        return (SUCCESS,)

    def cuEventSynchronize(self, event: int) -> tuple[int]:
        self._step("cuEventSynchronize")
        state = self.events[event]
        for stream in self.streams.values():
            while state[2] < state[1] and stream.pending:
                stream.pending.pop(0)()
        return (SUCCESS,)

    def cuMemHostAlloc(self, size: int, flags: int) -> tuple[int, int | None]:
        if not self._stack:
            return INVALID_CONTEXT, None
        if self.pinned_bytes + size > self.pinned_limit:
            return OUT_OF_MEMORY, None
        buf = ctypes.create_string_buffer(size)
        self.pinned[ctypes.addressof(buf)] = buf
        self.pinned_peak = max(self.pinned_peak, self.pinned_bytes)
        return SUCCESS, ctypes.addressof(buf)

    def cuMemFreeHost(self, ptr: int) -> tuple[int]:
        return (SUCCESS,) if self.pinned.pop(ptr, None) is not None else (INVALID_VALUE,)

    def cuMemAlloc(self, size: int) -> tuple[int, int | None]:
        if not self._stack:
            return INVALID_CONTEXT, None
        return self._alloc(self._current_device(), size)

    def _alloc(self, device: int, size: int) -> tuple[int, int | None]:
        gpu = self.gpus[device]
        if gpu.allocated + size > gpu.memory:
            return OUT_OF_MEMORY, None
        gpu.allocated += size
        buf = ctypes.create_string_buffer(size)
        self.device_mem[ctypes.addressof(buf)] = (device, buf)
        return SUCCESS, ctypes.addressof(buf)

    def cuMemFree(self, ptr: int) -> tuple[int]:
        device, buf = self.device_mem.pop(int(ptr))
        self.gpus[device].allocated -= len(buf)
        return (SUCCESS,)

    def cuMemGetInfo(self) -> tuple[int, int | None, int | None]:
        if not self._stack:
            return INVALID_CONTEXT, None, None
        gpu = self.gpus[self._current_device()]
        return SUCCESS, gpu.memory - gpu.allocated, gpu.memory

    def cuPointerGetAttribute(self, attr: str, ptr: int) -> tuple[int, int | None]:
        found = self._device_of(ptr)
        return (SUCCESS, found) if found is not None else (INVALID_VALUE, None)

    def _device_of(self, ptr: int) -> int | None:
        for start, (device, buf) in self.device_mem.items():
            if start <= ptr < start + len(buf):
                return device
        return None

    def _pinned_range(self, ptr: int, size: int) -> bool:
        return any(s <= ptr and ptr + size <= s + len(b) for s, b in self.pinned.items())

    def cuMemcpyDtoHAsync(self, dst: int, src: int, size: int, stream: int) -> tuple[int]:
        return self._copy(dst, src, size, stream, host=dst, device=src)

    def cuMemcpyHtoDAsync(self, dst: int, src: int, size: int, stream: int) -> tuple[int]:
        return self._copy(dst, src, size, stream, host=src, device=dst)

    def _copy(self, dst: int, src: int, size: int, stream: int, host: int, device: int) -> tuple:
        self._step("copy")
        if self._stack[-1:] != [self.streams[stream].context]:
            return (INVALID_CONTEXT,)
        if not self._pinned_range(host, size):
            return (INVALID_VALUE,)  # the engine must only DMA through its pinned ring
        if self._device_of(device) is None or self._device_of(device + size - 1) is None:
            return (INVALID_VALUE,)
        self.streams[stream].pending.append(lambda: ctypes.memmove(dst, src, size))
        return (SUCCESS,)

    def cuGetErrorString(self, err: int) -> tuple[int, bytes]:
        return SUCCESS, NAMES.get(int(err), "unknown").encode()


@pytest.fixture(params=["lazy", "eager", "random"])
def simulated_driver(request: pytest.FixtureRequest) -> SimulatedDriver:
    """A simulated 2-GPU driver, once per way the simulated GPU can make progress."""
    return SimulatedDriver(gpus=2, progress=request.param, seed=7)
