"""Issue 27.3 and 27.5 in a real browser (ui-tests/attach_resume.mjs): JupyterLab in Debian's
chromium with a.ipynb (an array of ``GKERESUME_UI_BIG_MB`` MiB, 16 by default; the issue's
flow uses 512) and b.ipynb open; Pause; reload; Resume in the dialog; a cell typed and run at
once in each notebook prints its restored variable, each notebook has one kernel, and the
resume says nothing about hash seeds.

``held``: the race made deterministic: the lab's session requests are held in the browser
(playwright-core ``page.route``) from the reload until a.ipynb's restore is mid-flight (held
inside its kernel by an object whose unpickling waits for a file), and the cell is run before
the restore may go on. Without one kernel per notebook the lab got a second, empty kernel:
``NameError: name 'x' is not defined``. ``natural``: nothing held, the flow as a user takes
it (the cell typed once the resume's message is dismissed). ``stay``: no reload, so the pause
stopped the kernels under the open tabs (as the idle pause and ``%pause`` do); after Resume each
tab is connected to its notebook's restored kernel (labextension/src/attach.ts), where its next
cell would otherwise ask "Select Kernel".
"""

from __future__ import annotations

import collections
import json
import os
import subprocess

import pytest
from fixtures_ui import ROOT
from test_ui_e2e import NOTEBOOK, Lab, chromium  # noqa: F401  (chromium: the fixture)

BIG_MB = int(os.environ.get("GKERESUME_UI_BIG_MB", "16"))


@pytest.mark.parametrize("mode", ["held", "natural", "stay"])
def test_after_reload_and_resume_each_tab_runs_in_its_restored_kernel(
        tmp_path, ui_env, lab_extension_dir, chromium, mode):  # noqa: F811
    lab = Lab(tmp_path, ui_env, lab_extension_dir)
    if mode == "held":
        # The tab connects while a.ipynb's restore is held, and jupyter_server's websocket
        # waits for a kernel_info reply, queued behind that restore, until kernel_info_timeout
        # (jupyter_server/services/kernels/connection/channels.py: then it connects anyway).
        # The restore goes on only after the cell is typed, so every run waited the default 60 s.
        lab.command.append("--MappingKernelManager.kernel_info_timeout=5")
    for name in ("a.ipynb", "b.ipynb"):
        (lab.root / name).write_text(json.dumps(NOTEBOOK))
    lab.start()
    try:
        env = {**ui_env, "LAB_URL": lab.url, "LAB_TOKEN": lab.token, "CHROMIUM": chromium,
               "MODE": mode, "BIG_MB": str(BIG_MB), "FLAG": str(tmp_path / "restore-may-go-on")}
        run = subprocess.run(["node", "ui-tests/attach_resume.mjs"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=540)
        lines = run.stdout.strip().splitlines()
        seen = json.loads(lines[-1]) if lines else {}
        assert run.returncode == 0 and "error" not in seen, (
            f"failed at {seen.get('steps', ['?'])[-1:]}: {seen.get('error')}\n"
            f"{run.stderr[-3000:]}\n--- server log ---\n{lab.log()}")
        assert seen["outputs"] == {"a.ipynb": "restored-a", "b.ipynb": "restored-b"}, seen
        if mode == "held":
            assert seen["held"] >= 1, seen  # the lab's request was there, held
        kernels = collections.defaultdict(set)
        for path, kid in seen["sessions"]:
            kernels[path].add(kid)
        assert {p: len(ids) for p, ids in kernels.items()} == {"a.ipynb": 1, "b.ipynb": 1}
        status = seen["status"]
        assert sorted(k["notebook"] for k in status["kernels"]) == ["a.ipynb", "b.ipynb"]
        assert {k["kernel_id"] for k in status["kernels"]} == set().union(*kernels.values())
        assert "hash seed" not in seen["resumeMessage"], seen["resumeMessage"]  # issue 27.5
    finally:
        lab.stop()
