"""What cannot come back is named at pause time (issue 21 item 4): a checkpoint of a real kernel
lists its child processes (a ``nohup ... &`` one included, re-parented away from the kernel),
the threads the session started and the files it holds open for writing outside the home volume,
in the result the server and the lab show and in ``%checkpoint``'s output; a kernel with none of
them reports nothing.

jupyter_client starts each kernel in its own session (``start_new_session=True`` in
jupyter_client/launcher.py ``launch_kernel``), which is how the re-parented process is found.
"""

from __future__ import annotations

import os
import re
import signal


def test_processes_threads_and_open_files_are_named_at_checkpoint(tmp_path, start_kernel):
    home = tmp_path / "home"
    home.mkdir()
    outside = tmp_path / "outside.log"
    kernel = start_kernel(env={"GKERESUME_ROOT_DIR": str(home)})
    quiet = kernel.run_json("import json, kernel_hooks\n"
                            "print(json.dumps(kernel_hooks.checkpoint('quiet').to_dict()['skipped']))")
    assert quiet == []

    kernel.run(f"""
import os, subprocess, threading
child = subprocess.Popen(["sleep", "300"]).pid
os.system("nohup sleep 301 > /dev/null 2>&1 &")
trainer = threading.Event()
threading.Thread(target=trainer.wait, name="trainer", daemon=True).start()
log = open({str(outside)!r}, "w")
kept = open({str(home / "kept.log")!r}, "w")
""")
    pids = []
    try:
        result = kernel.run_json("r = kernel_hooks.checkpoint('busy')\n"
                                 "print(json.dumps(r.to_dict()['skipped']))")
        named = {s["name"]: (s["type"], s["reason"]) for s in result}
        pids = [int(n.split()[1]) for n in named if n.startswith("process ")]
        commands = sorted(reason.split(":")[0] for kind, reason in named.values()
                          if kind == "child process")
        assert commands == ["sleep 300", "sleep 301"]
        assert named["thread trainer"][0] == "thread"
        assert named[f"file {outside}"][0] == "open file"
        assert not any(str(home) in n for n in named)  # the home volume comes back by itself

        printed = kernel.run("%checkpoint")
        assert re.search(r"not saved: process \d+ \[child process\]: sleep 301", printed)
        assert "not saved: thread trainer [thread]" in printed
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
