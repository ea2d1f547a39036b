"""Capture side of out-of-pickle storages: ``StorageCollector.reduce``.

Like ``torch.save``, the graph pickler reuses torch's own tensor reduction and intercepts the
storages it produces: each distinct untyped storage (by its C handle) becomes one key ``s<N>``
whatever the number of tensors, views or dtypes that share it, so views and tied weights stay
shared after restore. Large plain numpy arrays leave the same way, keyed by their root buffer; a
numpy view of any size comes back as a view of its base, and memory numpy and torch share
(``torch.from_numpy``, ``Tensor.numpy()``) stays shared (``host_regions``). Objects of any
other library that expose ``__cuda_array_interface__`` (CuPy, Numba, ...) leave through the CUDA
engine, keyed by the span
of device bytes they reach: arrays over the same span share it again after restore, overlapping
but different spans come back as separate copies. The pickle holds calls to ``rebuild.storage`` /
``rebuild.array`` / ``rebuild.cuda_array`` in their place (a reducer, not ``persistent_id``,
which pickle would call for every int and string of the graph).

Without a usable CUDA engine, CuPy and Numba arrays pickle themselves (through a host copy); any
other CUDA array becomes an ``Uncaptured`` placeholder: its pickle would hold a dead pointer.

The collector keeps a reference to every storage it keys, so their addresses stay valid until the
blobs are written.
"""

from __future__ import annotations

import collections
import itertools
import sys
import types
from dataclasses import dataclass
from typing import Any

from . import rebuild
from .cuda_arrays import describe_cuda_array
from .cuda_engine import get_engine
from .host_regions import HostRegions
from .memory import host_view
from .placeholders import Uncaptured, type_name
from .weak_references import PROXIES

NUMPY_MIN_BYTES = 64 << 10
#: Libraries whose CUDA arrays pickle themselves (host copy) when there is no CUDA engine.
SELF_PICKLING_CUDA_ARRAYS = frozenset({"cupy", "numba"})


@dataclass
class CollectedStorage:
    """One storage leaving the pickle: its bytes will become one blob entry."""

    key: str
    kind: str  # "torch" | "numpy" | "cuda_array"
    dtype: str
    nbytes: int
    device: str
    owner: str  # the top-level variable that first reached it
    source: Any  # keeps the memory alive: UntypedStorage, root ndarray or the CUDA array
    address: int

    def host_bytes(self) -> memoryview:
        """The bytes of a host-resident storage, zero-copy."""
        return host_view(self.address, self.nbytes)


def torch_dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


class StorageCollector:
    """Assigns keys to storages met while pickling; ``owner`` is set by the pickler per record."""

    def __init__(self, numpy_min_bytes: int = NUMPY_MIN_BYTES):
        self.numpy_min_bytes = numpy_min_bytes
        self.items: list[CollectedStorage] = []
        self._keys: dict[tuple[str, object], str] = {}
        self.owner = ""
        torch = sys.modules.get("torch")
        numpy = sys.modules.get("numpy")
        self._typed = torch.storage.TypedStorage if torch else None
        self._untyped = torch.UntypedStorage if torch else None
        self._tensor = torch.Tensor if torch else ()
        self._ndarray = numpy.ndarray if numpy else None
        self._memmap = numpy.memmap if numpy else None
        self._regions = HostRegions()

    def reduce(self, obj: object) -> tuple | None:
        """A reduce tuple for a storage or large array (its bytes are collected), else None."""
        t = type(obj)
        if self._typed is not None and (t is self._typed or isinstance(obj, self._typed)):
            return self._torch_reduce(obj._untyped_storage, torch_dtype_name(obj.dtype))
        if self._untyped is not None and t is self._untyped:
            return self._torch_reduce(obj, None)
        if t is self._ndarray and not obj.dtype.hasobject:
            if isinstance(obj.base, self._ndarray):
                view = self._view_reduce(obj)
                if view is not None:
                    return view
            else:
                shared = self._array_in_storage(obj)
                if shared is not None:
                    return shared
            if obj.nbytes >= self.numpy_min_bytes:
                return self._numpy_reduce(obj)
            if not isinstance(obj.base, self._ndarray):  # a small root: pickled by NumPy
                self._regions.add(obj.__array_interface__["data"][0], obj.nbytes, "numpy", obj)
        if (self._ndarray is not None and t is not self._ndarray and issubclass(t, self._ndarray)
                and not issubclass(t, self._memmap)):  # live_objects reopens a memmap
            return self._subclass_reduce(obj)
        if getattr(t, "__cuda_array_interface__", None) is not None and not isinstance(
            obj, self._tensor  # torch's CUDA tensors leave through their storages above
        ):
            return self._cuda_array_reduce(obj)
        return None

    def _subclass_reduce(self, array: Any) -> tuple | None:
        """An array of a subclass with attributes: its class's reduction with the attributes
        beside its state, set after it (``rebuild.array_subclass_state``). ``ndarray``'s own
        keeps the type and data, not the ``__dict__`` (NumPy's ``InfoArray`` lost its
        ``info``); one of the class's own may keep less than its ``__dict__`` too
        (``MaskedArray``'s keeps data, mask and fill value, not ``harden_mask()``'s flag or
        ``_optinfo``). None (pickled as its class says) where the class pickles through its own
        ``__reduce_ex__``, or its reduction carries no state to set (``np.ma.masked``, a
        singleton)."""
        kind = type(array)
        attributes = getattr(array, "__dict__", None)
        if not attributes or kind.__reduce_ex__ is not self._ndarray.__reduce_ex__:
            return None
        reduced = array.__reduce__()
        if (not isinstance(reduced, tuple) or len(reduced) != 3 or reduced[2] is None
                or not hasattr(array, "__setstate__")):
            return None
        make, args, state = reduced
        return make, args, (state, dict(attributes)), None, None, rebuild.array_subclass_state

    def _torch_reduce(self, storage: Any, dtype: str | None) -> tuple | None:
        """A typed (``dtype``) or untyped storage: over the NumPy array whose memory it is
        (``host_regions``), else by its key."""
        if ("torch", storage._cdata) not in self._keys and storage.device.type == "cpu":
            inside = self._regions.within(storage.data_ptr(), storage.nbytes(), "torch")
            if inside is not None:
                offset, array = inside
                return rebuild.storage_in_array, (array, offset, storage.nbytes(), dtype)
        key = self._torch_key(storage, dtype or "uint8")
        if key is None:
            return None
        if storage.device.type == "cpu" and storage.is_shared():  # share_memory_(): again
            return rebuild.in_shared_memory, (key, dtype)
        return (rebuild.storage, (key, dtype)) if dtype else (rebuild.untyped, (key,))

    def _torch_key(self, storage: Any, dtype: str) -> str | None:
        """The key of an untyped storage; the first dtype seen labels its blob entry."""
        device = str(storage.device)
        if device == "meta":
            return None
        key = self._keys.get(("torch", storage._cdata))
        if key is None:
            key = self._add("torch", dtype, storage.nbytes(), device, storage, storage.data_ptr(),
                            storage._cdata)
            if device == "cpu":
                self._regions.add(storage.data_ptr(), storage.nbytes(), "torch", storage)
        return key

    def _array_in_storage(self, root: Any) -> tuple | None:
        """A NumPy array over the memory of a torch storage met before (``t.numpy()``), as an
        array over that storage, else None."""
        inside = self._regions.within(root.__array_interface__["data"][0], root.nbytes, "numpy")
        if inside is None:
            return None
        offset, storage = inside
        return (rebuild.array_in_storage, (storage, root.dtype, root.shape, root.strides, offset,
                                           root.flags.writeable))

    def _view_reduce(self, view: Any) -> tuple | None:
        """A NumPy view as a view of its base (the array owning the memory), which travels as
        itself (a blob, or inline when small): NumPy pickles a view as a copy of its data, so
        writing through a restored view no longer reached its base."""
        root = view.base
        while isinstance(root.base, self._ndarray):
            root = root.base
        if type(root) is not self._ndarray or root.dtype.hasobject:
            return None
        offset = view.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        return (rebuild.array_view, (root, view.dtype, view.shape, view.strides, offset,
                                     view.flags.writeable))

    def _numpy_reduce(self, array: Any) -> tuple | None:
        root = array
        while isinstance(root.base, self._ndarray):
            root = root.base
        if not (root.flags.c_contiguous or root.flags.f_contiguous):
            return None
        root_address = root.__array_interface__["data"][0]
        key = self._keys.get(("numpy", root_address))
        if key is None:
            dtype = root.dtype.name if root.dtype.isnative and not root.dtype.names else "uint8"
            key = self._add("numpy", dtype, root.nbytes, "cpu", root, root_address, root_address)
            self._regions.add(root_address, root.nbytes, "numpy", root)
        offset = array.__array_interface__["data"][0] - root_address
        return (rebuild.array, (key, array.dtype, array.shape, array.strides, offset,
                                array.flags.writeable))

    def _cuda_array_reduce(self, array: Any) -> tuple | None:
        info = describe_cuda_array(array)
        engine = get_engine()
        if engine is None:
            if info.module in SELF_PICKLING_CUDA_ARRAYS:
                return None
            return (Uncaptured, (type_name(array), "GPU memory cannot be read here without "
                                 "cuda-python and a working CUDA driver"))
        # An empty array has no device bytes to ask the driver about: it comes back on cuda:0.
        device = f"cuda:{engine.pointer_device(info.span_ptr) if info.nbytes else 0}"
        handle = (info.span_ptr, info.nbytes, device)
        key = self._keys.get(("cuda_array", handle))
        if key is None:
            key = self._add("cuda_array", info.dtype, info.nbytes, device, array, info.span_ptr,
                            handle)
        return (rebuild.cuda_array, (key, info.to_dict()))

    def _add(self, kind: str, dtype: str, nbytes: int, device: str, source: Any,
             address: int, handle: object) -> str:
        key = f"s{len(self.items)}"
        self._keys[(kind, handle)] = key
        self.items.append(
            CollectedStorage(key, kind, dtype, nbytes, device, self.owner, source, address)
        )
        return key


#: How many objects ``seems_to_hold_storages`` looks at, at most, per value.
LOOK_AT_MOST = 256


def seems_to_hold_storages(value: object, numpy_min_bytes: int = NUMPY_MIN_BYTES) -> bool:
    """A cheap guess whether pickling ``value`` meets storages: a tensor, a large array or a
    CUDA array among the first ``LOOK_AT_MOST`` objects reached breadth-first (container items,
    instance attributes). Only an order is decided by it (``capture``: names without storages
    are pickled first, so that a resume unpickles them while the blobs are still being read);
    a wrong guess costs that overlap, nothing else."""
    torch = sys.modules.get("torch")
    numpy = sys.modules.get("numpy")
    leaves = tuple(t for t in (torch and torch.Tensor, torch and torch.UntypedStorage) if t)
    queue, looked = collections.deque([value]), 0
    while queue and looked < LOOK_AT_MOST:
        obj = queue.popleft()
        looked += 1
        if type(obj) in PROXIES:  # its referent is looked at where it is held; a dead one raises
            continue
        if leaves and isinstance(obj, leaves):
            return True
        if numpy is not None and isinstance(obj, numpy.ndarray):
            if obj.nbytes >= numpy_min_bytes and not obj.dtype.hasobject:
                return True
            continue
        if getattr(type(obj), "__cuda_array_interface__", None) is not None:
            return True
        if isinstance(obj, (str, bytes, bytearray, int, float, complex, type(None), type,
                            types.ModuleType)):  # modules pickle by reference
            continue
        if isinstance(obj, dict):
            queue.extend(itertools.islice(obj.values(), LOOK_AT_MOST))
        elif isinstance(obj, (list, tuple, set, frozenset)):
            queue.extend(itertools.islice(obj, LOOK_AT_MOST))
        elif isinstance(getattr(obj, "__dict__", None), dict):
            queue.extend(itertools.islice(vars(obj).values(), LOOK_AT_MOST))
    return False
