"""Fixtures for the lab extension's tests: the repository root, node and jlpm on PATH.

The node dependencies (typescript, playwright-core, ...) are installed by `pip install -e .`
(the build hook runs `jlpm install`); a missing node_modules is a setup error, said plainly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def ui_env() -> dict[str, str]:
    """The environment for node/jlpm subprocesses: the venv's scripts first on PATH."""
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    if shutil.which("node", path=env["PATH"]) is None:
        pytest.fail("node is not installed: run scripts/test.sh (it installs Node.js)")
    if not (ROOT / "node_modules" / "typescript").is_dir():
        pytest.fail("node_modules is missing: `pip install -e .` runs `jlpm install`; run it")
    return env


@pytest.fixture(scope="session")
def ts_unit_build(ui_env) -> Path:
    """The extension's sources and TS unit tests compiled to CommonJS (tsconfig.test.json)."""
    run = subprocess.run(["jlpm", "tsc", "-p", "tsconfig.test.json"], cwd=ROOT, env=ui_env,
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        pytest.fail(f"TypeScript did not compile:\n{run.stdout}{run.stderr}")
    return ROOT / "build" / "ts-unit"
