"""CUDA arrays through pause and resume in real kernels, over the real cuda-python bindings.

The kernels load the fake NVIDIA driver (``tests/fakecuda/fake_libcuda.c``, see
``fixtures_fakecuda``): host memory stands in for device memory, but everything above the driver
is what runs on a GPU machine: cuda-python's bindings, the engine's pinned ring, the capture and
the restore. The notebook's array type is its own class exposing ``__cuda_array_interface__``
(what CuPy and Numba arrays expose), so no GPU library is needed.
"""

from __future__ import annotations

import os

from fixtures_fakecuda import FakeCuda

FAKE_KEYS = ("LD_LIBRARY_PATH", "FAKECUDA_DEVICES", "FAKECUDA_MEMORY", "FAKECUDA_DRIVER_VERSION")

NOTEBOOK = """
import json, numpy as np, kernel_hooks
from kernel_hooks.cuda_engine import get_engine

class DeviceArray:
    def __init__(self, owner, shape, typestr, strides=None):
        self.owner, self.shape, self.typestr, self.strides = owner, shape, typestr, strides

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.typestr, "strides": self.strides,
                "data": (self.owner.ptr, False), "version": 3}

def upload(host, device):
    memory = get_engine().allocate(host.nbytes, device)
    get_engine().host_to_device(host, memory.ptr, device)
    return memory

grid = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)
weights = DeviceArray(upload(grid, 1), (1024, 1024), "<f4")
every_other = DeviceArray(weights.owner, (1024, 512), "<f4", (4096, 8))
bias = {"values": DeviceArray(upload(grid[0, :7].copy(), 0), (7,), "<f4"), "step": 3}
del grid
"""

READ_BACK = """
import json, numpy as np
from kernel_hooks.cuda_arrays import CudaArray, cuda_array_on_cpu
from kernel_hooks.cuda_engine import get_engine

def on_host(x):
    if isinstance(x, np.ndarray):
        return x
    a = x.allocation
    span = b"".join(bytes(c) for c in get_engine().device_to_host_chunks(a.ptr, a.nbytes,
                                                                        a.device_index))
    return cuda_array_on_cpu(x.info, bytearray(span))

arrays = {"weights": weights, "every_other": every_other, "bias": bias["values"]}
print(json.dumps({
    name: {"type": type(x).__name__,
           "device": x.allocation.device_index if isinstance(x, CudaArray) else "cpu",
           "sum": float(on_host(x).astype(np.float64).sum()),
           "shape": list(on_host(x).shape)}
    for name, x in arrays.items()
} | {"step": bias["step"]}))
"""

EXPECTED_SUMS = {
    "weights": float(sum(range(1 << 20))),
    "every_other": float(sum(range(0, 1 << 20, 2))),
    "bias": float(sum(range(7))),
}


def use_fake_driver(kernel_env: dict[str, str], fakecuda: FakeCuda, devices: int) -> None:
    fake = fakecuda.env(devices=devices)
    kernel_env.update({k: fake[k] for k in FAKE_KEYS})


def test_cuda_arrays_survive_a_killed_kernel_on_the_same_gpus(start_kernel, kernel_env, fakecuda):
    use_fake_driver(kernel_env, fakecuda, devices=2)
    first = start_kernel()
    first.run(NOTEBOOK)
    report = first.run_json(
        "r = kernel_hooks.checkpoint('fake-gpu'); print(json.dumps(r.to_dict()))"
    )
    assert report["skipped"] == [], report
    first.kill()

    second = start_kernel()
    resumed = second.run_json(
        "import json, kernel_hooks; r = kernel_hooks.resume('fake-gpu'); "
        "print(json.dumps(r.to_dict()))"
    )
    assert resumed["not_restored"] == [] and resumed["warnings"] == [], resumed
    got = second.run_json(READ_BACK)
    assert got["step"] == 3
    for name, total in EXPECTED_SUMS.items():
        assert got[name]["type"] == "CudaArray" and got[name]["sum"] == total, got
    assert [got[n]["device"] for n in ("weights", "every_other", "bias")] == [1, 1, 0]
    assert got["every_other"]["shape"] == [1024, 512]


def test_cuda_arrays_come_back_as_numpy_on_a_pod_without_gpu(start_kernel, kernel_env, fakecuda):
    plain = dict(kernel_env)
    use_fake_driver(kernel_env, fakecuda, devices=2)
    first = start_kernel()
    first.run(NOTEBOOK + "\nkernel_hooks.checkpoint('fake-gpu')")
    first.kill()

    kernel_env.clear()
    kernel_env.update(plain)  # the next pod has no driver at all
    second = start_kernel()
    resumed = second.run_json(
        "import json, kernel_hooks; r = kernel_hooks.resume('fake-gpu'); "
        "print(json.dumps(r.to_dict()))"
    )
    assert resumed["not_restored"] == [], resumed
    assert any("no GPU here" in w for w in resumed["warnings"]), resumed
    got = second.run_json(READ_BACK)
    for name, total in EXPECTED_SUMS.items():
        assert got[name] == {**got[name], "type": "ndarray", "device": "cpu", "sum": total}


def test_fewer_gpus_map_by_order(start_kernel, kernel_env, fakecuda):
    use_fake_driver(kernel_env, fakecuda, devices=2)
    first = start_kernel()
    first.run(NOTEBOOK + "\nkernel_hooks.checkpoint('fake-gpu')")
    first.kill()
    use_fake_driver(kernel_env, fakecuda, devices=1)
    second = start_kernel()
    resumed = second.run_json(
        "import json, kernel_hooks; r = kernel_hooks.resume('fake-gpu'); "
        "print(json.dumps(r.to_dict()))"
    )
    assert any("cuda:1 does not exist here" in w for w in resumed["warnings"]), resumed
    got = second.run_json(READ_BACK)
    assert {got[n]["device"] for n in EXPECTED_SUMS} == {0}
    assert all(got[n]["sum"] == total for n, total in EXPECTED_SUMS.items())


# A ``sitecustomize`` that makes the GCS stack unimportable, as on an install without the ``gcs``
# extra (the GPU machine's Python, a plain `pip install jupyter-gkeresume`).
WITHOUT_GCS_STACK = """
import sys

class _NotInstalled:
    BLOCKED = {"aiohttp", "gcsfs", "crc32c", "google"}

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
"""


def test_a_local_store_needs_no_gcs_stack(start_kernel, kernel_env, fakecuda, tmp_path):
    """Found by the GPU check's dry run (scripts/gpu_check.sh against the fake driver, issue 32):
    on a Python without the ``gcs`` extra, every checkpoint on a local store died importing
    crc32c, then aiohttp (snapshot/transfer.py imported the GCS client at module level)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(WITHOUT_GCS_STACK)
    kernel_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), kernel_env.get("PYTHONPATH")) if p)
    use_fake_driver(kernel_env, fakecuda, devices=2)
    first = start_kernel()
    assert first.run_json("import json, sys; print(json.dumps('crc32c' in sys.modules))") is False
    first.run(NOTEBOOK)
    report = first.run_json("r = kernel_hooks.checkpoint('no-gcs'); print(json.dumps(r.to_dict()))")
    assert report["skipped"] == [], report
    first.kill()
    second = start_kernel()
    resumed = second.run_json(
        "import json, kernel_hooks; r = kernel_hooks.resume('no-gcs'); print(json.dumps(r.to_dict()))"
    )
    assert resumed["not_restored"] == [], resumed
    got = second.run_json(READ_BACK)
    gcs_modules = "print(json.dumps(sorted({'aiohttp', 'gcsfs', 'crc32c'} & set(sys.modules))))"
    assert second.run_json("import sys\n" + gcs_modules) == []
    assert {name: got[name]["sum"] for name in EXPECTED_SUMS} == EXPECTED_SUMS
