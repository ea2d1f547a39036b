"""The lab extension's TypeScript unit tests (node's test runner on the compiled JS), and the
TypeScript mirrors of the Python state enum, compatibility levels and when a rate is known."""

from __future__ import annotations

import json
import re
import subprocess

from fixtures_ui import ROOT

from jupyter_gkeresume import rates
from jupyter_gkeresume.snapshot.compat import LEVELS
from jupyter_gkeresume.states import State
from jupyter_gkeresume.units import human_bytes


def _node(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["node", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_typescript_unit_tests_pass(ui_env, ts_unit_build):
    run = _node(ui_env, "--test", str(ts_unit_build / "test"))
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    passed = int(re.search(r"^# pass (\d+)$", output, re.M).group(1))
    failed = int(re.search(r"^# fail (\d+)$", output, re.M).group(1))
    assert failed == 0 and passed >= 20, output[-3000:]


def test_typescript_mirrors_the_python_enums(ui_env, ts_unit_build):
    script = (f"const t = require({json.dumps(str(ts_unit_build / 'src' / 'types.js'))});"
              "console.log(JSON.stringify({states: t.STATES, levels: t.LEVELS}))")
    run = _node(ui_env, "-e", script)
    assert run.returncode == 0, run.stderr
    mirrored = json.loads(run.stdout)
    assert mirrored["states"] == [s.value for s in State]
    assert mirrored["levels"] == list(LEVELS)


def test_typescript_mirrors_when_a_rate_is_known(ui_env, ts_unit_build):
    """progress.ts says a rate, and a time left by it, exactly when rates.py does."""
    script = (f"const p = require({json.dumps(str(ts_unit_build / 'src' / 'progress.js'))});"
              "console.log(JSON.stringify([p.RATE_MIN_SECONDS, p.RATE_MIN_FRACTION]))")
    run = _node(ui_env, "-e", script)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [rates.RATE_MIN_SECONDS, rates.RATE_MIN_FRACTION]


def test_one_size_is_spelled_the_same_by_the_lab_and_the_kernel(ui_env, ts_unit_build):
    """Issue 27.7: one size, one spelling: the lab's ``formatBytes`` and the kernel's and CLI's
    ``units.human_bytes`` write every size alike (the status bar, the dialogs, ``%checkpoint``)."""
    sizes = [0, 1, 1023, 1024, 1536, 100 * 1024 - 1, 512 * 2**20, 660 * 2**20 + 300_000,
             677 * 2**20, 2 * 2**30, 3 * 2**40 + 5]
    script = (f"const f = require({json.dumps(str(ts_unit_build / 'src' / 'format.js'))});"
              f"console.log(JSON.stringify({json.dumps(sizes)}.map(f.formatBytes)))")
    run = _node(ui_env, "-e", script)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [human_bytes(n) for n in sizes]
