"""The environment fingerprint stored in each manifest and compared on restore.

Imports nothing heavy: package versions come from installed metadata, GPU facts from cuda-python's
driver API when it is installed and a driver answers. Without a driver cuda-python raises from
``cuInit`` (a RuntimeError); that, like any missing piece, means "no GPU here".
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any

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
    out = {}
    for name in KEY_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def cuda_facts() -> dict[str, Any]:
    """Driver version and one entry per GPU, or ``{}`` when no driver or no cuda-python."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return {}
    try:
        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return {}
        err, version = driver.cuDriverGetVersion()
        err2, count = driver.cuDeviceGetCount()
        if int(err) or int(err2):
            return {}
        gpus = []
        for i in range(count):
            gpus.append(_device_facts(driver, i))
    except (RuntimeError, OSError):
        return {}
    return {"driver_version": _version_string(version), "gpus": gpus}


def _device_facts(driver: Any, index: int) -> dict[str, Any]:
    _, dev = driver.cuDeviceGet(index)
    _, name = driver.cuDeviceGetName(256, dev)
    _, mem = driver.cuDeviceTotalMem(dev)
    attr = driver.CUdevice_attribute
    _, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    _, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    _, uuid = driver.cuDeviceGetUuid(dev)
    return {
        "index": index,
        "name": name.split(b"\0", 1)[0].decode(errors="replace"),
        "memory": int(mem),
        "compute_capability": f"{major}.{minor}",
        "uuid": bytes(uuid.bytes).hex(),
    }


def _version_string(code: int) -> str:
    return f"{code // 1000}.{(code % 1000) // 10}"


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
