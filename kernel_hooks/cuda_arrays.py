"""GPU arrays of any library through ``__cuda_array_interface__`` (CuPy, Numba, ...), without torch.

Capture: ``info = describe_cuda_array(obj)`` checks the interface and says which device bytes to
copy (``info.span_ptr``, ``info.nbytes``: every byte the array can reach, strided or not), and
``info.to_dict()`` is the plain record to keep in the pickle next to the storage key.

Restore: ``CudaArrayInfo.from_dict(record)`` validates the record, then either
``cuda_array_on_device(info, span)`` makes the array over device memory the caller allocated
(``engine.allocate``) and filled (``engine.host_to_device``), or
``cuda_array_on_cpu(info, host_bytes)`` rebuilds it as a NumPy array (no GPU here).
"""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jupyter_gkeresume.errors import InvalidInputError

if TYPE_CHECKING:
    from .cuda_engine import DeviceAllocation

TYPESTR_RE = re.compile(r"\A[<>|=]([biufc])([0-9]{1,2})\Z")
_KINDS = {"b": "bool", "i": "int", "u": "uint", "f": "float", "c": "complex"}


def dtype_name(typestr: str) -> str:
    """NumPy-style name of an interface ``typestr`` ("<f2" -> "float16", "|b1" -> "bool")."""
    match = TYPESTR_RE.match(typestr)
    if match is None:
        raise InvalidInputError(f"unsupported CUDA array typestr {typestr!r}")
    kind, size = match.group(1), int(match.group(2))
    return "bool" if kind == "b" else f"{_KINDS[kind]}{8 * size}"


@dataclass(frozen=True)
class CudaArrayInfo:
    """What a CUDA array is: its span of device bytes and how elements sit in it.

    ``offset`` is where element 0 sits in the span (non-zero for negative strides);
    ``strides`` is None for C-contiguous arrays. ``span_ptr`` is the device address of the span
    at capture (0 in a record read back: it is not saved).
    """

    typestr: str
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    offset: int
    nbytes: int
    readonly: bool
    module: str
    span_ptr: int = 0

    @property
    def dtype(self) -> str:
        return dtype_name(self.typestr)

    @property
    def itemsize(self) -> int:
        return int(self.typestr[2:])

    def to_dict(self) -> dict[str, Any]:
        """The record kept in the snapshot (no pointer)."""
        return {
            "typestr": self.typestr, "shape": list(self.shape),
            "strides": None if self.strides is None else list(self.strides),
            "offset": self.offset, "nbytes": self.nbytes, "readonly": self.readonly,
            "module": self.module,
        }

    @classmethod
    def from_dict(cls, data: Any) -> CudaArrayInfo:
        """Rebuild and re-check a ``to_dict`` record; ``InvalidInputError`` if inconsistent."""
        try:
            info = cls(
                typestr=str(data["typestr"]), shape=_ints(data["shape"]),
                strides=None if data["strides"] is None else _ints(data["strides"]),
                offset=int(data["offset"]), nbytes=int(data["nbytes"]),
                readonly=bool(data["readonly"]), module=str(data["module"]),
            )
        except (TypeError, KeyError, ValueError):
            raise InvalidInputError(f"malformed CUDA array record: {data!r}") from None
        dtype_name(info.typestr)
        offset, nbytes = _span(info.shape, info.strides, info.itemsize)
        if (offset, nbytes) != (info.offset, info.nbytes):
            raise InvalidInputError(f"CUDA array record does not add up: {data!r}")
        return info


def describe_cuda_array(obj: Any) -> CudaArrayInfo:
    """Check ``obj.__cuda_array_interface__`` (versions 0-3) and describe its device bytes."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    kind = type(obj).__name__
    if not isinstance(cai, dict):
        raise InvalidInputError(f"{kind} has no __cuda_array_interface__ dict")
    try:
        shape = _ints(cai["shape"])
        typestr = cai["typestr"]
        ptr, readonly = cai["data"]
        strides = cai.get("strides")
        strides = None if strides is None else _ints(strides)
    except (TypeError, KeyError, ValueError):
        raise InvalidInputError(f"{kind}: malformed __cuda_array_interface__") from None
    if cai.get("mask") is not None:
        raise InvalidInputError(f"{kind}: masked CUDA arrays are not supported")
    if not isinstance(typestr, str) or not isinstance(ptr, int):
        raise InvalidInputError(f"{kind}: malformed __cuda_array_interface__")
    dtype_name(typestr)
    itemsize = int(typestr[2:])
    if strides is not None:
        if len(strides) != len(shape):
            raise InvalidInputError(f"{kind}: {len(strides)} strides for {len(shape)} dimensions")
        if strides == _c_strides(shape, itemsize):
            strides = None
    if any(n < 0 for n in shape):
        raise InvalidInputError(f"{kind}: negative dimension in shape {shape}")
    offset, nbytes = _span(shape, strides, itemsize)
    return CudaArrayInfo(
        typestr=typestr, shape=shape, strides=strides, offset=offset, nbytes=nbytes,
        readonly=bool(readonly), module=type(obj).__module__.split(".")[0],
        span_ptr=ptr - offset if nbytes else 0,
    )


class CudaArray:
    """A device array owned by Python that any ``__cuda_array_interface__`` consumer can use
    (``cupy.asarray(a)``, ``numba.cuda.as_cuda_array(a)``, ``torch.as_tensor(a, device="cuda")``).
    Keeps its allocation alive."""

    def __init__(self, info: CudaArrayInfo, allocation: DeviceAllocation):
        self.info = info
        self.allocation = allocation

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.info.shape, "typestr": self.info.typestr,
            "data": (self.allocation.ptr + self.info.offset, self.info.readonly),
            "strides": self.info.strides, "version": 3, "stream": None,
        }

    def __repr__(self) -> str:
        return (
            f"CudaArray(shape={self.info.shape}, dtype={self.info.dtype}, "
            f"device={self.allocation.device_index})"
        )


def cuda_array_on_device(info: CudaArrayInfo, span: DeviceAllocation) -> Any:
    """A new array like ``info`` over ``span``, device memory holding its ``info.nbytes`` span
    bytes (allocated with ``engine.allocate``; several arrays may share one span). CuPy arrays
    come back as CuPy arrays and Numba arrays as Numba arrays when those libraries import here,
    anything else as a ``CudaArray``; each keeps ``span`` alive."""
    if span.nbytes != info.nbytes:
        raise InvalidInputError(f"a {info.nbytes}-byte CUDA array cannot sit on {span.nbytes} bytes")
    if info.module == "cupy" and _importable("cupy"):
        import cupy

        memory = cupy.cuda.UnownedMemory(span.ptr, max(1, span.nbytes), span, span.device_index)
        return cupy.ndarray(
            info.shape, dtype=cupy.dtype(info.typestr),
            memptr=cupy.cuda.MemoryPointer(memory, info.offset), strides=info.strides,
        )
    array: Any = CudaArray(info, span)
    if info.module == "numba" and _importable("numba"):
        from numba import cuda

        array = cuda.as_cuda_array(array)
    return array


def cuda_array_on_cpu(info: CudaArrayInfo, host: Any) -> Any:
    """A NumPy array like ``info`` over ``host`` (its ``info.nbytes`` span bytes, not copied)."""
    import numpy as np

    if len(memoryview(host).cast("B")) != info.nbytes:
        raise InvalidInputError(f"expected {info.nbytes} bytes for a {info.dtype} array")
    array = np.ndarray(
        info.shape, dtype=np.dtype(info.typestr), buffer=host, offset=info.offset,
        strides=info.strides,
    )
    if info.readonly:
        array.flags.writeable = False
    return array


def _span(
    shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int
) -> tuple[int, int]:
    """``(offset of element 0, bytes spanned)`` of an array; ``(0, 0)`` when it is empty."""
    if math.prod(shape) == 0:
        return 0, 0
    if strides is None:
        return 0, math.prod(shape) * itemsize
    low = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True))
    high = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True))
    return -low, high - low + itemsize


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def _ints(values: Any) -> tuple[int, ...]:
    if not isinstance(values, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    ):
        raise ValueError(values)
    return tuple(values)


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
