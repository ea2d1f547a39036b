"""Issue 20.3 in a real browser: JupyterLab open in Debian's chromium (ui-tests/idle_tab.mjs,
driven by playwright-core) with a notebook and its kernel, and nobody touching it. The lab
polls kernels, sessions, contents and terminals every few seconds, and each poll moves
jupyter_server's ``last_activity``; none of it is a person's, so the workspace pauses at its
idle timeout all the same."""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import datetime

from fixtures_ui import ROOT
from test_ui_e2e import ARTIFACTS, Lab, _get, chromium  # noqa: F401  (chromium: the fixture)

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


def test_a_person_using_the_tab_keeps_the_workspace_and_its_end_is_told(tmp_path, ui_env,
                                                                      lab_extension_dir,
                                                                      chromium):  # noqa: F811
    """Issue 27.9: someone moving the pointer, scrolling and pressing keys in the lab (real
    input through Chromium, trusted events) for 2.5 idle timeouts keeps the workspace
    ``running`` all along (before, it paused after one timeout: input was not activity); once
    the input stops, polls alone let it pause. Issue 27.6: the tab then says that nobody was
    active, since when and after how long, and what was saved (screenshot idle-pause.png); the
    "Workspace resumed" message of the resume before, left open, is gone: no message of an
    earlier operation stays over a later one."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    lab = Lab(tmp_path, ui_env, lab_extension_dir)
    lab.command.append(f"--GkeResume.idle_timeout={IDLE_TIMEOUT}")
    lab.start()
    env = {**ui_env, "LAB_URL": lab.url, "LAB_TOKEN": lab.token, "NOTEBOOK": "e2e.ipynb",
           "CHROMIUM": chromium, "ARTIFACTS": str(ARTIFACTS),
           "INPUT_SECONDS": str(int(2.5 * IDLE_TIMEOUT))}
    errors = tmp_path / "browser.log"
    with errors.open("w") as log:
        browser = subprocess.Popen(["node", "ui-tests/idle_input.mjs"], cwd=ROOT, env=env,
                                   stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = browser.stdout.readline().strip()
        assert line == "open", f"{line}\n{errors.read_text()[-3000:]}\n{lab.log()}"
        rounds = 0
        while (line := browser.stdout.readline().strip()).startswith("input"):
            rounds += 1
            status = _get(lab.api("status"))[1]
            assert status["state"] in ("running", "ready") and status["operation"] is None, (
                f"{status['state']} after {rounds} s of input:\n{lab.log()}")
        assert line == "stopped" and rounds == int(2.5 * IDLE_TIMEOUT), (line, errors.read_text())
        shown = json.loads(browser.stdout.readline() or "{}")
        assert browser.wait(timeout=SAFETY) == 0, errors.read_text()[-3000:]
    finally:
        if browser.poll() is None:
            browser.kill()
        lab.stop()
    assert shown["resumed"].startswith("Workspace resumed"), shown
    assert [t.strip() for t in shown["dialogs"]] == ["Workspace paused: nobody was active"], shown
    status_text = shown.get("message", "")
    assert "Workspace paused: nobody was active" in status_text, status_text
    assert re.search(r"because nobody was active since \d{4}-\d\d-\d\d \d\d:\d\d UTC "
                     r"\(\d+ s; the idle pause comes after 12 s\)", status_text), status_text
    # (how many kernels: issue 27.3's tab attached after a resume, not this test's subject)
    assert re.search(r"Saved 1 object \([^)]*\) from \d kernels?: answer\n", status_text), status_text
    assert "The kernels were stopped; this server keeps running." in status_text
    assert (ARTIFACTS / "idle-pause.png").stat().st_size > 0
