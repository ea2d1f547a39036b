"""The storages of a snapshot on their way back: blobs read in parallel, verified, and served to
the unpickler (``rebuild``) by key as torch storages, NumPy buffers or CUDA arrays.

Call order (``restore._restore``): ``StorageLoader(...)`` plans where every storage goes and
starts all reads; ``read_graph_blob()``; unpickle under ``rebuild.loading(loader)``; then
``finish()`` (or ``abort()`` on failure); only then do ``damaged`` and ``not_fitted`` say
everything.

Where storages go. ``plan_device_mapping`` maps saved devices onto the GPUs here (fewer GPUs: by
order; none: the CPU), then ``plan_placement`` fits whole objects (the storages of each owning
name, in priority order) into each GPU's free memory less a reserve; what does not fit is
restored on the CPU and reported. With the CUDA engine, GPU-bound storages are allocated on their
device up front and their blob bytes stream from storage through the engine's pinned ring to the
device (host memory stays within the ring, whatever the VRAM state); without it, they are read
into host memory and copied by torch.

Invariants: nothing reaches the user before ``finish()`` has waited for every read, its digest
check and every copy to a device; a storage bound for a GPU is handed to the unpickler only after
its bytes landed there.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

from jupyter_gkeresume.errors import CudaError, CudaOutOfMemoryError, GkeResumeError, InvalidInputError
from jupyter_gkeresume.snapshot import Manifest, SnapshotStore
from jupyter_gkeresume.snapshot.blobfile import EntryTarget, read_verified
from jupyter_gkeresume.snapshot.fingerprint import cuda_status

from .blobwriter import remember_blob
from .cuda_arrays import CudaArrayInfo, cuda_array_on_cpu, cuda_array_on_device
from .cuda_engine import DeviceAllocation, Uploader, get_engine
from .cuda_plan import cuda_index, plan_device_mapping, plan_placement
from .memory import host_view
from .progress import PhaseBytes, ProgressSink

GPU_RESERVE_MAX = 1 << 30


class StorageLoader:
    """Reads storage blobs in parallel into buffers (host) or device memory (GPU, streamed)
    allocated up front, and serves them to the unpickler by key. See the module docstring."""

    def __init__(self, store: SnapshotStore, manifest: Manifest, concurrency: int,
                 progress: ProgressSink | None, warnings: list[str],
                 priority: list[str]):
        self.store = store
        self.manifest = manifest
        self.warnings = warnings
        self.damaged: dict[str, str] = {}  # storage key -> reason
        self.not_fitted: dict[str, str] = {}  # storage key -> the device it did not fit on
        self.bytes_read = 0
        self._lock = threading.Lock()
        self._engine = get_engine()
        self._devices = self._plan_devices(priority)  # key -> device here
        self._on_device: dict[str, Any] = {}  # key -> GPU memory its bytes stream into
        self._buffers: dict[str, Any] = {}  # key -> host buffer
        for key, ref in manifest.storages.items():
            memory = self._device_memory(key) if self._streams(key) else None
            if memory is not None:
                self._on_device[key] = memory
            else:
                self._buffers[key] = _allocate(ref.kind, ref.nbytes)
        self._untyped: dict[str, Any] = {}
        self._made: dict[str, list[Any]] = {}  # key -> the CUDA arrays made over it
        self._reading = PhaseBytes("reading", sum(s.nbytes for s in manifest.storages.values()),
                                   progress)
        self._cleanup = ExitStack()
        self._uploads: Uploader | None = None
        if self._on_device:
            self._uploads = self._cleanup.enter_context(self._engine.uploads())
        # Equal content is stored once, so one blob entry may hold several distinct storages.
        by_blob: dict[str, dict[int, list[str]]] = {}
        for key, ref in manifest.storages.items():
            by_blob.setdefault(ref.blob, {}).setdefault(ref.entry, []).append(key)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="gkeresume-read")
        self._futures: dict[str, Future] = {}
        self._synchronized: set[tuple[Future, int]] = set()  # (blob read, GPU) whose copies landed
        for digest, entries in sorted(by_blob.items(), key=lambda kv: -manifest.blobs[kv[0]]):
            future = self._pool.submit(self._read_blob, digest, entries)
            for keys in entries.values():
                for key in keys:
                    self._futures[key] = future

    # -- call order ------------------------------------------------------------------------------
    def read_graph_blob(self) -> bytearray:
        """The graph pickle (the blob's single entry), read once into its own buffer."""
        entries: list[bytearray] = []

        def destination(entry: int, nbytes: int) -> memoryview:
            entries.append(bytearray(nbytes))
            return memoryview(entries[-1])

        with self.store.open_blob(self.manifest.graph_blob) as (f, size):
            read_verified(f, self.manifest.graph_blob, size, destination)
        return entries[0]

    def finish(self) -> None:
        """Wait for every read, digest check and device copy; after it, ``damaged`` is
        complete. A device copy that failed raises ``CudaError``."""
        self._pool.shutdown(wait=True, cancel_futures=False)
        self._cleanup.close()

    def abort(self) -> None:
        """Stop reading and wait for what is in flight (the failure being handled says more)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        try:
            self._cleanup.close()
        except CudaError:
            pass

    # -- served to rebuild -----------------------------------------------------------------------
    def torch_storage(self, key: str) -> Any:
        """The untyped storage for ``key``, on its device here, one object per key."""
        if key not in self._untyped:
            if self._landed(key):
                self._untyped[key] = self._on_device[key]
            else:
                device = self._devices.get(key, "cpu")
                host = self._buffer(key, wait=device != "cpu").untyped_storage()
                self._untyped[key] = host if device == "cpu" else self._copy_by_torch(key, host)
        return self._untyped[key]

    def cuda_array(self, key: str, record: dict[str, Any]) -> Any:
        """A ``__cuda_array_interface__`` array for ``record`` over the bytes of ``key``: on its
        GPU here, or a NumPy array where it has no GPU (or did not fit). Arrays sharing ``key``
        share the restored memory."""
        info = CudaArrayInfo.from_dict(record)
        if key in self.manifest.storages and info.nbytes != self.manifest.storages[key].nbytes:
            raise InvalidInputError(f"CUDA array record does not match storage {key}")
        if self._landed(key):
            array = cuda_array_on_device(info, self._on_device[key])
            self._made.setdefault(key, []).append(array)
            return array
        if cuda_index(self._devices.get(key, "cpu")) is not None:
            self._warn_once(f"CUDA arrays come back on the CPU as NumPy arrays: {cuda_status()[1]}")
        return cuda_array_on_cpu(info, self._buffer(key))

    def numpy_buffer(self, key: str) -> Any:
        return self._buffer(key)

    def storage_identities(self, keys: set[str]) -> set[int]:
        """ids of the buffers behind ``keys`` and of the CUDA arrays made over them (to find the
        objects that use damaged storages)."""
        ids = set()
        for key in keys:
            buf = self._buffers.get(key)
            if buf is not None:
                ids.add(id(buf))
            untyped = self._untyped.get(key)
            if untyped is not None:
                ids.add(untyped._cdata)
            ids.update(id(array) for array in self._made.get(key, ()))
        return ids

    def _warn_once(self, warning: str) -> None:
        if warning not in self.warnings:
            self.warnings.append(warning)

    # -- placement -------------------------------------------------------------------------------
    def _plan_devices(self, priority: list[str]) -> dict[str, str]:
        """Each storage's device here (see the module docstring)."""
        storages = self.manifest.storages
        saved = sorted({s.device for s in storages.values()})
        mapping = plan_device_mapping(saved, self._gpu_count())
        self.warnings.extend(mapping.warnings)
        mapped = {key: (mapping.get(s.device, "cpu"), s.nbytes) for key, s in storages.items()}
        gpus = {device for device, _ in mapped.values() if cuda_index(device) is not None}
        if not gpus:
            return {key: device for key, (device, _) in mapped.items()}
        owned: dict[str, list[str]] = {}
        for key, ref in storages.items():
            owned.setdefault(ref.owner or key, []).append(key)
        rank = {name: i for i, name in enumerate(priority)}
        objects = sorted(owned.items(), key=lambda item: rank.get(item[0], len(rank)))
        placement = plan_placement(objects, mapped, {d: self._usable_bytes(d) for d in gpus})
        self.warnings.extend(placement.warnings)
        return placement.devices

    def _gpu_count(self) -> int:
        """GPUs usable here: the CUDA engine's, else torch's (imported when torch storages were
        saved on a GPU: the graph needs torch anyway), else 0."""
        if self._engine is not None:
            return self._engine.device_count
        torch = sys.modules.get("torch")
        if torch is None and any(
            s.kind == "torch" and cuda_index(s.device) is not None
            for s in self.manifest.storages.values()
        ):
            import torch
        return torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0

    def _usable_bytes(self, device: str) -> int:
        """Free memory of ``device`` a restore may fill: all but a reserve of 5% of the GPU (at
        most 1 GiB) left for the next cell's workspaces."""
        index = cuda_index(device)
        if self._engine is not None:
            free, total = self._engine.memory_info(index)
        else:
            import torch

            free, total = torch.cuda.mem_get_info(index)
        return max(0, free - min(total // 20, GPU_RESERVE_MAX))

    def _streams(self, key: str) -> bool:
        """Whether ``key``'s bytes go from storage straight to its GPU through the engine."""
        kind = self.manifest.storages[key].kind
        return (self._engine is not None and kind in ("torch", "cuda_array")
                and cuda_index(self._devices[key]) is not None)

    def _device_memory(self, key: str) -> Any:
        """``key``'s memory on its GPU, or None when it did not fit there after all (then it is
        restored on the CPU and reported)."""
        ref, device = self.manifest.storages[key], self._devices[key]
        try:
            if ref.kind == "cuda_array":
                return self._engine.allocate(ref.nbytes, cuda_index(device))
            import torch

            try:
                return torch.UntypedStorage(ref.nbytes, device=device)
            except torch.OutOfMemoryError:
                raise CudaOutOfMemoryError(device) from None
            except (RuntimeError, AssertionError) as exc:  # e.g. a torch built without CUDA
                self._warn_once(f"torch cannot use {device} here ({exc}): its tensors come "
                                "back on the CPU")
        except CudaOutOfMemoryError:
            self.not_fitted[key] = device
        self._devices[key] = "cpu"
        return None

    def _copy_by_torch(self, key: str, host: Any) -> Any:
        """Without the engine: torch copies the host bytes to the GPU; when it does not fit, the
        storage stays on the CPU and is remembered, so the objects using it are reported."""
        import torch

        device = self._devices[key]
        try:
            target = torch.UntypedStorage(host.nbytes(), device=device)
        except torch.OutOfMemoryError:
            self.not_fitted[key] = device
            return host
        target.copy_(host)
        return target

    # -- reading ---------------------------------------------------------------------------------
    def _read_blob(self, digest: str, entries: dict[int, list[str]]) -> None:
        """Read one blob into its storages; a failure marks all its keys damaged. Progress
        moves with every chunk read and verified."""
        nbytes = sum(self.manifest.storages[keys[0]].nbytes * len(keys) for keys in entries.values())
        share = self._reading.share(nbytes)
        try:
            with self.store.open_blob(digest) as (f, size):
                layout = read_verified(f, digest, size, lambda i, n: self._target(entries.get(i), n),
                                       share.add)
        except (GkeResumeError, OSError) as exc:
            for keys in entries.values():
                for key in keys:
                    self.damaged[key] = f"blob {digest[:12]} unreadable: {exc}"
            share.finish()
            return
        for first, *others in entries.values():
            size = self.manifest.storages[first].nbytes
            if any(k in self._on_device for k in (first, *others)):
                continue  # a sink fed them all
            for key in others:  # equal bytes, but a distinct storage: its own copy
                host_view(_address(self._buffers[key]), size)[:] = \
                    host_view(_address(self._buffers[first]), size)
        self._remember(digest, entries, len(layout.entry_sizes))
        with self._lock:
            self.bytes_read += nbytes
        share.finish()

    def _remember(self, digest: str, entries: dict[int, list[str]], count: int) -> None:
        """Tell the checkpoint's skip-cache that these verified host bytes make blob ``digest``,
        so the next checkpoint reuses it instead of writing it again."""
        if sorted(entries) != list(range(count)):
            return
        keys = [entries[i][0] for i in range(count)]
        if any(k in self._on_device for k in keys):
            return
        refs = [self.manifest.storages[k] for k in keys]
        views = [host_view(_address(self._buffers[k]), r.nbytes) for k, r in zip(keys, refs, strict=True)]
        remember_blob(digest, [r.dtype for r in refs], views)

    def _target(self, keys: list[str] | None, nbytes: int) -> EntryTarget:
        """Where one blob entry goes: the first key's host buffer when all its storages are on
        the host (the others are copied after), else a sink feeding every one of them."""
        if not keys:
            return None
        if not any(k in self._on_device for k in keys):
            return host_view(_address(self._buffers[keys[0]]), nbytes)
        uploads, offset = self._uploads, 0

        def sink(chunk: memoryview) -> None:
            nonlocal offset
            for key in keys:
                memory = self._on_device.get(key)
                if memory is not None:
                    uploads.write(_address(memory) + offset, self._device_index(key), chunk)
                else:
                    host_view(_address(self._buffers[key]) + offset, len(chunk))[:] = chunk
            offset += len(chunk)

        return sink

    def _landed(self, key: str) -> bool:
        """For a storage streamed to a GPU: wait until its bytes are there, then True."""
        if key not in self._on_device:
            return False
        read = self._futures[key]
        read.result()
        if (read, self._device_index(key)) not in self._synchronized:  # once per blob and GPU
            self._uploads.synchronize(self._device_index(key))
            self._synchronized.add((read, self._device_index(key)))
        return True

    def _device_index(self, key: str) -> int:
        return cuda_index(self._devices[key])

    def _buffer(self, key: str, *, wait: bool = False) -> Any:
        if key not in self._buffers:
            raise InvalidInputError(f"graph names storage {key} that the manifest lacks here")
        if wait:
            self._futures[key].result()
        return self._buffers[key]


def _allocate(kind: str, nbytes: int) -> Any:
    """A host buffer for one storage: a torch uint8 tensor, or a numpy uint8 array."""
    if kind == "torch":
        import torch

        return torch.empty(nbytes, dtype=torch.uint8)
    import numpy

    return numpy.empty(nbytes, dtype=numpy.uint8)


def _address(memory: Any) -> int:
    """Address of a torch tensor or storage (host or GPU), a numpy array or an engine
    allocation."""
    if hasattr(memory, "data_ptr"):
        return memory.data_ptr()
    return memory.ptr if isinstance(memory, DeviceAllocation) else memory.ctypes.data
