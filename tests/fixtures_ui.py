"""Fixtures for the lab extension's tests: the repository root, node and jlpm on PATH, and this
checkout's own build of the lab extension for the browser test.

The node dependencies (typescript, playwright-core, ...) are installed by `pip install -e .`
(the build hook runs `jlpm install`); a missing node_modules or a build older than the
TypeScript sources is a setup error, said plainly.
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


LAB_BUILD = ROOT / "jupyter_gkeresume" / "labextension"


@pytest.fixture(scope="session")
def lab_extension_dir(tmp_path_factory) -> Path:
    """A JUPYTER_PATH entry whose ``labextensions/jupyter-gkeresume`` is this checkout's build
    (first on JUPYTER_PATH, so JupyterLab serves it rather than another installed copy)."""
    built = LAB_BUILD / "package.json"
    sources = [*(ROOT / "labextension" / "src").glob("*.ts"), *(ROOT / "labextension" / "style").glob("*")]
    if not built.is_file():
        pytest.fail(f"{LAB_BUILD} is missing: run `jlpm build` (or `pip install -e .`)")
    if max(p.stat().st_mtime for p in sources) > built.stat().st_mtime:
        pytest.fail("the lab extension build is older than labextension/: run `jlpm build`")
    path = tmp_path_factory.mktemp("jupyter-path")
    (path / "labextensions").mkdir()
    (path / "labextensions" / "jupyter-gkeresume").symlink_to(LAB_BUILD, target_is_directory=True)
    return path
