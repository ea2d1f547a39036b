"""A Python environment shaped like the docker-stacks image that deploy/Dockerfile's final stage
builds on, for running that stage's ``RUN`` lines without a docker engine.

What the base image gives a ``RUN`` (jupyter/docker-stacks images/docker-stacks-foundation/
Dockerfile, commit 82093869): ``CONDA_DIR`` (``/opt/conda``) holding the Python environment
with ``pip`` and the notebook stack's console scripts first on ``PATH``, ``NB_USER``, ``NB_UID``,
``NB_GID``, ``HOME=/home/${NB_USER}``, and ``/usr/local/bin/fix-permissions`` (copied, unchanged,
to tests/data/docker-stacks/fix-permissions). Here:

- ``CONDA_DIR`` is a fresh venv of this interpreter whose base packages (pip included) are
  this test environment's, minus this package (a ``.pth`` naming a folder of links to every entry of this
  environment's site-packages except ``jupyter_gkeresume`` and ``kernel_hooks``), and whose
  ``bin/`` has a launcher for each of their console scripts (``jupyter``, ``jupyter-server``,
  ``jupyter-labextension`` ...): so ``pip install`` of the wheel installs into it, and
  ``jupyter ... list`` reads its ``etc/`` and ``share/``, as in the image;
- pip never reaches an index nor this machine's pip config (``PIP_NO_INDEX``,
  ``PIP_CONFIG_FILE``): every requirement but the wheel is present.

Call order: ``make_image_env(tmp)`` once, then ``run_in_image(shell, command, env)`` per line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

STACKS = Path(__file__).parent / "data" / "docker-stacks"
OURS = ("jupyter_gkeresume", "kernel_hooks", "__editable__", "_jupyter_gkeresume")


def make_image_env(root: Path) -> dict[str, str]:
    """Build ``root/opt/conda`` and ``root/home/jovyan``; the environment a ``RUN`` sees."""
    conda, home = root / "opt" / "conda", root / "home" / "jovyan"
    home.mkdir(parents=True)
    # pip comes with the base packages below (its launcher too): no ensurepip run
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(conda)], check=True,
                   timeout=300)
    here = Path(sysconfig.get_paths()["purelib"])
    base = root / "base-site-packages"
    base.mkdir()
    for entry in here.iterdir():
        if not entry.name.startswith(OURS) and not entry.name.endswith(".pth"):
            (base / entry.name).symlink_to(entry)
    [site] = (conda / "lib").glob("python3*/site-packages")
    (site / "_docker_stacks_base.pth").write_text(f"{base}\n")
    python = conda / "bin" / "python"
    for dist in metadata.distributions(path=[str(here)]):
        for ep in dist.entry_points.select(group="console_scripts"):
            script = conda / "bin" / ep.name
            if script.exists() or dist.metadata["Name"].replace("-", "_").startswith(OURS):
                continue
            module, _, attr = ep.value.partition(":")
            call = f"{module}.{attr}" if attr else module
            script.write_text(f"#!{python}\nimport sys\nimport {module}\nsys.exit({call}())\n")
            script.chmod(0o755)
    return {
        "PATH": f"{conda / 'bin'}:{STACKS}:/usr/bin:/bin", "CONDA_DIR": str(conda),
        "NB_USER": "jovyan", "NB_UID": str(os.getuid()), "NB_GID": str(os.getgid()),
        "HOME": str(home), "SHELL": "/bin/bash", "LANG": "C.UTF-8",
        "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "JUPYTER_PLATFORM_DIRS": "0",
    }


def run_in_image(shell: list[str], command: str, env: dict[str, str],
                 timeout: float = 300) -> subprocess.CompletedProcess:
    """``command`` as docker runs a shell-form ``RUN``: ``[*SHELL, command]``."""
    return subprocess.run([*shell, command], env=env, cwd=env["HOME"], capture_output=True,
                          text=True, timeout=timeout, check=False)
