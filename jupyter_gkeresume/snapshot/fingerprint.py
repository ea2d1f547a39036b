"""The environment fingerprint stored in each manifest and compared on restore.

Imports nothing heavy: package versions come from installed metadata, GPU facts from cuda-python's
driver API when it is installed and a driver answers. Without a driver cuda-python raises from
``cuInit`` (a RuntimeError); that, like any missing piece, means "no GPU here".
"""

from __future__ import annotations

import importlib
import os
import platform
import re
import shutil
import subprocess
import sys
from importlib import metadata
from typing import Any

from ..listings import ListingCache, path_directories
from .format import FORMAT_VERSION

KEY_PACKAGES = (
    "torch", "numpy", "cloudpickle", "safetensors", "jupyter-gkeresume", "ipykernel", "cupy",
    "transformers", "scikit-learn", "pandas",
)
ENV_FACTS = {
    "machine_type": ("GKERESUME_MACHINE_TYPE", "GCE_MACHINE_TYPE"),
    "image": ("JUPYTER_IMAGE_SPEC", "JUPYTER_IMAGE", "GKERESUME_IMAGE"),
    "node": ("GKERESUME_NODE_NAME", "NODE_NAME"),
}


def package_versions() -> dict[str, str]:
    """The installed versions of ``KEY_PACKAGES`` (read again only where a ``sys.path``
    directory changed: ``listings``)."""
    directories = path_directories(sys.path)
    return dict(_listings.get(directories, directories, _read_versions))


def _read_versions() -> dict[str, str]:
    out = {}
    for name in KEY_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


_listings = ListingCache()


def cuda_driver() -> Any | None:
    """cuda-python's initialised driver module, or None when no GPU can be used here (the
    reason: ``cuda_status()``). Never raises."""
    return cuda_status()[0]


def cuda_status() -> tuple[Any | None, str | None]:
    """``(driver module, None)`` when a GPU can be used here, else ``(None, why not)``.

    "No GPU" covers: cuda-python not installed; no driver library (``cuInit`` raises
    ``DynamicLibNotFoundError``, a RuntimeError); ``cuInit`` or ``cuDeviceGetCount`` failing or
    finding no device; and a driver older than the CUDA major version cuda-python was built for
    (cuda-python 13 needs a CUDA 13 driver, R580+: on an older one its driver functions are not
    found, so a CUDA 12 driver needs ``cuda-python<13``). Only the driver API is asked (no CUDA
    runtime is initialised). Never raises.
    """
    try:
        bindings = importlib.import_module("cuda.bindings")
        from cuda.bindings import driver
    except ImportError:
        return None, "cuda-python is not installed"
    try:
        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return None, f"cuInit failed: {getattr(err, 'name', err)}"
        err, count = driver.cuDeviceGetCount()
        if int(err) != 0 or count < 1:
            return None, "the CUDA driver sees no GPU"
        version = _checked(driver.cuDriverGetVersion())
    except (RuntimeError, OSError) as exc:
        return None, f"no usable CUDA driver ({exc})"
    built_for = int(str(getattr(bindings, "__version__", "0")).split(".")[0])
    if version // 1000 < built_for:
        return None, (
            f"cuda-python {bindings.__version__} needs a driver for CUDA {built_for}; this one "
            f"supports CUDA {_version_string(version)}: install cuda-python<{built_for}"
        )
    return driver, None


def cuda_facts() -> dict[str, Any]:
    """What the GPUs here are, or ``{}`` when there is none (see ``cuda_driver``).

    Keys: ``driver_version`` (CUDA API version the driver supports, "12.4"),
    ``driver_version_full`` (the driver release, "550.54.15", from /proc/driver/nvidia/version
    or nvidia-smi, when the system shows it), ``runtime_version`` (cuda-python's runtime),
    ``torch_cuda`` (the CUDA torch was built with, only if torch is already imported), ``count``,
    and ``gpus``: one ``{index, name, uuid, memory, compute_capability}`` per device.
    """
    driver = cuda_driver()
    if driver is None:
        return {}
    try:
        version = _checked(driver.cuDriverGetVersion())
        count = _checked(driver.cuDeviceGetCount())
        gpus = [_device_facts(driver, i) for i in range(count)]
    except (RuntimeError, OSError):
        return {}
    facts: dict[str, Any] = {
        "driver_version": _version_string(version), "count": count, "gpus": gpus
    }
    full = driver_release()
    if full:
        facts["driver_version_full"] = full
    runtime = _runtime_version()
    if runtime:
        facts["runtime_version"] = runtime
    torch = sys.modules.get("torch")
    torch_cuda = getattr(getattr(torch, "version", None), "cuda", None)
    if torch_cuda:
        facts["torch_cuda"] = str(torch_cuda)
    return facts


def _checked(result: tuple) -> Any:
    """The value of a cuda-python ``(error, value)`` result; RuntimeError on an error code."""
    err, value = result
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver call failed: {err!r}")
    return value


def _device_facts(driver: Any, index: int) -> dict[str, Any]:
    dev = _checked(driver.cuDeviceGet(index))
    name = _checked(driver.cuDeviceGetName(256, dev))
    attr = driver.CUdevice_attribute
    major = _checked(
        driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    )
    minor = _checked(
        driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    )
    return {
        "index": index,
        "name": bytes(name).split(b"\0", 1)[0].decode(errors="replace"),
        "uuid": format_gpu_uuid(bytes(_checked(driver.cuDeviceGetUuid(dev)).bytes)),
        "memory": int(_checked(driver.cuDeviceTotalMem(dev))),
        "compute_capability": f"{major}.{minor}",
    }


def _runtime_version() -> str | None:
    try:
        from cuda.bindings import runtime

        return _version_string(_checked(runtime.cudaRuntimeGetVersion()))
    except (ImportError, RuntimeError, OSError):
        return None


def _version_string(code: int) -> str:
    return f"{code // 1000}.{(code % 1000) // 10}"


def format_gpu_uuid(raw: bytes) -> str:
    """The 16 UUID bytes as nvidia-smi and CUDA_VISIBLE_DEVICES spell them: ``GPU-xxxxxxxx-...``."""
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


_RELEASE_RE = re.compile(r"\A[0-9]+(?:\.[0-9]+){1,3}\Z")
_PROC_RE = re.compile(r"Kernel Module\b.*?\s([0-9]+(?:\.[0-9]+){1,3})(?:\s|$)")


def parse_proc_driver_version(text: str) -> str | None:
    """The release in /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel
    Module  550.54.15  ..."), or None when the text does not have one."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            match = _PROC_RE.search(line)
            return match.group(1) if match else None
    return None


def parse_nvidia_smi_version(text: str) -> str | None:
    """The release printed by ``nvidia-smi --query-gpu=driver_version --format=csv,noheader``."""
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if _RELEASE_RE.match(line) else None
    return None


def driver_release(proc_path: str = "/proc/driver/nvidia/version") -> str | None:
    """The NVIDIA driver release from ``proc_path``, else from nvidia-smi, else None."""
    try:
        with open(proc_path, encoding="utf-8", errors="replace") as f:
            found = parse_proc_driver_version(f.read())
        if found:
            return found
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi_version(out.stdout) if out.returncode == 0 else None


def environment_fingerprint() -> dict[str, Any]:
    """What the manifest records about where it was made (see ``compat.check_compatible``)."""
    facts: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": sys.platform,
        "machine": platform.machine(),
        "packages": package_versions(),
        "cuda": cuda_facts(),
    }
    for key, names in ENV_FACTS.items():
        for name in names:
            if os.environ.get(name):
                facts[key] = os.environ[name]
                break
    return facts
