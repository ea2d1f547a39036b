"""Stages 2 to 5 of a resume: the storages of a snapshot allocated, read, served, finished.

Call order (``restore._restore``), one way: ``resume_plan.make_plan`` (stage 1) decides where
every storage goes; ``StorageLoader(store, manifest, plan, ...)`` allocates (stage 2: device
memory for the storages the plan streams to a GPU); ``start()`` starts reading every blob in
parallel (in ``read_order``), each verified against its digest (stage 3). Each reader makes its
blob's host buffers: a blob of a local file store (at least ``MAP_MIN_BYTES``, nothing of it
bound for a GPU stream) is mapped privately (``memory.map_private``) and hashed through the
mapping, and its storages are served over it, nothing copied (a write copies the page, the file
never changes; like safetensors' own load, but every byte verified first); any other blob is
read into new memory, faulted in at once (``memory.populate``), not page by page as it copies.
The graph is unpickled under ``rebuild.loading`` and asks for storages by key (stage 4); ``finish()``
(or ``abort()``) waits for every read and device copy (stage 5); only then do ``damaged`` and
``not_fitted`` say everything. The loader never plans: an allocation that fails after all (the
GPU filled up since it was measured) puts that storage on the CPU and names it in ``not_fitted``.

Streamed storages go from storage through the engine's pinned ring to their device (host memory
stays within the ring, whatever the VRAM size); without the engine, GPU-bound torch storages are
read into host memory and copied by torch.

Invariants: no storage reaches the unpickler (and so no user ``__setstate__`` or reduce
callable sees its bytes) before its blob was read in full and its digest checked: the unpickler
runs while the blobs are read, and waits only when it asks for a storage whose blob is not in
yet. A storage whose blob failed its check is served as zeros (its objects are then reported
as not restored), never with the bytes that did not match. A storage bound for a GPU is handed
over only after its bytes landed there; nothing reaches the user before ``finish()`` has waited
for every read and every copy to a device.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

from jupyter_gkeresume.errors import GkeResumeError, IntegrityError, InvalidInputError
from jupyter_gkeresume.snapshot import Manifest, SnapshotStore
from jupyter_gkeresume.snapshot.blobfile import (
    BlobLayout,
    EntryTarget,
    read_verified,
    verify_mapped,
)
from jupyter_gkeresume.snapshot.fingerprint import cuda_status
from jupyter_gkeresume.snapshot.format import StorageRef

from .blobwriter import remember_blob
from .cuda_arrays import CudaArrayInfo, cuda_array_on_cpu, cuda_array_on_device
from .cuda_engine import CudaEngine, DeviceAllocation, Uploader
from .errors import CudaError, CudaOutOfMemoryError
from .memory import host_view, map_private, populate
from .progress import PhaseBytes, ProgressSink
from .resume_plan import ResumePlan, StoragePlace

#: The alignment of a restored storage's first byte: as torch's CPU allocator aligns every
#: storage (c10/core/alignment.h, ``gAlignment``) and malloc a NumPy array. Arithmetic depends
#: on it: MKL's kernels round an operand 8 bytes off a 16-byte boundary differently (a
#: tutorial's training, batches sliced from a tensor served over its blob at such an offset,
#: reached another loss after the resume). Over a mapped blob, an entry not so aligned (in a
#: pack of small storages, or in a blob written before its data started on 64 bytes) is
#: copied into new memory.
HOST_ALIGNMENT = {"torch": 64, "numpy": 16}
#: Blobs at least this big are mapped when their store is a local file (smaller ones are read):
#: the own blob of every storage of 1 MiB or more (``blobwriter.PACK_BELOW``) and the bigger
#: packs of small ones.
MAP_MIN_BYTES = 1 << 20
#: At most this many blobs are mapped by one restore; the rest are read (``vm.max_map_count``
#: is 65530 by default, for every map of the process).
MAX_MAPPINGS = 8192


class StorageLoader:
    """Allocates every storage where ``plan`` puts it, reads the blobs in parallel into host
    buffers or (streamed) device memory, and serves them to the unpickler by key. See the
    module docstring for the call order."""

    def __init__(self, store: SnapshotStore, manifest: Manifest, plan: ResumePlan,
                 engine: CudaEngine | None, concurrency: int,
                 progress: ProgressSink | None, warnings: list[str]):
        self.store = store
        self.manifest = manifest
        self.warnings = warnings
        self.damaged: dict[str, str] = {}  # storage key -> reason
        self.not_fitted: dict[str, str] = {}  # storage key -> the device it did not fit on
        self.bytes_read = 0
        self._lock = threading.Lock()
        self._engine = engine
        self._places = dict(plan.places)  # key -> where it is; an allocation failure moves it
        self._on_device: dict[str, Any] = {}  # key -> GPU memory its bytes stream into
        self._buffers: dict[str, Any] = {}  # key -> host buffer
        self._mapped: dict[str, tuple[Any, int]] = {}  # key -> (mapping, offset) to serve it over
        for key in manifest.storages:
            memory = self._device_memory(key) if self._places[key].streamed else None
            if memory is not None:
                self._on_device[key] = memory
        self._mappings = 0  # blobs mapped so far (each is one of the process's memory maps)
        self._untyped: dict[str, Any] = {}
        self._made: dict[str, list[Any]] = {}  # key -> the CUDA arrays made over it
        self._reading = PhaseBytes("reading", sum(s.nbytes for s in manifest.storages.values()),
                                   progress)
        self._cleanup = ExitStack()
        self._uploads: Uploader | None = None
        if self._on_device:
            self._uploads = self._cleanup.enter_context(engine.uploads())
        self._concurrency = concurrency
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="gkeresume-read")
        self._torch_imported = threading.Event()  # by the calling thread: see ``_host_buffer``
        self._futures: dict[str, Future] = {}
        self._synchronized: set[tuple[Future, int]] = set()  # (blob read, GPU) whose copies landed

    # -- call order ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start reading every storage blob, in ``read_order``. Equal content is stored once, so
        one blob entry may hold several distinct storages: all are filled from it. numpy and
        torch are imported here, on the calling thread (``_import_first``; torch while the
        readers map and verify the big blobs, which need neither; a reader making a torch
        buffer waits for it: ``_host_buffer``)."""
        by_blob: dict[str, dict[int, list[str]]] = {}
        for key, ref in self.manifest.storages.items():
            by_blob.setdefault(ref.blob, {}).setdefault(ref.entry, []).append(key)
        kinds = {ref.kind for ref in self.manifest.storages.values()}
        if kinds:
            _import_first("numpy")
        try:
            for digest in read_order(self.manifest, self._concurrency):
                entries = by_blob[digest]
                future = self._pool.submit(self._read_blob, digest, entries)
                for keys in entries.values():
                    for key in keys:
                        self._futures[key] = future
            if "torch" in kinds:
                _import_first("torch")  # while the mapped blobs are read
        finally:
            self._torch_imported.set()

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
                device = self._place(key).device
                host = self._buffer(key).untyped_storage()
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
        buffer = self._buffer(key)
        if self._place(key).gpu is not None and key not in self.damaged:
            self._warn_once(f"CUDA arrays come back on the CPU as NumPy arrays: {cuda_status()[1]}")
        return cuda_array_on_cpu(info, buffer)

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

    def _place(self, key: str) -> StoragePlace:
        return self._places.get(key) or StoragePlace("cpu")

    # -- allocating ------------------------------------------------------------------------------
    def _device_memory(self, key: str) -> Any:
        """``key``'s memory on its GPU, or None when it did not fit there after all (then it is
        restored on the CPU and reported)."""
        ref, place = self.manifest.storages[key], self._places[key]
        device = place.device
        try:
            if ref.kind == "cuda_array":
                return self._engine.allocate(ref.nbytes, place.gpu)
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
        self._places[key] = StoragePlace("cpu")
        return None

    def _copy_by_torch(self, key: str, host: Any) -> Any:
        """Without the engine: torch copies the host bytes to the GPU; when it does not fit, the
        storage stays on the CPU and is remembered, so the objects using it are reported."""
        import torch

        device = self._place(key).device
        try:
            target = torch.UntypedStorage(host.nbytes(), device=device)
        except torch.OutOfMemoryError:
            self.not_fitted[key] = device
            return host
        target.copy_(host)
        return target

    @property
    def reads_done(self) -> bool:
        """Every storage's bytes are in (read, verified, or given up as damaged)."""
        return self._reading.done >= self._reading.total

    # -- reading ---------------------------------------------------------------------------------
    def _read_blob(self, digest: str, entries: dict[int, list[str]]) -> None:
        """Read one blob into its storages (over its mapping, or into new host buffers); a
        failure marks all its keys damaged. Progress moves with every chunk read and
        verified."""
        nbytes = sum(self.manifest.storages[keys[0]].nbytes * len(keys) for keys in entries.values())
        share = self._reading.share(nbytes)
        try:
            mappable = self._mappable(digest, entries)
            with self.store.open_blob(digest, keep_cache=mappable) as (f, size):
                mapping = self._map(f, size) if mappable else None
                if mapping is None:
                    self._allocate_host([k for keys in entries.values() for k in keys])
                    layout = read_verified(f, digest, size,
                                           lambda i, n: self._target(entries.get(i), n), share.add)
                else:
                    layout = verify_mapped(f, digest, size, memoryview(mapping), share.add)
                    self._serve_mapped(mapping, layout, entries)
        except (GkeResumeError, OSError) as exc:
            for keys in entries.values():
                for key in keys:
                    self.damaged[key] = f"blob {digest[:12]} unreadable: {exc}"
                    self._zero(key)
            share.finish()
            return
        for first, *others in entries.values():
            size = self.manifest.storages[first].nbytes
            if any(k in self._on_device for k in (first, *others)):
                continue  # a sink fed them all
            for key in others:  # equal bytes, but a distinct storage: its own copy
                host_view(_address(self._buffers[key]), size)[:] = self._host_bytes(first)
        self._remember(digest, entries, len(layout.entry_sizes))
        with self._lock:
            self.bytes_read += nbytes
        share.finish()

    def _mappable(self, digest: str, entries: dict[int, list[str]]) -> bool:
        """Whether blob ``digest``'s storages may be served over a mapping of its file: the
        store is a local directory, the blob is not small (``MAP_MIN_BYTES``), none of its
        storages streams to a GPU, and fewer than ``MAX_MAPPINGS`` blobs are mapped (the
        process's number of maps is bounded: ``vm.max_map_count``)."""
        return (self.store.backend.local and self.manifest.blobs[digest] >= MAP_MIN_BYTES
                and not any(k in self._on_device for keys in entries.values() for k in keys)
                and self._mappings < MAX_MAPPINGS)

    def _map(self, f: Any, size: int) -> Any:
        """The private mapping of a blob file (``memory.map_private``), counted; None where
        the file cannot be mapped (it is then read)."""
        mapping = map_private(f, size)
        if mapping is not None:
            with self._lock:
                self._mappings += 1
        return mapping

    def _serve_mapped(self, mapping: Any, layout: BlobLayout,
                      entries: dict[int, list[str]]) -> None:
        """After ``verify_mapped``: each entry's first storage will be served over the mapping
        (its buffer is made when it is first served, ``_buffer``: torch, which the unpickler
        imports meanwhile, is not needed to read), the others that hold equal bytes get new
        buffers (filled by the caller)."""
        for entry, (first, *others) in entries.items():
            ref = self.manifest.storages[first]
            if entry >= len(layout.entry_sizes) or layout.entry_sizes[entry] != ref.nbytes:
                raise IntegrityError(f"blob entry {entry} does not hold the {ref.nbytes} bytes "
                                     f"of storage {first}")
            self._mapped[first] = (mapping, layout.entry_offsets[entry])
            self._allocate_host(others)

    def _allocate_host(self, keys: list[str]) -> None:
        """New host buffers for ``keys`` that are not streamed to a GPU, faulted in at once
        rather than page by page as they are filled."""
        for key in keys:
            if key not in self._on_device:
                ref = self.manifest.storages[key]
                self._buffers[key] = self._host_buffer(ref)
                populate(_address(self._buffers[key]), ref.nbytes)

    def _remember(self, digest: str, entries: dict[int, list[str]], count: int) -> None:
        """Tell the checkpoint's skip-cache that these verified host bytes make blob ``digest``,
        so the next checkpoint reuses it instead of writing it again."""
        if sorted(entries) != list(range(count)):
            return
        keys = [entries[i][0] for i in range(count)]
        if any(k in self._on_device for k in keys):
            return
        refs = [self.manifest.storages[k] for k in keys]
        views = [self._host_bytes(k) for k in keys]
        addresses = [_address(self._buffers[k]) if k in self._buffers else None for k in keys]
        remember_blob(digest, [r.dtype for r in refs], views, addresses)

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
                    uploads.write(_address(memory) + offset, self._places[key].gpu, chunk)
                else:
                    host_view(_address(self._buffers[key]) + offset, len(chunk))[:] = chunk
            offset += len(chunk)

        return sink

    def _zero(self, key: str) -> None:
        """A damaged storage's bytes become zeros before its read is done (so before anything
        is served): its host buffer is cleared; one streamed to a GPU is served from a new
        zeroed host buffer instead (the device memory, which may have taken some of the
        unverified bytes, is never handed out)."""
        self._mapped.pop(key, None)
        if key in self._on_device or key not in self._buffers:
            self._buffers[key] = self._host_buffer(self.manifest.storages[key])
        ctypes.memset(_address(self._buffers[key]), 0, self.manifest.storages[key].nbytes)

    def _landed(self, key: str) -> bool:
        """For a storage streamed to a GPU: wait until its bytes are there, then True (False
        when its blob failed: ``_zero`` gave it a host buffer)."""
        if key not in self._on_device:
            return False
        read, gpu = self._futures[key], self._places[key].gpu
        read.result()
        if key in self.damaged:
            return False
        if (read, gpu) not in self._synchronized:  # once per blob and GPU
            self._uploads.synchronize(gpu)
            self._synchronized.add((read, gpu))
        return True

    def _buffer(self, key: str) -> Any:
        """``key``'s host buffer once its blob is read and verified (or zeroed: ``_zero``)."""
        if key not in self._futures:
            raise InvalidInputError(f"graph names storage {key} that the manifest lacks here")
        self._futures[key].result()
        if key not in self._buffers:
            mapping, offset = self._mapped.pop(key)
            self._buffers[key] = self._host_buffer(self.manifest.storages[key], (mapping, offset))
        return self._buffers[key]

    def _host_buffer(self, ref: StorageRef, over: tuple[Any, int] | None = None) -> Any:
        """``_allocate(ref, over)``, torch's only once the calling thread of ``start`` imported
        torch: a reader that made the first torch buffer of a fresh kernel ran torch's import
        on its own thread, which ends with the resume, and what torch ties to the importing
        thread went with it (kineto's profiler client: every later profile printed "External
        init callback must run in same thread as registerClient")."""
        if ref.kind == "torch":
            self._torch_imported.wait()
        return _allocate(ref, over=over)

    def _host_bytes(self, key: str) -> memoryview:
        """The verified host bytes of ``key`` (its blob is read): its buffer's, or the span of
        the mapping it will be served over."""
        nbytes = self.manifest.storages[key].nbytes
        if key in self._buffers:
            return host_view(_address(self._buffers[key]), nbytes)
        mapping, offset = self._mapped[key]
        return memoryview(mapping)[offset:offset + nbytes]


def _import_first(package: str) -> None:
    """Import ``package`` (numpy, torch: what the readers make host buffers with) on the
    calling thread, the one that unpickles, before it imports any of its submodules. CPython
    takes a submodule's import lock before it imports the parent (importlib._bootstrap,
    ``_find_and_load``): while a reader imported numpy, the unpickler asking for
    ``numpy._core.numeric`` held what the reader needed next and waited for what the reader
    held; the deadlock check handed one of them a partly initialized module, and numpy was
    broken in that kernel for good. Both importing the top-level package wait on one lock
    instead. A package that is not installed here is left to fail the records that need it."""
    with contextlib.suppress(ImportError):
        importlib.import_module(package)


def read_order(manifest: Manifest, concurrency: int) -> list[str]:
    """The storage blobs in the order to read them: first those big enough to bound the read
    time (each at least the total over ``concurrency``), largest first, then the rest in the
    order the unpickler asks for their storages (``s0, s1, ...``, the order they were pickled),
    so that unpickling, which waits for each storage's blob, keeps up with the reads."""
    first_need: dict[str, int] = {}
    for key, ref in manifest.storages.items():
        index = int(key[1:]) if key[1:].isdigit() else len(manifest.storages)
        first_need[ref.blob] = min(index, first_need.get(ref.blob, index))
    total = sum(manifest.blobs[d] for d in first_need)
    big = {d for d in first_need if manifest.blobs[d] * concurrency >= total}
    return sorted(first_need, key=lambda d: (0, -manifest.blobs[d]) if d in big
                  else (1, first_need[d]))


def _allocate(ref: StorageRef, over: tuple[Any, int] | None = None) -> Any:
    """A host buffer for one storage: a torch uint8 tensor, or a numpy array. A numpy
    storage's buffer has the dtype its root array had (the entry's, when numpy has it and the
    size is a whole number of items), so the arrays restored over it have the same root as
    before: the next checkpoint labels the entry alike and reuses its blob.

    ``over=(mapping, offset)``: the buffer is the mapping's bytes from ``offset``, not new
    memory, unless they are too few to map (none) or not aligned as the memory of their kind
    is (``HOST_ALIGNMENT``: the mapping starts on a page); then they are copied into a new
    buffer."""
    import numpy

    dtype = _plain_numpy_dtype(ref.dtype) if ref.kind == "numpy" else None
    if dtype is None or ref.nbytes % dtype.itemsize:
        dtype = numpy.dtype(numpy.uint8)
    if over is not None:
        mapping, offset = over
        if ref.nbytes and offset % HOST_ALIGNMENT.get(ref.kind, dtype.alignment) == 0:
            if ref.kind == "torch":
                import torch

                return torch.frombuffer(mapping, dtype=torch.uint8, count=ref.nbytes,
                                        offset=offset)
            return numpy.frombuffer(mapping, dtype=dtype, count=ref.nbytes // dtype.itemsize,
                                    offset=offset)
        buffer = _allocate(ref)
        host_view(_address(buffer), ref.nbytes)[:] = memoryview(mapping)[offset:offset + ref.nbytes]
        return buffer
    if ref.kind == "torch":
        import torch

        return torch.empty(ref.nbytes, dtype=torch.uint8)
    return numpy.empty(ref.nbytes // dtype.itemsize, dtype=dtype)


def _plain_numpy_dtype(name: str) -> Any:
    """The numpy dtype ``name`` labels (as ``StorageCollector`` writes it: ``dtype.name`` of a
    native dtype without fields), or None for anything else: never one holding objects."""
    import numpy

    try:
        dtype = numpy.dtype(name)
    except (TypeError, ValueError):
        return None
    if dtype.hasobject or dtype.names or not dtype.itemsize or not dtype.isnative:
        return None
    return dtype


def _address(memory: Any) -> int:
    """Address of a torch tensor or storage (host or GPU), a numpy array or an engine
    allocation."""
    if hasattr(memory, "data_ptr"):
        return memory.data_ptr()
    return memory.ptr if isinstance(memory, DeviceAllocation) else memory.ctypes.data
