"""``__cuda_array_interface__`` objects: describe, record, rebuild on the CPU or on a device.

The interface dict has the same shape as NumPy's ``__array_interface__``, so NumPy arrays wrapped
as "CUDA arrays" (host memory standing in for device memory) give real strides, offsets and
dtypes to check the span arithmetic against.
"""

from __future__ import annotations

import ctypes

import pytest
from fixtures_gpu import SimulatedDriver
from traitlets.config import Config

from jupyter_gkeresume.errors import InvalidInputError
from kernel_hooks.cuda_arrays import (
    CudaArray,
    CudaArrayInfo,
    cuda_array_on_cpu,
    cuda_array_on_device,
    describe_cuda_array,
    dtype_name,
)
from kernel_hooks.cuda_engine import CudaEngine

np = pytest.importorskip("numpy")


class FakeCudaArray:
    """Exposes a NumPy array through ``__cuda_array_interface__`` (v3)."""

    __module__ = "fakecuda.core"

    def __init__(self, array, **overrides):
        self.array = array
        face = dict(array.__array_interface__)
        self.__cuda_array_interface__ = {
            "shape": face["shape"], "typestr": face["typestr"], "data": face["data"],
            "strides": face["strides"], "version": 3, **overrides,
        }


def span_bytes(info: CudaArrayInfo) -> bytes:
    return ctypes.string_at(info.span_ptr, info.nbytes) if info.nbytes else b""


BASE = np.arange(4 * 6 * 5, dtype=np.float16).reshape(4, 6, 5)
CASES = {
    "contiguous": BASE,
    "sliced": BASE[1:3, ::2, 1:4],
    "transposed": BASE.transpose(2, 0, 1),
    "negative": BASE[::-1, :, ::-2],
    "broadcast": np.broadcast_to(np.arange(5, dtype=np.int32), (3, 5)),
    "empty": BASE[:, :0],
    "scalar": np.array(3.5, dtype=np.float64),
    "bool": np.array([True, False, True]),
    "complex": np.arange(6, dtype=np.complex64)[::3],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_describe_and_rebuild_on_cpu_gives_the_same_array(name):
    array = CASES[name]
    info = describe_cuda_array(FakeCudaArray(array))
    assert info.module == "fakecuda" and info.dtype == array.dtype.name
    assert info.shape == array.shape
    assert (info.strides is None) == (array.flags.c_contiguous or array.size == 0)
    rebuilt = cuda_array_on_cpu(CudaArrayInfo.from_dict(info.to_dict()), bytearray(span_bytes(info)))
    assert rebuilt.dtype == array.dtype and rebuilt.shape == array.shape
    np.testing.assert_array_equal(rebuilt, array)
    assert rebuilt.flags.writeable == array.flags.writeable


def test_span_of_a_strided_view_is_only_the_bytes_it_reaches():
    info = describe_cuda_array(FakeCudaArray(BASE[1:3, ::2, 1:4]))
    assert info.offset == 0
    # shape (2, 3, 3), strides (60, 20, 2): last element at 1*60 + 2*20 + 2*2, plus its 2 bytes
    assert (info.shape, info.strides, info.nbytes) == ((2, 3, 3), (60, 20, 2), 106)
    negative = describe_cuda_array(FakeCudaArray(BASE[::-1]))
    assert negative.offset == 3 * 60 and negative.nbytes == BASE.nbytes


def test_readonly_arrays_stay_readonly():
    array = BASE.copy()
    array.flags.writeable = False
    info = describe_cuda_array(FakeCudaArray(array))
    assert info.readonly
    assert not cuda_array_on_cpu(info, bytearray(span_bytes(info))).flags.writeable


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mask": object()}, "masked"),
        ({"typestr": "<V8"}, "unsupported CUDA array typestr"),
        ({"typestr": "O"}, "unsupported CUDA array typestr"),
        ({"data": "nowhere"}, "malformed"),
        ({"shape": (2, "x")}, "malformed"),
        ({"strides": (2,)}, "1 strides for 3 dimensions"),
        ({"shape": (4, -6, 5)}, "negative dimension"),
    ],
)
def test_bad_interfaces_are_clear_errors(overrides, message):
    with pytest.raises(InvalidInputError, match=message):
        describe_cuda_array(FakeCudaArray(BASE, **overrides))


def test_an_object_without_the_interface_is_refused():
    with pytest.raises(InvalidInputError, match="no __cuda_array_interface__"):
        describe_cuda_array(object())


def test_records_that_do_not_add_up_are_refused():
    record = describe_cuda_array(FakeCudaArray(BASE[::2])).to_dict()
    assert CudaArrayInfo.from_dict(record).span_ptr == 0
    with pytest.raises(InvalidInputError, match="does not add up"):
        CudaArrayInfo.from_dict({**record, "nbytes": record["nbytes"] * 2})
    with pytest.raises(InvalidInputError, match="malformed"):
        CudaArrayInfo.from_dict({**record, "shape": "big"})
    with pytest.raises(InvalidInputError, match="malformed"):
        CudaArrayInfo.from_dict({"typestr": "<f2"})
    with pytest.raises(InvalidInputError, match="expected"):
        cuda_array_on_cpu(CudaArrayInfo.from_dict(record), bytearray(3))


def test_dtype_names():
    assert [dtype_name(t) for t in ("<f2", "<f4", ">i8", "|u1", "|b1", "<c16")] == [
        "float16", "float32", "int64", "uint8", "bool", "complex128"
    ]


def test_rebuild_on_a_device_copies_through_the_engine():
    driver = SimulatedDriver(progress="lazy")
    engine = CudaEngine(driver, config=Config({"CudaEngine": {"chunk_bytes": 4096}}))
    source = BASE[::-1, 1:5]
    info = CudaArrayInfo.from_dict(describe_cuda_array(FakeCudaArray(source)).to_dict())
    span_memory = engine.allocate(info.nbytes, 0)
    array = cuda_array_on_device(info, span_memory)
    ptr = span_memory.ptr
    assert isinstance(array, CudaArray)  # neither CuPy nor Numba is the owner here
    with pytest.raises(InvalidInputError, match="cannot sit on"):
        cuda_array_on_device(info, engine.allocate(info.nbytes + 2, 0))
    span = span_bytes(describe_cuda_array(FakeCudaArray(source)))
    engine.host_to_device(span, ptr, 0)
    face = array.__cuda_array_interface__
    assert face["data"] == (ptr + info.offset, False)
    assert face["shape"] == source.shape and face["typestr"] == "<f2"
    assert face["strides"] == source.strides
    back = b"".join(bytes(c) for c in engine.device_to_host_chunks(ptr, info.nbytes, 0))
    np.testing.assert_array_equal(cuda_array_on_cpu(info, bytearray(back)), source)
    assert "device=0" in repr(array)
