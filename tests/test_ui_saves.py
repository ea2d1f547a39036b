"""Issue 27.2 in a real browser (ui-tests/unsaved_edits.mjs): JupyterLab in Debian's chromium,
edits typed and left unsaved, then a pause the lab's button did not start: ``%pause`` typed in
the other notebook, or the idle pause. The lab saves them when the server asks
(labextension/src/labsaves.ts): the notebooks on disk (what a fresh server on the same home
volume opens) hold the typed lines, and the paused record says what was saved."""

from __future__ import annotations

import json
import subprocess

import pytest
from fixtures_ui import ROOT
from test_ui_e2e import NOTEBOOK, Lab, _get, chromium  # noqa: F401  (chromium: the fixture)

IDLE_TIMEOUT = 12  # seconds: above the time the page takes to open and type here


@pytest.mark.parametrize(("mode", "typed"), [("magic", {"b.ipynb": "edited_in_b = 1"}),
                                             ("idle", {"a.ipynb": "edited_before_idle = 1"})])
def test_unsaved_edits_are_saved_by_every_pause(tmp_path, ui_env, lab_extension_dir, chromium,  # noqa: F811
                                                mode, typed):
    lab = Lab(tmp_path, ui_env, lab_extension_dir)
    for name in ("a.ipynb", "b.ipynb"):
        (lab.root / name).write_text(json.dumps(NOTEBOOK))
    if mode == "idle":
        lab.command.append(f"--GkeResume.idle_timeout={IDLE_TIMEOUT}")
    lab.start()
    try:
        env = {**ui_env, "LAB_URL": lab.url, "LAB_TOKEN": lab.token, "CHROMIUM": chromium,
               "MODE": mode}
        run = subprocess.run(["node", "ui-tests/unsaved_edits.mjs"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, f"{run.stderr[-3000:]}\n--- server log ---\n{lab.log()}"
        seen = json.loads(run.stdout.strip().splitlines()[-1])
        assert set(typed) <= set(seen["dirty"]), seen  # unsaved when the pause began
        assert seen["dirtyAfter"] == [], seen
        status = _get(lab.api("status"))[1]
        assert status["state"] == "paused", status
        assert status["paused"]["reason"] == ("idle" if mode == "idle" else "user")
        documents = status["paused"]["documents"]
        assert set(typed) <= set(documents["saved"]), documents
        assert documents["not_saved"] == [] and documents["unanswered"] == 0, documents
        for name, line in typed.items():
            sources = ["".join(c["source"]) for c in
                       json.loads((lab.root / name).read_text())["cells"]]
            assert line in sources, (name, sources)
    finally:
        lab.stop()
