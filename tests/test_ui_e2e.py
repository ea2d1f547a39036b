"""End to end in a real browser: Debian's chromium, driven by playwright-core
(ui-tests/pause_resume.mjs), against a real JupyterLab with the extension and release backend
``none``.

First a Pause while a cell runs: the server refuses (409) and the lab shows its message. Then
issue 5's scenario with a session of 512 MiB: run ``x = 41 + 1``, checkpoint, make the arrays,
Pause, status ``paused``; reload; the resume dialog; Resume; ``print(x, ...)`` shows everything
came back. While the pause and the resume run, the page notes every change of the status bar and
of the toasts (issue 15): the bar moves through at least three increasing values each way, every
label is one sentence that says what happened here (no GPU on this machine), one notification
follows each operation and none outlives it. Then the dark theme and the Snapshots panel.
Screenshots go to test-artifacts/ui/; the two progress states are copied to docs/screenshots/.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fixtures_ui import ROOT

ARTIFACTS = ROOT / "test-artifacts" / "ui"
STARTUP_LIMIT = 180.0  # a safety net against a server that never comes up, not a speed check
NOTEBOOK = {
    "cells": [{"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {},
               "outputs": [], "source": []}],
    "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                "name": "python3"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str) -> tuple[int, dict | None]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


class Lab:
    """A JupyterLab server started for one test, with its own config, settings and store."""

    def __init__(self, tmp: Path, env: dict[str, str], jupyter_path: Path):
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}/"
        self.root = tmp / "notebooks"
        self.store = tmp / "store"
        self.log_path = tmp / "lab.log"
        self.root.mkdir()
        (self.root / "e2e.ipynb").write_text(json.dumps(NOTEBOOK))
        settings = tmp / "settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True)
        (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
        self.env = {
            **{k: v for k, v in env.items() if not k.startswith("GKERESUME_")},
            "GKERESUME_SIGNING_KEY": "ui-e2e-key-" + secrets.token_hex(16),
            "JUPYTER_CONFIG_DIR": str(tmp / "config"),
            "JUPYTER_PATH": os.pathsep.join(p for p in (str(jupyter_path), env.get("JUPYTER_PATH")) if p),
            "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
            "OMP_NUM_THREADS": "1",
        }
        self.command = [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
            "--GkeResume.release_backend=none", f"--GkeResume.store_url={self.store}",
            "--GkeResume.workspace_id=ui-e2e", "--GkeResume.shutdown_checkpoint_timeout=0",
            "--LabApp.news_url=None", "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ] + (["--allow-root"] if os.geteuid() == 0 else [])
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, cwd=self.root)
        deadline = time.monotonic() + STARTUP_LIMIT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"JupyterLab exited ({self.process.returncode}):\n{self.log()}")
            try:
                if _get(self.api("status"))[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        pytest.fail(f"JupyterLab did not answer within {STARTUP_LIMIT} s:\n{self.log()}")

    def api(self, path: str) -> str:
        return f"{self.url}gkeresume/api/{path}?token={self.token}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


@pytest.fixture
def lab(tmp_path, ui_env, lab_extension_dir):
    server = Lab(tmp_path, ui_env, lab_extension_dir)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium is not installed: scripts/test.sh installs it (apt-get)")
    return path


PHASE_WORDS = ("writing", "reading", "verifying", "releasing", "pausing", "resuming", "hashing")


def _forwards(values: list[float]) -> list[float]:
    """The bar's values in flight: at least one, and never one below the one before (the bar
    only moves forwards)."""
    assert values, "the bar showed no value while the operation ran"
    assert all(later >= earlier for earlier, later in itertools.pairwise(values)), values
    return values


def _check_operation(notes: list[dict], states: set[str], toast_word: str) -> list[float]:
    """What issue 15 asks of one operation as the page saw it; returns the bar's values."""
    during = [n for n in notes if n["state"] in states]
    assert during, f"the operation was never seen in flight: {notes[:5]}"
    assert all(n["barShown"] for n in during), [n["label"] for n in during if not n["barShown"]]
    for note in during:
        words = re.findall(r"[a-z]+", note["label"].lower())
        assert all(words.count(w) <= 1 for w in PHASE_WORDS), note["label"]
        assert "GPU" not in note["label"] and "·" not in note["label"], note["label"]
        assert len(note["toasts"]) <= 1, note["toasts"]
    assert any(note["toasts"] and toast_word in note["toasts"][0] for note in during), (
        f"no notification followed the operation: {[n['toasts'] for n in during][:5]}")
    # The message saying how it ended is never beside a notification of the operation, and no
    # control stays for an operation that is over: Cancel only while the pause can be cancelled.
    ended = [n for n in notes if n["dialog"]]
    assert ended and all(not n["toasts"] for n in ended), [n["toasts"] for n in ended]
    over = [n for n in notes if n["dialog"] or n["state"] not in states]
    assert not any(n["cancelShown"] for n in over), [n["label"] for n in over if n["cancelShown"]]
    assert not any(n["cancelShown"] for n in notes if n["state"] == "releasing")
    return _forwards([n["value"] for n in during if n["value"] is not None])


def _luminance(css: str) -> float:
    red, green, blue = (float(v) for v in re.findall(r"[\d.]+", css)[:3])
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def test_pause_reload_resume_in_chromium(lab, chromium, ui_env):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env = {**ui_env, "LAB_URL": lab.url, "LAB_TOKEN": lab.token, "NOTEBOOK": "e2e.ipynb",
           "CHROMIUM": chromium, "ARTIFACTS": str(ARTIFACTS)}
    run = subprocess.run(["node", "ui-tests/pause_resume.mjs"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=540)
    lines = run.stdout.strip().splitlines()
    seen = json.loads(lines[-1]) if lines else {}
    (ARTIFACTS / "seen.json").write_text(json.dumps(seen, indent=1))  # what the browser saw
    assert run.returncode == 0 and "error" not in seen, (
        f"browser run failed at step {seen.get('steps', ['?'])[-1:]}: {seen.get('error')}\n"
        f"{run.stderr[-3000:]}\n--- server log ---\n{lab.log()}"
    )

    # A pause the server refuses (a cell is running): its message is shown, nothing changes.
    # a pause asked for while a cell runs waits for it (never interrupts it); Cancel withdraws it
    assert seen["queuedLabel"].startswith("Pause queued: waiting for cell"), seen["queuedLabel"]
    assert "e2e.ipynb" in seen["queuedLabel"]
    assert "Nothing was released" in seen["cancelMessage"]
    assert seen["labelAfterCancel"].startswith("Running") and seen["kernelAfterCancel"] == "busy"

    # The menu has the four commands; a checkpoint leaves the kernel running.
    assert seen["menu"] == ["Pause Workspace", "Checkpoint This Notebook", "Resume…",
                            "Show Snapshots"]
    assert "Saved 1 object (" in seen["checkpointMessage"]
    assert "The kernels keep running." in seen["checkpointMessage"]

    # Pause: the bar showed how far it was and never moved back, one sentence a label, one
    # notification that closed before the message; the status and the notebook say "Paused".
    # The page polls every 0.4 s and the kernel reports every 0.25 s: how many values a page
    # sees depends on how fast this machine pauses 512 MiB. A quiet one writes it and stops the
    # kernel between two polls (CI of 4a482e7: one value, 0.66, while writing; the first pause
    # of a workspace has no estimate, so the hold before it is an indeterminate bar). So each
    # run shows at least one value and none going back; labels with bytes or a rate are well
    # formed. The bar and labels over many byte counts, with a fake clock and recorded
    # statuses: labextension/test/describe.test.ts ("the bar only moves forwards ..."), run by
    # test_ui_unit.py.
    _check_operation(seen["pauseNotes"], {"pausing", "releasing"}, "Pausing")
    labels = [n["label"] for n in seen["pauseNotes"]]
    # every phase with bytes (writing, committing, verifying: which of them a page catches
    # depends on the machine; CI caught "verifying 512 MiB of 512 MiB" and "committing the
    # snapshot 512 MiB of 512 MiB") says its bytes, and its rate once known, well formed
    assert all(re.search(r"^Pausing: [a-z ]+ [\d.]+ (B|[KMG]iB) of [\d.]+ (B|[KMG]iB)"
                         r"( at [\d.]+ [KMG]?i?B/s)?(,|$)", label)
               for label in labels if " of " in label), labels
    assert seen["pausedLabel"] == "Paused" and seen["cancelAfterPause"] is False
    assert seen["badge"] == "Paused"
    # (the names come from the paused record, which status returns once the kernels are gone)
    # the user's data, the module apart (issue 27.7)
    assert "Saved 3 objects (" in seen["pauseMessage"]
    assert "from 1 kernel: x, big, parts" in seen["pauseMessage"]
    assert "Modules, imported again on resume: np." in seen["pauseMessage"]
    assert "The kernels were stopped; this server keeps running." in seen["pauseMessage"]
    assert "GPU was released" not in seen["pauseMessage"]
    assert "x = 41 + 1" in seen["savedCells"]

    # The resume dialog after the reload: when, size, estimate, verdict, the choices.
    for field in ("Paused", "Notebooks", "e2e.ipynb", "Size", "Estimated restore", "exact"):
        assert field in seen["resumeDialog"]
    # what the pause saved, and (nothing here) what will not come back, before Resume
    assert re.search(r"Saved\s+3 objects \(512 MiB, [\d.]+ [KM]iB new\) from 1 kernel: x, big, parts",
                     seen["resumeDialog"]), seen["resumeDialog"]
    assert "Will not come back" not in seen["resumeDialog"]
    # No resume measured here yet: the estimate comes from the pause, measured on this store.
    assert re.search(r"(about [\d a-z]+|under a second) for 512 MiB \(measured on this store\)",
                     seen["resumeDialog"]), (
        seen["resumeDialog"])
    assert seen["resumeButtons"] == ["Later", "Start fresh", "Resume"]

    # Resume: the same of the bar, the labels and the notification; then "Running (resumed)".
    _check_operation(seen["resumeNotes"], {"waiting_for_resources", "restoring"}, "Resuming")
    assert seen["readyLabel"] == "Running (resumed)" and seen["cancelAfterResume"] is False
    assert seen["badgeAfterResume"] is False
    assert seen["resumeMessage"].startswith("Restored 3 objects into 1 kernel: x, big, parts")
    assert "Modules, imported again: np." in seen["resumeMessage"]
    assert seen["output"] == f"42 {512 * 2**20} 8.0"
    status = _get(lab.api("status"))[1]
    assert status["state"] in ("ready", "running") and status["paused"] is None

    # The Snapshots panel lists the pause's snapshot; the dark theme is dark, text readable.
    assert seen["snapshots"] == 2  # the checkpoint and the pause
    assert _luminance(seen["darkPanel"]["background"]) < 80
    assert _luminance(seen["darkPanel"]["color"]) > 150
    assert _luminance(seen["darkStatus"]["color"]) > 150
    # Restore from the panel into the running kernel; Delete only after the confirmation.
    assert seen["restoreMessage"].startswith("Restored 3 objects into 1 kernel: x, big, parts")
    assert seen["outputAfterRestore"] == "42"
    assert "cannot be undone" in seen["deleteQuestion"]
    assert seen["snapshotsAfterDelete"] == seen["snapshotsBeforeDelete"] - 1
    remaining = [row["id"] for row in _get(lab.api("snapshots"))[1]["snapshots"]]
    assert len(remaining) == seen["snapshotsAfterDelete"] and seen["deleted"] not in remaining

    for name in ("pause-queued", "paused-status", "resume-dialog", "resume-message", "after-resume",
                 "dark-snapshots", "progress-pausing", "progress-resuming"):
        assert (ARTIFACTS / f"{name}.png").stat().st_size > 0, seen.get(f"{name}-missed")
