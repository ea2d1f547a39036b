"""A fake NVIDIA driver (``tests/fakecuda/fake_libcuda.c``) for running the REAL cuda-python
bindings on a machine without a GPU.

The bindings load the driver by its soname, ``libcuda.so.1``, through the dynamic loader, so the
fake must be on ``LD_LIBRARY_PATH`` when the process starts. The pytest process itself must keep
seeing "no GPU" (other tests rely on it), so code meant to meet the fake runs in a child Python:
``fakecuda.run(snippet)`` returns the JSON document the snippet prints; ``fakecuda.env()`` (and
the ``fakecuda_env`` fixture) is the environment for any other child, a Jupyter kernel say.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SOURCE = Path(__file__).parent / "fakecuda" / "fake_libcuda.c"
REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20


@dataclass(frozen=True)
class FakeCuda:
    """The compiled fake driver in ``lib_dir`` and how to start a process that loads it."""

    lib_dir: Path

    def env(self, devices: int = 2, memory: int = 64 * MiB, driver_version: int = 13040,
            name: str | None = None) -> dict[str, str]:
        """The full environment of a child process whose cuda-python finds the fake driver with
        ``devices`` GPUs of ``memory`` bytes, reporting CUDA ``driver_version`` (13040: 13.4)."""
        env = dict(os.environ)
        env.pop("FAKECUDA_NAME", None)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(self.lib_dir), env.get("LD_LIBRARY_PATH")) if p
        )
        env["FAKECUDA_DEVICES"] = str(devices)
        env["FAKECUDA_MEMORY"] = str(memory)
        env["FAKECUDA_DRIVER_VERSION"] = str(driver_version)
        if name is not None:
            env["FAKECUDA_NAME"] = name
        return env

    def run(self, code: str, **config: Any) -> Any:
        """Run ``code`` (dedented) in a fresh Python with the fake driver (``config``: the
        arguments of ``env``); return the JSON document it printed last on stdout. A child
        that fails, or prints no JSON, fails the test with its stderr."""
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=self.env(**config),
            capture_output=True, text=True, timeout=120, check=False,
        )
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            pytest.fail(
                f"fake-driver child exited {proc.returncode}\n--- stdout\n{proc.stdout}"
                f"\n--- stderr\n{proc.stderr}", pytrace=False,
            )
        return json.loads(lines[-1])


@pytest.fixture(scope="session")
def fakecuda(tmp_path_factory: pytest.TempPathFactory) -> FakeCuda:
    """The fake driver, compiled once per session (skips only where no C compiler exists)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc/gcc) to build the fake libcuda.so.1; install gcc")
    lib_dir = tmp_path_factory.mktemp("fakecuda")
    proc = subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-o", str(lib_dir / "libcuda.so.1"), str(SOURCE),
         "-lpthread"],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"cannot compile {SOURCE}:\n{proc.stderr}", pytrace=False)
    return FakeCuda(lib_dir)


@pytest.fixture
def fakecuda_env(fakecuda: FakeCuda) -> dict[str, str]:
    """The environment of a child process that sees two fake 64 MiB GPUs (driver CUDA 13.4)."""
    return fakecuda.env()
