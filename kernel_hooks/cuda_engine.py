"""The CUDA transfer engine: device <-> host copies through a bounded ring of pinned host buffers.

Built on cuda-python's driver API (no torch needed). One engine per process (``get_engine()``),
None when there is no usable GPU (see ``jupyter_gkeresume.snapshot.fingerprint.cuda_driver``):
importing this module never fails and never touches the driver.

Call order for a pause::

    engine = get_engine()            # None: no GPU, take the CPU path
    engine.synchronize_all()         # once, before capture: no kernel still writing a tensor
    for chunk in engine.device_to_host_chunks(ptr, nbytes, device_index):
        hasher.update(chunk); f.write(chunk)   # ``chunk`` is valid until the next iteration

and for a resume: ``engine.host_to_device(src, ptr, device_index)`` into memory freshly allocated
on the device (call ``synchronize_all()`` first if that memory may still be in use by another
library's stream).

Invariants. Host memory is ``buffers * chunk_bytes`` of pinned memory (traits below), allocated
on first use, whatever the transfer size. Copies run on the engine's own non-blocking stream of
each device's primary context (the one torch, CuPy and Numba use), ordered by one event per
buffer: a buffer is handed to the consumer only after its copy finished, and refilled only after
the consumer handed it back, so copying the next chunks overlaps with the consumer's hashing and
writing. One transfer runs at a time per engine; a second one from another thread waits, a
second one nested in the same thread is refused (``CudaError``). Driver failures raise
``CudaError``, bad arguments ``InvalidInputError``, both before any byte moves where possible.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

from traitlets import Int
from traitlets.config import Configurable

from jupyter_gkeresume.errors import InvalidInputError
from jupyter_gkeresume.snapshot.fingerprint import cuda_driver
from jupyter_gkeresume.units import human_bytes

from .cuda_plan import d2h_schedule, plan_chunks
from .errors import CudaError, CudaOutOfMemoryError

CUDA_ERROR_OUT_OF_MEMORY = 2
_UNSET = object()
_engine: Any = _UNSET
_engine_lock = threading.Lock()


def get_engine() -> CudaEngine | None:
    """The process-wide engine, or None when no GPU is usable here (decided once).

    Inside IPython the engine takes its traits from the shell's config
    (``c.CudaEngine.chunk_bytes = ...`` in ``ipython_kernel_config.py``).
    """
    global _engine
    with _engine_lock:
        if _engine is _UNSET:
            driver = cuda_driver()
            _engine = None if driver is None else CudaEngine(driver, parent=_ipython_shell())
        return _engine


def _ipython_shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


class DeviceRange(NamedTuple):
    """``nbytes`` of device memory at ``device_ptr`` on device ``device_index``."""

    device_ptr: int
    nbytes: int
    device_index: int


@dataclass
class _Device:
    """What the engine holds on one device: its primary context, stream and one event per buffer."""

    handle: Any
    context: Any
    stream: Any
    events: list[Any]


class CudaEngine(Configurable):
    """Pinned-ring transfers between host and the GPUs of this process (see module docstring)."""

    chunk_bytes = Int(
        64 << 20, config=True,
        help="Size of one pinned host buffer, the unit of one DMA copy (bytes).",
    )
    buffers = Int(
        4, config=True,
        help="Pinned buffers in the ring: host memory used is buffers * chunk_bytes.",
    )

    def __init__(self, driver: Any, **kwargs: Any):
        """``driver`` is an initialised ``cuda.bindings.driver`` (``cuda_driver()``)."""
        super().__init__(**kwargs)
        if self.chunk_bytes < 4096 or self.buffers < 2:
            raise InvalidInputError(
                f"CudaEngine needs chunk_bytes >= 4096 and buffers >= 2 "
                f"(got {self.chunk_bytes}, {self.buffers})"
            )
        self._drv = driver
        self._devices: dict[int, _Device] = {}
        self._ring: list[int] = []
        self._views: list[memoryview] = []
        self._lock = threading.Lock()
        self._devices_lock = threading.Lock()
        self._owner: int | None = None
        self.device_count: int = self._call("cuDeviceGetCount")

    @property
    def host_bytes(self) -> int:
        """Pinned host memory this engine uses (once the ring exists): the bound of every copy."""
        return self.chunk_bytes * self.buffers

    # -- public API ------------------------------------------------------------------------------
    def synchronize_all(self) -> None:
        """Wait for all work on every active primary context (all its streams) to finish.

        Contexts that are not active (no library used that GPU) have nothing in flight and are
        not created. Contexts made with ``cuCtxCreate`` by other libraries are not seen.
        """
        for index in range(self.device_count):
            handle = self._call("cuDeviceGet", index)
            _, active = self._call("cuDevicePrimaryCtxGetState", handle)
            if active:
                with self._current(self._device(index)):
                    self._call("cuCtxSynchronize")

    def device_to_host_chunks(
        self, device_ptr: int, nbytes: int, device_index: int
    ) -> Iterator[memoryview]:
        """Yield the ``nbytes`` at ``device_ptr`` on ``device_index`` as consecutive chunks.

        Each chunk is a read-only view of a pinned buffer, valid until the next iteration (copy
        it with ``bytes(chunk)`` to keep it); at most ``buffers * chunk_bytes`` host bytes are
        used. Arguments are checked now; copying starts at the first ``next()``. Stopping early
        (``break``, ``close()``) waits for the copies in flight.
        """
        ranges = [DeviceRange(device_ptr, nbytes, device_index)]
        self._check_ranges(ranges)
        return (chunk for _, chunk in self._d2h(ranges))

    def device_to_host_ranges(
        self, ranges: Sequence[DeviceRange]
    ) -> Iterator[tuple[int, memoryview]]:
        """Like ``device_to_host_chunks`` for several ranges in one pipeline: yields
        ``(range position, chunk)``, ranges in order, so the copies of the next range overlap
        the consumer of this one (many small tensors stream as fast as one big one)."""
        ranges = list(ranges)
        self._check_ranges(ranges)
        return self._d2h(ranges)

    def host_to_device(self, src: Any, device_ptr: int, device_index: int) -> None:
        """Copy the bytes of ``src`` (any C-contiguous buffer) to ``device_ptr`` on
        ``device_index``, staged through the ring; returns when the device holds them."""
        with self.uploads() as upload:
            upload.write(device_ptr, device_index, src)

    @contextmanager
    def uploads(self) -> Iterator[Uploader]:
        """The ring, for host-to-device copies from any number of threads (a resume streaming
        blobs from storage straight to the GPUs: host memory stays within the ring). Copies
        are in flight when ``write`` returns; ``synchronize(device_index)`` waits for those of one
        device, and leaving the block waits for all of them (also on error)."""
        with self._exclusive():
            uploader = Uploader(self)
            try:
                yield uploader
            finally:
                uploader.close()

    def pointer_device(self, device_ptr: int) -> int:
        """The device index that owns ``device_ptr`` (``InvalidInputError`` if none does)."""
        attr = self._drv.CUpointer_attribute
        try:
            return int(self._call(
                "cuPointerGetAttribute", attr.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, device_ptr
            ))
        except CudaError as exc:
            raise InvalidInputError(f"0x{device_ptr:x} is not CUDA device memory: {exc}") from None

    def memory_info(self, device_index: int) -> tuple[int, int]:
        """``(free, total)`` bytes of ``device_index`` (creates its primary context if needed)."""
        self._check_index(device_index)
        with self._current(self._device(device_index)):
            free, total = self._call("cuMemGetInfo")
        return int(free), int(total)

    def allocate(self, nbytes: int, device_index: int) -> DeviceAllocation:
        """``nbytes`` of device memory on ``device_index``, freed when the result is collected."""
        self._check_index(device_index)
        dev = self._device(device_index)
        with self._current(dev):
            ptr = self._call("cuMemAlloc", max(1, nbytes))
        return DeviceAllocation(self, dev, int(ptr), nbytes, device_index)

    def close(self) -> None:
        """Free the pinned ring, streams and events, and release the primary contexts."""
        with self._exclusive():
            for dev in self._devices.values():
                with self._current(dev):
                    self._call("cuStreamSynchronize", dev.stream)
            # The ring goes first: the context it was pinned in may die with the release below.
            for view in self._views:
                view.release()
            for ptr in self._ring:
                self._call("cuMemFreeHost", ptr)
            self._ring, self._views = [], []
            for dev in self._devices.values():
                with self._current(dev):
                    for event in dev.events:
                        self._call("cuEventDestroy", event)
                    self._call("cuStreamDestroy", dev.stream)
                self._call("cuDevicePrimaryCtxRelease", dev.handle)
            self._devices.clear()

    # -- the ring ----------------------------------------------------------------------------------
    def _d2h(self, ranges: list[DeviceRange]) -> Iterator[tuple[int, memoryview]]:
        chunks = plan_chunks([r.nbytes for r in ranges], self.chunk_bytes, self.buffers)
        with self._exclusive():
            devs = [self._device(r.device_index) for r in ranges]
            if devs:
                self._ensure_ring(devs[0])
            with self._draining(devs):
                for step, c in d2h_schedule(chunks, self.buffers):
                    dev = devs[c.part]
                    with self._current(dev):
                        if step == "copy":
                            self._call(
                                "cuMemcpyDtoHAsync", self._ring[c.buffer],
                                ranges[c.part].device_ptr + c.offset, c.size, dev.stream,
                            )
                            self._call("cuEventRecord", dev.events[c.buffer], dev.stream)
                            continue
                        self._call("cuEventSynchronize", dev.events[c.buffer])
                    chunk = self._views[c.buffer][: c.size].toreadonly()
                    try:
                        yield c.part, chunk
                    finally:
                        _release(chunk)

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """One transfer (or ``close``) at a time; see the module docstring."""
        me = threading.get_ident()
        if self._owner == me:
            raise CudaError(
                "a CUDA transfer is already running in this thread: finish or close the "
                "previous device_to_host_chunks iterator first"
            )
        with self._lock:
            self._owner = me
            try:
                yield
            finally:
                self._owner = None

    def _ensure_ring(self, dev: _Device) -> None:
        """Pin the ring on first use, in the context of the first device used (portable memory:
        every context can copy through it), so an idle GPU never gets a context for it."""
        if self._ring:
            return
        flags = self._drv.CU_MEMHOSTALLOC_PORTABLE
        with self._current(dev):
            try:
                for _ in range(self.buffers):
                    ptr = int(self._call("cuMemHostAlloc", self.chunk_bytes, flags))
                    self._ring.append(ptr)
                    raw = (ctypes.c_char * self.chunk_bytes).from_address(ptr)
                    self._views.append(memoryview(raw).cast("B"))
            except CudaError as exc:
                for view in self._views:
                    view.release()
                for ptr in self._ring:
                    self._call("cuMemFreeHost", ptr)
                self._ring, self._views = [], []
                if isinstance(exc, CudaOutOfMemoryError):
                    raise CudaOutOfMemoryError(
                        f"cannot pin {human_bytes(self.host_bytes)} of host memory ({exc}); "
                        "lower CudaEngine.chunk_bytes or CudaEngine.buffers"
                    ) from None
                raise

    @contextmanager
    def _draining(self, devs: Sequence[_Device]) -> Iterator[None]:
        """Leave no copy in flight into the ring, also when the transfer stops early or fails."""
        try:
            yield
        except BaseException:
            for dev in {id(d): d for d in devs}.values():
                try:
                    with self._current(dev):
                        self._call("cuStreamSynchronize", dev.stream)
                except CudaError:
                    pass  # the original error says more; that stream is dead either way
            raise
        for dev in {id(d): d for d in devs}.values():
            with self._current(dev):
                self._call("cuStreamSynchronize", dev.stream)

    # -- devices and contexts ------------------------------------------------------------------
    def _device(self, index: int) -> _Device:
        with self._devices_lock:
            dev = self._devices.get(index)
            if dev is None:
                dev = self._devices[index] = self._open_device(index)
        return dev

    def _open_device(self, index: int) -> _Device:
        """Retain ``index``'s primary context; create the engine's stream and events there."""
        handle = self._call("cuDeviceGet", index)
        context = self._call("cuDevicePrimaryCtxRetain", handle)
        self._call("cuCtxPushCurrent", context)
        try:
            stream = self._call("cuStreamCreate", self._drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
            # Blocking sync: a thread waiting for a copy sleeps instead of spinning a core that
            # the hashing and writing threads need.
            flags = self._drv.CUevent_flags
            flag = int(flags.CU_EVENT_DISABLE_TIMING) | int(flags.CU_EVENT_BLOCKING_SYNC)
            events = [self._call("cuEventCreate", flag) for _ in range(self.buffers)]
        finally:
            self._call("cuCtxPopCurrent")
        return _Device(handle, context, stream, events)

    @contextmanager
    def _current(self, dev: _Device) -> Iterator[None]:
        """Make ``dev``'s context current for a few calls, then restore the caller's (torch's)."""
        self._call("cuCtxPushCurrent", dev.context)
        try:
            yield
        finally:
            self._call("cuCtxPopCurrent")

    def _check_index(self, device_index: int) -> None:
        if not isinstance(device_index, int) or not 0 <= device_index < self.device_count:
            raise InvalidInputError(
                f"no CUDA device {device_index!r} here ({self.device_count} device(s))"
            )

    def _check_ranges(self, ranges: Sequence[DeviceRange]) -> None:
        """Refuse, before any copy, a range whose first or last byte is not device memory of its
        device: a bad pointer handed to an async copy can poison the whole context (every
        tensor of the session lost), so the driver is asked first."""
        for r in ranges:
            self._check_index(r.device_index)
            if not isinstance(r.nbytes, int) or r.nbytes < 0 or not isinstance(r.device_ptr, int):
                raise InvalidInputError(f"bad device range: {r}")
            for ptr in (r.device_ptr, r.device_ptr + r.nbytes - 1) if r.nbytes else ():
                owner = self.pointer_device(ptr)
                if owner != r.device_index:
                    raise InvalidInputError(
                        f"0x{ptr:x} is memory of cuda:{owner}, not of cuda:{r.device_index}"
                    )

    def _call(self, name: str, *args: Any) -> Any:
        """Call driver function ``name``; its value (None, one, or a tuple), or ``CudaError``."""
        try:
            out = getattr(self._drv, name)(*args)
        except RuntimeError as exc:
            raise CudaError(f"{name}: {exc}") from None
        err = out[0]
        if int(err) == CUDA_ERROR_OUT_OF_MEMORY:
            raise CudaOutOfMemoryError(f"{name} failed: {self._describe(err)}")
        if int(err) != 0:
            raise CudaError(f"{name} failed: {self._describe(err)}")
        return out[1] if len(out) == 2 else (out[1:] or None)

    def _describe(self, err: Any) -> str:
        try:
            code, text = self._drv.cuGetErrorString(err)
            if int(code) == 0 and text:
                return f"{getattr(err, 'name', err)} ({bytes(text).decode(errors='replace')})"
        except RuntimeError:
            pass
        return str(getattr(err, "name", err))


class Uploader:
    """Host-to-device copies through the engine's ring, from several threads at once
    (``CudaEngine.uploads``).

    A ``write`` takes free ring buffers one at a time, waits for the copy that last read each
    buffer (its event), fills it and queues its copy on the device's engine stream, so the
    threads' reads from storage overlap each other and the DMA. Only the engine that made it
    uses it, inside ``uploads()``.
    """

    def __init__(self, engine: CudaEngine):
        self.engine = engine
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(engine.buffers):
            self._free.put(slot)
        self._last: list[_Device | None] = [None] * engine.buffers  # who copied from each slot
        self._used: dict[int, _Device] = {}
        self._lock = threading.Lock()

    def write(self, device_ptr: int, device_index: int, src: Any) -> None:
        """Queue the copy of ``src`` (any C-contiguous buffer) to ``device_ptr`` on
        ``device_index``; ``src`` may be reused as soon as this returns."""
        engine = self.engine
        try:
            view = memoryview(src).cast("B")
        except TypeError:
            raise InvalidInputError("host-to-device copies need a C-contiguous buffer") from None
        engine._check_ranges([DeviceRange(device_ptr, len(view), device_index)])
        dev = engine._device(device_index)
        with self._lock:
            engine._ensure_ring(dev)
            self._used[device_index] = dev
        for offset in range(0, len(view), engine.chunk_bytes):
            part = view[offset : offset + engine.chunk_bytes]
            slot = self._free.get()
            try:
                previous = self._last[slot]
                if previous is not None:
                    with engine._current(previous):
                        engine._call("cuEventSynchronize", previous.events[slot])
                engine._views[slot][: len(part)] = part
                with engine._current(dev):
                    engine._call("cuMemcpyHtoDAsync", device_ptr + offset, engine._ring[slot],
                                 len(part), dev.stream)
                    engine._call("cuEventRecord", dev.events[slot], dev.stream)
                self._last[slot] = dev
            finally:
                self._free.put(slot)

    def synchronize(self, device_index: int) -> None:
        """Wait until every copy queued so far to ``device_index`` has landed."""
        with self._lock:
            dev = self._used.get(device_index)
        if dev is not None:
            with self.engine._current(dev):
                self.engine._call("cuStreamSynchronize", dev.stream)

    def close(self) -> None:
        """Wait for every copy; the first driver failure is raised after all were waited for."""
        failure: CudaError | None = None
        for index in list(self._used):
            try:
                self.synchronize(index)
            except CudaError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure


class DeviceAllocation:
    """Device memory owned by Python: ``nbytes`` at ``ptr`` on ``device_index``, freed when
    collected, but only into the context it came from: after ``engine.close()`` released that
    context (the driver may have destroyed it with its memory, and reused the address for a
    newer allocation) it is left to the driver."""

    def __init__(self, engine: CudaEngine, dev: _Device, ptr: int, nbytes: int,
                 device_index: int):
        self.engine, self._dev = engine, dev
        self.ptr, self.nbytes, self.device_index = ptr, nbytes, device_index

    def __del__(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None and engine._devices.get(self.device_index) is self._dev:
            try:
                with engine._current(self._dev):
                    engine._call("cuMemFree", self.ptr)
            except CudaError:
                pass  # interpreter shutdown or a dead context: the driver frees it anyway


def _release(chunk: memoryview) -> None:
    """End a delivered chunk's life so that a stale reference fails instead of reading new data."""
    try:
        chunk.release()
    except BufferError:
        raise CudaError(
            "a chunk from device_to_host_chunks is still in use (a reader in another thread?) after "
            "the next iteration; finish with it first, or copy it with bytes(chunk) to keep it"
        ) from None
