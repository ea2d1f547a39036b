"""Issue 20.3 in a real browser: JupyterLab open in Debian's chromium (ui-tests/idle_tab.mjs,
driven by playwright-core) with a notebook and its kernel, and nobody touching it. The lab
polls kernels, sessions, contents and terminals every few seconds, and each poll moves
jupyter_server's ``last_activity``; none of it is a person's, so the workspace pauses at its
idle timeout all the same."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime

from fixtures_ui import ROOT
from test_ui_e2e import Lab, _get, chromium  # noqa: F401  (chromium: the fixture)

IDLE_TIMEOUT = 12  # seconds: longer than the lab's poll intervals (kernels, sessions, terminals 10 s;
# our status 5 s), so that each is seen while the workspace is idle
SAFETY = 240.0  # a safety net against hangs, not a speed check


def test_an_untouched_lab_tab_lets_the_workspace_pause(tmp_path, ui_env, lab_extension_dir,
                                                       chromium):  # noqa: F811
    lab = Lab(tmp_path, ui_env, lab_extension_dir)
    lab.command.append(f"--GkeResume.idle_timeout={IDLE_TIMEOUT}")
    lab.start()
    env = {**ui_env, "LAB_URL": lab.url, "LAB_TOKEN": lab.token, "NOTEBOOK": "e2e.ipynb",
           "CHROMIUM": chromium}
    errors = tmp_path / "browser.log"
    with errors.open("w") as log:  # the child keeps its own copy of the fd
        browser = subprocess.Popen(["node", "ui-tests/idle_tab.mjs"], cwd=ROOT, env=env,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                   text=True)
    try:
        assert browser.stdout.readline().strip() == "open", (
            f"{errors.read_text()[-3000:]}\n--- server log ---\n{lab.log()}")
        opened = time.time()
        deadline, polled = time.monotonic() + SAFETY, 0.0
        while True:
            # jupyter_server's own clock first, then ours: read while ours says ``running``
            # with no operation, it was moved by the lab alone (no pause had started)
            server = _get(f"{lab.url}api/status?token={lab.token}")[1]  # not itself tracked
            status = _get(lab.api("status"))[1]
            if status["state"] == "paused":
                break
            if status["state"] == "running" and status["operation"] is None:
                polled = datetime.fromisoformat(
                    server["last_activity"].replace("Z", "+00:00")).timestamp()
            assert browser.poll() is None, errors.read_text()[-3000:]
            assert time.monotonic() < deadline, f"still {status['state']}:\n{lab.log()}"
            time.sleep(1)
        assert status["paused"]["reason"] == "idle"
        assert browser.poll() is None  # the tab was open all along
        assert polled > opened, "the lab's polls never moved jupyter_server's last_activity"
    finally:
        browser.stdin.close()
        browser.wait(timeout=60)
        lab.stop()
