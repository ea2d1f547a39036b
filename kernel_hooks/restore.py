"""Resume: a signed manifest + blobs -> objects back in the namespace, with a full report.

Call order inside ``take_resume``: resolve the reference; take the snapshot's single-flight
``RestoreLease``; load and verify the manifest; judge
compatibility (``incompatible`` stops here); start reading every storage blob in parallel (each
verified against its digest while read); unpickle the graph record by record, storages arriving
through ``rebuild``; find what a damaged blob or a failed record cost; then, only when all
loading is done, assign the names in one step and apply the session state. A failure before that
last step leaves the namespace as it was.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import types
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from jupyter_gkeresume.errors import CudaOutOfMemoryError, GkeResumeError, InvalidInputError
from jupyter_gkeresume.snapshot import (
    Manifest,
    SigningKey,
    SnapshotStore,
    check_compatible,
    environment_fingerprint,
    load_manifest,
    resolve,
)
from jupyter_gkeresume.snapshot.blobfile import read_verified
from jupyter_gkeresume.snapshot.fingerprint import cuda_status
from jupyter_gkeresume.snapshot.lease import RestoreLease

from . import rebuild, session_state
from .capture import HOOKS_RECORD, SESSION_RECORD
from .cuda_arrays import CudaArrayInfo, cuda_array_on_cpu, cuda_array_on_device
from .cuda_engine import DeviceAllocation, get_engine
from .cuda_plan import cuda_index, plan_device_mapping, plan_placement
from .graph import read_graph
from .memory import host_view
from .results import Progress, ResumeResult, Skipped

MAX_WALK = 2_000_000
GPU_RESERVE_MAX = 1 << 30
DEFAULT_LEASE_WAIT = 600.0


class StorageLoader:
    """Reads storage blobs in parallel, straight into buffers allocated up front, and serves
    them to the unpickler by key.

    Host storages are handed out at once, while their bytes are still arriving: unpickling runs
    alongside the reads, and nothing reaches the user before ``finish()`` has waited for every
    read and its digest check (``damaged`` then names the storages whose blob failed). A storage
    bound for a GPU waits for its own read before the copy.
    """

    def __init__(self, store: SnapshotStore, manifest: Manifest, concurrency: int,
                 progress: Callable[[Progress], None] | None, warnings: list[str],
                 priority: list[str]):
        self.store = store
        self.manifest = manifest
        self.progress = progress
        self.warnings = warnings
        self.damaged: dict[str, str] = {}  # storage key -> reason
        self.not_fitted: dict[str, str] = {}  # storage key -> the device it did not fit on
        self.priority = priority
        self._placement: dict[str, str] | None = None  # storage key -> device, planned once
        self.bytes_read = 0
        self._lock = threading.Lock()
        self._buffers = {k: _allocate(ref.kind, ref.nbytes) for k, ref in manifest.storages.items()}
        self._untyped: dict[str, Any] = {}
        self._spans: dict[str, DeviceAllocation] = {}  # key -> device memory of its CUDA arrays
        self._made: dict[str, list[Any]] = {}  # key -> the CUDA arrays made over it
        self._warned_no_engine = False
        self._total = sum(s.nbytes for s in manifest.storages.values())
        self._start = time.monotonic()
        # Equal content is stored once, so one blob entry may hold several distinct storages.
        by_blob: dict[str, dict[int, list[str]]] = {}
        for key, ref in manifest.storages.items():
            by_blob.setdefault(ref.blob, {}).setdefault(ref.entry, []).append(key)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="gkeresume-read")
        self._futures: dict[str, Future] = {}
        for digest, entries in sorted(by_blob.items(), key=lambda kv: -manifest.blobs[kv[0]]):
            future = self._pool.submit(self._read_blob, digest, entries)
            for keys in entries.values():
                for key in keys:
                    self._futures[key] = future

    def finish(self) -> None:
        """Wait for every read (and digest check); after it, ``damaged`` is complete."""
        self._pool.shutdown(wait=True, cancel_futures=False)

    def abort(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def read_graph_blob(self) -> bytearray:
        """The graph pickle (the blob's single entry), read once into its own buffer."""
        entries: list[bytearray] = []

        def destination(entry: int, nbytes: int) -> memoryview:
            entries.append(bytearray(nbytes))
            return memoryview(entries[-1])

        with self.store.open_blob(self.manifest.graph_blob) as (f, size):
            read_verified(f, self.manifest.graph_blob, size, destination)
        return entries[0]

    def _read_blob(self, digest: str, entries: dict[int, list[str]]) -> None:
        """Read one blob into its storages' buffers; a failure marks all its keys damaged."""
        def destination(entry: int, nbytes: int) -> memoryview | None:
            keys = entries.get(entry)
            return host_view(_address(self._buffers[keys[0]]), nbytes) if keys else None

        try:
            with self.store.open_blob(digest) as (f, size):
                read_verified(f, digest, size, destination)
        except (GkeResumeError, OSError) as exc:
            for keys in entries.values():
                for key in keys:
                    self.damaged[key] = f"blob {digest[:12]} unreadable: {exc}"
            return
        nbytes = 0
        for first, *others in entries.values():
            size = self.manifest.storages[first].nbytes
            for key in others:  # equal bytes, but a distinct storage: its own copy
                host_view(_address(self._buffers[key]), size)[:] = \
                    host_view(_address(self._buffers[first]), size)
            nbytes += size * (1 + len(others))
        with self._lock:
            self.bytes_read += nbytes
            done = self.bytes_read
        if self.progress is not None:
            self.progress(Progress("reading", done, self._total, time.monotonic() - self._start))

    def _buffer(self, key: str, *, wait: bool = False) -> Any:
        if key not in self._buffers:
            raise InvalidInputError(f"graph names storage {key} that the manifest lacks")
        if wait:
            self._futures[key].result()
        return self._buffers[key]

    def device_for(self, key: str) -> str:
        """Where storage ``key`` goes here: the GPU it maps to (``plan_device_mapping``), or the
        CPU when the object that owns it does not fit in that GPU's free memory
        (``plan_placement``: objects in ``priority`` order, all of an object's storages or none)."""
        if self._placement is None:
            self._placement = self._plan_placement()
        return self._placement.get(key, "cpu")

    def _plan_placement(self) -> dict[str, str]:
        storages = self.manifest.storages
        mapping = plan_device_mapping(sorted({s.device for s in storages.values()}), _gpu_count())
        self.warnings.extend(mapping.warnings)
        mapped = {key: (mapping.get(s.device, "cpu"), s.nbytes) for key, s in storages.items()}
        gpus = {device for device, _ in mapped.values() if cuda_index(device) is not None}
        if not gpus:
            return {key: device for key, (device, _) in mapped.items()}
        owned: dict[str, list[str]] = {}
        for key, ref in storages.items():
            owned.setdefault(ref.owner or key, []).append(key)
        rank = {name: i for i, name in enumerate(self.priority)}
        objects = sorted(owned.items(), key=lambda item: rank.get(item[0], len(rank)))
        placement = plan_placement(objects, mapped, {d: _usable_bytes(d) for d in gpus})
        self.warnings.extend(placement.warnings)
        return placement.devices

    def torch_storage(self, key: str) -> Any:
        """The untyped storage for ``key``, on its (remapped) device, one object per key."""
        if key not in self._untyped:
            device = self.device_for(key)
            host = self._buffer(key, wait=device != "cpu").untyped_storage()
            self._untyped[key] = host if device == "cpu" else self._to_device(key, host, device)
        return self._untyped[key]

    def _to_device(self, key: str, host: Any, device: str) -> Any:
        """Copy to the GPU (through the CUDA engine when there is one); when it does not fit,
        keep it on the CPU and remember it, so the objects using it are reported."""
        import torch

        try:
            target = torch.UntypedStorage(host.nbytes(), device=device)
        except torch.OutOfMemoryError:
            self.not_fitted[key] = device
            return host
        engine = get_engine()
        if engine is None:
            target.copy_(host)
        else:
            engine.host_to_device(host_view(host.data_ptr(), host.nbytes()), target.data_ptr(),
                                  cuda_index(device))
        return target

    def cuda_array(self, key: str, record: dict[str, Any]) -> Any:
        """A ``__cuda_array_interface__`` array for ``record`` over the bytes of ``key``: on its
        (remapped) GPU, through the CUDA engine, or as a NumPy array on the CPU when there is no
        GPU or it does not fit. Arrays sharing ``key`` share the restored memory."""
        info = CudaArrayInfo.from_dict(record)
        ref = self.manifest.storages[key]
        if info.nbytes != ref.nbytes:
            raise InvalidInputError(f"CUDA array record does not match storage {key}")
        device = self.device_for(key)
        engine = get_engine()
        if device != "cpu" and engine is not None and key not in self.not_fitted:
            span = self._spans.get(key)
            if span is None:
                host = self._buffer(key, wait=True)
                try:
                    span = engine.allocate(info.nbytes, cuda_index(device))
                except CudaOutOfMemoryError:
                    self.not_fitted[key] = device
                else:
                    engine.host_to_device(host, span.ptr, span.device_index)
                    self._spans[key] = span
            if span is not None:
                array = cuda_array_on_device(info, span)
                self._made.setdefault(key, []).append(array)
                return array
        elif device != "cpu" and not self._warned_no_engine:
            self._warned_no_engine = True
            self.warnings.append(
                f"CUDA arrays come back on the CPU as NumPy arrays: {cuda_status()[1]}"
            )
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


def _allocate(kind: str, nbytes: int) -> Any:
    """A host buffer for one storage: a torch uint8 tensor, or a numpy uint8 array."""
    if kind == "torch":
        import torch

        return torch.empty(nbytes, dtype=torch.uint8)
    import numpy

    return numpy.empty(nbytes, dtype=numpy.uint8)


def _gpu_count() -> int:
    """GPUs usable here: the CUDA engine's, else torch's, else 0."""
    engine = get_engine()
    if engine is not None:
        return engine.device_count
    torch = sys.modules.get("torch")  # not imported: no torch storage is being restored
    return torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0


def _usable_bytes(device: str) -> int:
    """Free memory of ``device`` a restore may fill: all but a reserve of 5% of the GPU (at
    most 1 GiB) left for the next cell's workspaces."""
    index = cuda_index(device)
    engine = get_engine()
    if engine is not None:
        free, total = engine.memory_info(index)
    else:
        import torch

        free, total = torch.cuda.mem_get_info(index)
    return max(0, free - min(total // 20, GPU_RESERVE_MAX))


def _address(buffer: Any) -> int:
    """Host address of a torch uint8 tensor or numpy array buffer."""
    return buffer.data_ptr() if hasattr(buffer, "data_ptr") else buffer.ctypes.data


#: Not walked into: plain values, and what leads out of the user's data into the whole process
#: (modules, classes, functions, the CUDA engine behind restored device memory).
_WALK_LEAVES = (str, bytes, int, float, type(None), types.ModuleType, type, types.FunctionType,
                types.BuiltinFunctionType, DeviceAllocation)


def _reaches(value: object, storages: set[int], objects: set[int]) -> bool:
    """Whether ``value`` reaches one of ``objects`` (by id) or a tensor/array whose storage is in
    ``storages`` (untyped storage handles, buffer and CUDA array ids). A graph too large to walk counts as
    reaching: better reported as not restored than restored with damaged bytes."""
    torch = sys.modules.get("torch")
    numpy = sys.modules.get("numpy")
    seen: set[int] = set()
    stack = [value]
    while stack and len(seen) < MAX_WALK:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if id(obj) in objects or id(obj) in storages:
            return True
        if torch is not None and isinstance(obj, torch.Tensor):
            try:
                if obj.untyped_storage()._cdata in storages:
                    return True
            except RuntimeError:  # sparse and other storage-less layouts
                stack.extend(gc.get_referents(obj))
            continue
        if numpy is not None and isinstance(obj, numpy.ndarray):
            base = obj
            while isinstance(base, numpy.ndarray) and base.base is not None:
                base = base.base
            if id(base) in storages:
                return True
            continue
        if isinstance(obj, _WALK_LEAVES):
            continue
        stack.extend(gc.get_referents(obj))
    return bool(stack)


def take_resume(
    namespace: dict[str, Any],
    store: SnapshotStore,
    key: SigningKey,
    *,
    reference: str | None = "latest",
    only: list[str] | None = None,
    trust: bool = False,
    progress: Callable[[Progress], None] | None = None,
    continuing_cell: bool = False,
    shell: Any = None,
    lease_wait: float | None = None,
) -> ResumeResult:
    """Restore a snapshot into ``namespace``; see the module docstring for the order.

    One restore of a snapshot runs at a time, across kernels, tabs and pods: the others wait for
    its ``RestoreLease`` up to ``lease_wait`` seconds (``GKERESUME_LEASE_WAIT``, default 600),
    then get ``LeaseHeldError`` naming the holder."""
    started = time.monotonic()
    snapshot_id = resolve(store, reference, key)
    if lease_wait is None:
        lease_wait = float(os.environ.get("GKERESUME_LEASE_WAIT", DEFAULT_LEASE_WAIT))
    with RestoreLease(store, snapshot_id.lower()).hold(wait=lease_wait):
        return _restore(namespace, store, key, snapshot_id, only=only, trust=trust,
                        progress=progress, continuing_cell=continuing_cell, shell=shell,
                        started=started)


def _restore(
    namespace: dict[str, Any], store: SnapshotStore, key: SigningKey, snapshot_id: str, *,
    only: list[str] | None, trust: bool, progress: Callable[[Progress], None] | None,
    continuing_cell: bool, shell: Any, started: float,
) -> ResumeResult:
    manifest = load_manifest(store, snapshot_id, key, trust_unsigned=trust)
    verdict = check_compatible(manifest, environment_fingerprint())
    if verdict.level == "incompatible":
        raise GkeResumeError(f"snapshot {snapshot_id} cannot load here: {'; '.join(verdict.reasons)}")
    if only:
        unknown = [n for n in only if n not in manifest.saved_names]
        if unknown:
            raise InvalidInputError(
                f"not in snapshot {snapshot_id}: {', '.join(unknown)} "
                f"(it has: {', '.join(manifest.saved_names)})"
            )
    result = ResumeResult(snapshot_id, verdict=verdict.to_dict())
    loader = StorageLoader(store, manifest, store.concurrency, progress, result.warnings,
                           priority=list(dict.fromkeys([*(only or []), *manifest.records])))
    try:
        graph = loader.read_graph_blob()
        with rebuild.loading(loader):
            values, failures, placeholders = read_graph(graph, manifest.graph_ends)
    except BaseException:
        loader.abort()
        raise
    loader.finish()
    result.bytes_read = loader.bytes_read
    loaded = dict(zip(manifest.records, values, strict=True))
    reasons = {manifest.records[i]: why for i, why in failures.items()}

    damaged = loader.storage_identities(set(loader.damaged))
    lost = {id(p) for p in placeholders}
    if damaged or lost:
        why = "; ".join(sorted(set(loader.damaged.values()))) or "a record it uses failed"
        for name in manifest.saved_names:
            if name not in reasons and _reaches(loaded[name], damaged, lost):
                reasons[name] = f"uses what could not be restored: {why}"
    not_fitted = loader.storage_identities(set(loader.not_fitted))
    if not_fitted:
        for name in manifest.saved_names:
            if name not in reasons and _reaches(loaded[name], not_fitted, set()):
                result.warnings.append(
                    f"{name}: did not fit on {', '.join(sorted(set(loader.not_fitted.values())))}"
                    ": restored on the CPU"
                )
    wanted = only or manifest.saved_names
    restored = {n: loaded[n] for n in wanted if n not in reasons}
    for obj in manifest.objects:
        if obj.status == "skipped":
            result.not_restored.append(Skipped(obj.name, obj.type, obj.reason or "not captured"))
        elif obj.name in reasons and obj.name in wanted:
            result.not_restored.append(Skipped(obj.name, obj.type, reasons[obj.name]))

    namespace.update(restored)
    result.restored = list(restored)
    if only is None:
        state = loaded.get(SESSION_RECORD)
        if isinstance(state, dict):
            session_state.restore(state, result.warnings)
            _continue_numbering(shell, manifest, state, continuing_cell)
        else:
            result.warnings.append(f"session state not restored: {reasons.get(SESSION_RECORD)}")
    result.seconds = time.monotonic() - started
    if progress is not None:
        progress(Progress("done", loader.bytes_read, loader.bytes_read, result.seconds))
    for hook in loaded.get(HOOKS_RECORD) or []:
        try:
            hook(result)
        except Exception as exc:  # a user hook must not undo a successful restore
            result.warnings.append(f"on_resume hook {getattr(hook, '__name__', hook)} failed: {exc}")
    return result


def _continue_numbering(shell: Any, manifest: Manifest, state: dict, continuing_cell: bool) -> None:
    """Make the next cell's number follow the checkpointed session's, with its input history."""
    if shell is None:
        return
    count = int(state.get("execution_count") or manifest.execution_count)
    history = manifest.history
    manager = shell.history_manager
    if history:
        # A new history session: line numbers restart at the checkpoint's, without clashing
        # with the lines this kernel already logged.
        manager.reset(new_session=True)
        padded = (list(history) + [""] * (count + 1))[: count + 1]
        manager.input_hist_parsed[:] = padded
        manager.input_hist_raw[:] = padded
    # A magic runs inside a counted cell that adds 1 when it ends; a silent call does not.
    shell.execution_count = count if continuing_cell else count + 1
