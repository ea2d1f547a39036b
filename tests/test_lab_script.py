"""scripts/lab.sh: a second start with nothing changed skips the install (seconds, not the
21-32 s of pip), a change to what the install is built from redoes it, and the lab serves
notebooks/, which git ignores, never the checkout. Run on a copy of the files it reads, with
scripts/install.sh's ``install_python_env`` and .venv's jupyter replaced by recorders."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INPUTS = ["pyproject.toml", "package.json", "yarn.lock", "install.json", "jupyter-config",
          "labextension/src", "labextension/style", "labextension/schema"]
RECORDER = """#!/bin/sh
echo "$PWD $*" >> "$LAB_LOG"
"""


def make_checkout(root: Path) -> None:
    for name in INPUTS:
        source, target = ROOT / name, root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copyfile)(source, target)
    (root / "scripts").mkdir()
    shutil.copyfile(ROOT / "scripts" / "lab.sh", root / "scripts" / "lab.sh")
    (root / "scripts" / "install.sh").write_text(
        "install_python_env() {\n"
        '  echo "install $1" >> "$LAB_LOG"\n'
        "  mkdir -p .venv/bin\n"
        f"  printf '%s' '{RECORDER}' > .venv/bin/jupyter\n"
        "  cp .venv/bin/jupyter .venv/bin/jupyter-lab && chmod +x .venv/bin/jupyter*\n"
        "}\n")


def start(root: Path, log: Path) -> list[str]:
    done = subprocess.run(["bash", str(root / "scripts" / "lab.sh"), "--no-browser"],
                          env={"PATH": "/usr/bin:/bin", "LAB_LOG": str(log)},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return log.read_text().splitlines()


def test_second_start_skips_the_install_and_serves_an_ignored_folder(tmp_path):
    root, log = tmp_path / "checkout", tmp_path / "log"
    make_checkout(root)
    first = start(root, log)
    assert first[0] == "install lab" and len(first) == 2
    assert first[1].startswith(f"{root} lab --ServerApp.root_dir=notebooks")
    assert (root / "notebooks").is_dir()
    assert start(root, log)[2:] == [first[1]]  # nothing changed: no install
    (root / "labextension" / "src" / "index.ts").write_text("// edited\n")
    assert start(root, log)[3] == "install lab"  # the extension's sources changed
    with (root / "pyproject.toml").open("a") as f:
        f.write("\n# a new dependency\n")
    assert start(root, log)[5] == "install lab"
    assert start(root, log)[7:] == [first[1]]
    # in the real checkout, git ignores what the lab writes there
    ignored = subprocess.run(["git", "check-ignore", "-q", "notebooks/Untitled.ipynb"],
                             cwd=ROOT, check=False)
    assert ignored.returncode == 0
