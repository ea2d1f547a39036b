"""``%pause`` in a kernel hands over to the real server that runs it; without one it checkpoints."""

from __future__ import annotations

import json
import subprocess
import sys


def test_pause_magic_asks_the_server_to_pause_and_release(server_process, tmp_path):
    store = tmp_path / "store"
    server = server_process("srv", {"GkeResume": {
        "store_url": str(store), "workspace_id": "pause-ws", "release_backend": "none"}})
    kid = server.new_session("night.ipynb")
    server.run_cell(kid, "x = 41 + 1")
    out = server.run_cell(kid, "%pause -n bedtime")
    assert "pause requested" in out
    status = server.wait_for(lambda s: s["state"] in ("paused", "failed"), "paused")
    assert status["state"] == "paused", status
    record = json.loads((store / "pause-ws" / "records" / "paused.json").read_text())
    [entry] = record["kernels"]
    manifest = json.loads((store / "pause-ws" / "snapshots" / f"{entry['snapshot_id']}.json")
                          .read_text())
    assert manifest["name"] == "bedtime" and "x" in [o["name"] for o in manifest["objects"]]

    code, _ = server.call("POST", "gkeresume/api/resume", {})
    assert code == 202
    status = server.wait_for(lambda s: s["state"] in ("ready", "failed"), "resumed")
    assert status["state"] == "ready", status
    [kernel] = status["kernels"]
    assert server.run_cell(kernel["kernel_id"], "print(x)") == "42\n"


def test_pause_magic_without_a_server_checkpoints_and_says_so(start_kernel):
    k = start_kernel()
    k.run("y = 7")
    out = k.run("%pause")
    assert "checkpoint" in out and "no release backend is configured" in out
    out = k.run("import kernel_hooks\ntry:\n    kernel_hooks.pause()\n"
                "except Exception as exc:\n    print(type(exc).__name__, exc)")
    assert out.startswith("ServerUnreachableError no jupyter-gkeresume server extension"), out


EXIT_PROBE = """
import atexit, gc, sys
atexit.register(lambda: print("at the end: frozen", gc.get_freeze_count() > 0, flush=True))
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_cell("class Cycle:\\n    def __del__(self): print('user object finalized', flush=True)\\n"
               "c = Cycle(); c.me = c")
shell.extension_manager.load_extension("kernel_hooks")
shell.extension_manager.reload_extension("kernel_hooks")
"""


def test_a_kernel_exit_freezes_the_heap_only_after_ipython_cleared_the_user_namespace():
    # the interpreter's last cycle collections then skip the libraries' objects (the kernel
    # stops sooner: a pause waits for it), while the user's objects, cycles included, were
    # already finalized by IPython's exit operations; a reloaded extension wraps it once
    proc = subprocess.run([sys.executable, "-c", EXIT_PROBE], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["user object finalized", "at the end: frozen True"]
    assert "Exception ignored" not in proc.stderr, proc.stderr  # how a failed atexit handler shows


def test_a_paused_kernel_flushed_the_users_open_files_first(server_process, tmp_path):
    # the kernel stops gracefully: a buffered file held in a cycle is written out before the
    # pause says paused
    server = server_process("srv", {"GkeResume": {
        "store_url": str(tmp_path / "store"), "workspace_id": "flush-ws",
        "release_backend": "none"}})
    kid = server.new_session("files.ipynb")
    out = tmp_path / "buffered.txt"
    server.run_cell(kid, f"class Box: pass\nbox = Box(); box.me = box\n"
                         f"box.f = open({str(out)!r}, 'w', buffering=1 << 20)\n"
                         "box.f.write('still buffered')")
    assert out.read_text() == ""
    code, _ = server.call("POST", "gkeresume/api/pause", {})
    assert code == 202
    status = server.wait_for(lambda s: s["state"] in ("paused", "failed"), "paused")
    assert status["state"] == "paused", status
    assert out.read_text() == "still buffered"
