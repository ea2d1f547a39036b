"""Real IPython kernels (jupyter_client) sharing one local store, for the core tests.

``kernel_env`` is the environment every kernel of a test gets: its own store directory, workspace
and signing key. ``start_kernel()`` starts a fresh kernel process (the extension is auto-loaded by
the installed etc/ipython config) and returns a ``Kernel`` handle; ``start_kernel(env={...})``
adds variables for that kernel only (``JPY_SESSION_NAME``: which notebook it belongs to),
``kernel_name=`` another kernelspec (found through ``JUPYTER_PATH``), ``extra_arguments=`` the
kernel's command line (``--IPKernelApp.extensions=[]``: without the extension). Every
kernel is killed at the end of the test. ``throwaway_environment(where, kernels)``: a fresh venv
that sees this one's packages, with a kernelspec (a resume that installs writes there).
``resumed_in_process(namespace, tmp_path)``: no kernel, the namespace checkpointed and resumed
into a new one in this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from jupyter_client.manager import start_new_kernel

#: This test environment's site directory (editable installs included).
SITE = sysconfig.get_paths()["purelib"]


#: A cell defining ``mapped_file(address)``: the file mapped at an address in the kernel, from
#: /proc/self/maps ('' for anonymous memory, None where nothing is mapped).
MAPPED_FILE = (
    "def mapped_file(address):\n"
    "    for line in open('/proc/self/maps'):\n"
    "        span, *rest = line.split(maxsplit=5)\n"
    "        low, high = (int(x, 16) for x in span.split('-'))\n"
    "        if low <= address < high:\n"
    "            return rest[4].strip() if len(rest) > 4 else ''\n"
)


class KernelError(AssertionError):
    """A cell raised in the kernel; the message carries the kernel's error name and value."""


@dataclass
class Kernel:
    manager: object
    client: object

    def run(self, code: str, *, timeout: float = 300) -> str:
        """Execute ``code`` as a cell; return its stdout (and displayed text); raise on error."""
        out, errors = [], []

        def hook(msg):
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                out.append(content["data"].get("text/plain", ""))
            elif kind == "error":
                errors.append(f"{content['ename']}: {content['evalue']}")

        reply = self.client.execute_interactive(code, output_hook=hook, timeout=timeout)
        self.last_execution_count = reply["content"].get("execution_count")
        if reply["content"]["status"] != "ok":
            content = reply["content"]
            raise KernelError("; ".join(errors) or f"{content.get('ename')}: {content.get('evalue')}")
        return "".join(out)

    def run_json(self, code: str) -> object:
        """Run ``code`` whose last stdout line is JSON; return it parsed."""
        return json.loads(self.run(code).strip().splitlines()[-1])

    @property
    def pid(self) -> int:
        return self.manager.provisioner.process.pid

    def kill(self) -> None:
        """kill -9: no chance to clean up, as when a pod disappears."""
        os.kill(self.pid, signal.SIGKILL)
        self.manager.provisioner.process.wait()
        self.client.stop_channels()


@pytest.fixture
def kernel_env(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    env = dict(os.environ)
    env.update(
        GKERESUME_STORE=str(store),
        GKERESUME_WORKSPACE="test-ws",
        GKERESUME_SIGNING_KEY="test-key-" + "0" * 32,
        OMP_NUM_THREADS="1",
    )
    for inherited in ("GKERESUME_SERVER_URL", "JPY_SESSION_NAME", "GKERESUME_ROOT_DIR"):
        env.pop(inherited, None)
    return env


@pytest.fixture
def start_kernel(kernel_env):
    started: list[Kernel] = []

    def start(env: dict[str, str] | None = None, kernel_name: str = "python3",
              extra_arguments: list[str] | None = None) -> Kernel:
        manager, client = start_new_kernel(kernel_name=kernel_name, env={**kernel_env, **(env or {})},
                                           cwd=kernel_env.get("GKERESUME_TEST_CWD",
                                                              kernel_env["GKERESUME_STORE"]),
                                           extra_arguments=extra_arguments or [])
        kernel = Kernel(manager, client)
        started.append(kernel)
        return kernel

    yield start
    for kernel in started:
        try:
            kernel.client.stop_channels()
            kernel.manager.shutdown_kernel(now=True)
        except Exception:  # already killed by the test
            pass


def resumed_elsewhere(kernel: Kernel, start_kernel: Callable[..., Kernel]) -> tuple[Kernel, str]:
    """``%checkpoint`` in ``kernel``, kill -9 it (the pod is gone), ``%resume`` in a fresh
    kernel: that kernel and its resume report."""
    kernel.run("%checkpoint")
    kernel.kill()
    resumed = start_kernel()
    return resumed, resumed.run("%resume")


def throwaway_environment(where: Path, kernels: Path) -> Path:
    """A fresh venv that sees this test environment's packages, editable installs included (a
    .pth file adding its site directory: a venv made off another venv with
    --system-site-packages would see the base interpreter's instead), and a kernelspec that runs
    its interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "test-environment.pth").write_text(f"import site; site.addsitedir({SITE!r})\n")
    spec = kernels / where.name
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": where.name, "language": "python"}))
    return where


def resumed_in_process(namespace: dict, tmp_path: Path) -> dict:
    """``namespace`` checkpointed and resumed into a new one, which comes back ``exact`` (the
    workspace's own key: a signing key set in the environment here would be named as a change
    of the session's environment, once another test has taken the baseline). The new namespace
    holds ``__builtins__`` first, as a kernel's does (torch.compile reads it)."""
    import builtins

    import kernel_hooks

    root = str(tmp_path / "store")
    kernel_hooks.checkpoint(namespace=namespace, store=root, workspace="ws")
    restored: dict = {"__builtins__": builtins}
    report = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert report.verdict["level"] == "exact", report.verdict
    return restored
