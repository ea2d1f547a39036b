"""The CUDA part of the environment fingerprint: probing, parsing the driver release, facts."""

from __future__ import annotations

import os
import stat
import sys
import types

import pytest
from fixtures_gpu import SimulatedDriver

from jupyter_gkeresume.snapshot import fingerprint
from jupyter_gkeresume.snapshot.fingerprint import (
    cuda_driver,
    cuda_facts,
    cuda_status,
    driver_release,
    environment_fingerprint,
    format_gpu_uuid,
    parse_nvidia_smi_version,
    parse_proc_driver_version,
)

PROC_PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    "GCC version:  gcc version 10.2.1 20210110 (Debian 10.2.1-6)\n"
)
PROC_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
PROC_ARM = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.86.10  Release Build\n"


@pytest.mark.parametrize(
    ("text", "release"),
    [
        (PROC_PROPRIETARY, "535.104.05"),
        (PROC_OPEN, "550.54.15"),
        (PROC_ARM, "570.86.10"),
        ("GCC version: 12\n", None),
        ("NVRM version: something else entirely\n", None),
        ("", None),
    ],
)
def test_parse_proc_driver_version(text, release):
    assert parse_proc_driver_version(text) == release


@pytest.mark.parametrize(
    ("text", "release"),
    [("550.54.15\n550.54.15\n", "550.54.15"), ("\n  535.104.05 \n", "535.104.05"),
     ("NVIDIA-SMI has failed because it couldn't communicate with the driver\n", None), ("", None)],
)
def test_parse_nvidia_smi_version(text, release):
    assert parse_nvidia_smi_version(text) == release


def test_driver_release_reads_proc_first(tmp_path):
    proc = tmp_path / "version"
    proc.write_text(PROC_OPEN)
    assert driver_release(str(proc)) == "550.54.15"


def _fake_nvidia_smi(directory, output: str, code: int = 0) -> None:
    script = directory / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '{output}'\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_driver_release_falls_back_to_nvidia_smi(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path, "550.90.07\\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert driver_release(str(tmp_path / "missing")) == "550.90.07"


def test_driver_release_is_none_when_nothing_tells(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path, "No devices were found\\n", code=6)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert driver_release(str(tmp_path / "missing")) is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert driver_release(str(tmp_path / "missing")) is None


def test_format_gpu_uuid_like_nvidia_smi():
    raw = bytes.fromhex("6b1e5a2c0d3f4e8a9b7c112233445566")
    assert format_gpu_uuid(raw) == "GPU-6b1e5a2c-0d3f-4e8a-9b7c-112233445566"


def test_no_driver_here_is_no_gpu_and_no_error():
    """This machine has cuda-python but no driver: cuInit raises DynamicLibNotFoundError."""
    assert cuda_driver() is None
    assert cuda_facts() == {}
    assert environment_fingerprint()["cuda"] == {}


def test_no_cuda_python_is_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    assert cuda_status() == (None, "cuda-python is not installed") and cuda_facts() == {}


def _bindings(driver, version: str = "12.9.1") -> types.ModuleType:
    """A stand-in ``cuda.bindings`` package of ``version`` over ``driver``."""
    module = types.ModuleType("cuda.bindings")
    module.__version__ = version
    module.driver = driver
    module.runtime = types.SimpleNamespace(cudaRuntimeGetVersion=lambda: (0, 12060))
    return module


def test_a_driver_older_than_cuda_python_is_no_gpu_with_the_fix_named(monkeypatch):
    # The simulated driver supports CUDA 12.4; cuda-python 13 finds none of its functions there.
    monkeypatch.setitem(sys.modules, "cuda.bindings", _bindings(SimulatedDriver(), "13.4.4"))
    driver, reason = cuda_status()
    assert driver is None
    assert reason == (
        "cuda-python 13.4.4 needs a driver for CUDA 13; this one supports CUDA 12.4: "
        "install cuda-python<13"
    )
    monkeypatch.setitem(sys.modules, "cuda.bindings", _bindings(SimulatedDriver(), "12.9.1"))
    assert cuda_status()[1] is None and cuda_driver() is not None


def test_a_driver_without_devices_is_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", _bindings(SimulatedDriver(gpus=0)))
    assert cuda_driver() is None


def test_cuda_facts_are_complete(monkeypatch):
    driver = SimulatedDriver(gpus=2, memory=141 << 30)
    monkeypatch.setitem(sys.modules, "cuda.bindings", _bindings(driver))
    monkeypatch.setattr(fingerprint, "driver_release", lambda: "550.54.15")
    torch = types.SimpleNamespace(version=types.SimpleNamespace(cuda="12.4"))
    monkeypatch.setitem(sys.modules, "torch", torch)
    facts = cuda_facts()
    assert facts == {
        "driver_version": "12.4",
        "driver_version_full": "550.54.15",
        "runtime_version": "12.6",
        "torch_cuda": "12.4",
        "count": 2,
        "gpus": [
            {"index": i, "name": f"Simulated GPU {i}", "memory": 141 << 30,
             "compute_capability": "9.0",
             "uuid": format_gpu_uuid(bytes(range(16 * i, 16 * i + 16)))}
            for i in range(2)
        ],
    }


def test_cuda_facts_failing_half_way_is_no_gpu(monkeypatch):
    driver = SimulatedDriver()
    driver.cuDeviceTotalMem = lambda dev: (999, None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", _bindings(driver))
    assert cuda_facts() == {}
