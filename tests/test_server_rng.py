"""Issue 27.4: every random number generator continues exactly through the server's path (what
the Pause button calls: ``POST pause``, a fresh server process on the same store, ``POST
resume``), and nothing on that path draws from the kernel's generators.

The kernel seeds ``random``, numpy's legacy global generator, a numpy ``Generator`` object and
torch's CPU generator, draws a few numbers, then writes down what an uninterrupted kernel would
draw next (computed on copies of each state, so nothing moves). A checkpoint-only pause
(``{"release": false}``) must leave every state where it was; then the real pause, a new server
process and the resume: the resumed kernel's next draws equal those.

What drew: every ``kernel_info_request`` (each client that connects: the server opens one per
call, ``kernel_client.own_client``) builds ipykernel's ``banner`` (``ipykernel/ipkernel.py``
``IPythonKernel.banner`` -> ``InteractiveShell.banner``), which ends with
``IPython/core/tips.py`` ``pick_tip()``: ``from random import choice`` on the global generator
(IPython 9). Found with a profile hook on ``random._inst`` in the kernel; ``kernel_hooks`` now
turns ``InteractiveShell.enable_tip`` off. The probe cells here connect a client too.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

SETUP = """
import random, numpy as np, torch
random.seed(27); np.random.seed(27); torch.manual_seed(27)
gen = np.random.default_rng(27)
warm = (random.random(), np.random.rand(), gen.random(), torch.rand(1).item())
"""

# The next draws of an uninterrupted kernel, from copies of each state (nothing is advanced),
# and a digest of every state as it is now.
EXPECTED = """
import copy, json, hashlib, pickle
def _rng_probe():
    r = random.Random(); r.setstate(random.getstate())
    legacy = np.random.RandomState(); legacy.set_state(np.random.get_state())
    t = torch.Generator(); t.set_state(torch.get_rng_state())
    states = pickle.dumps((random.getstate(), np.random.get_state(), gen.bit_generator.state,
                           torch.get_rng_state().numpy().tobytes()))
    return {"random": [r.random() for _ in range(3)], "numpy": legacy.rand(3).tolist(),
            "generator": copy.deepcopy(gen).random(3).tolist(),
            "torch": torch.rand(3, generator=t).tolist(),
            "mt_position": random.getstate()[1][-1],
            "digest": hashlib.sha256(states).hexdigest()}
print(json.dumps(_rng_probe()))
"""

DRAW = """print(json.dumps({"random": [random.random() for _ in range(3)],
                     "numpy": np.random.rand(3).tolist(), "generator": gen.random(3).tolist(),
                     "torch": torch.rand(3).tolist()}))"""


def config(store) -> dict:
    return {"GkeResume": {"store_url": str(store), "workspace_id": "rng-ws",
                          "release_backend": "none"}}


def test_every_generator_continues_through_the_server_path(server_process, tmp_path):
    store = tmp_path / "store"
    server = server_process("before", config(store))
    kid = server.new_session("rng.ipynb")
    server.run_cell(kid, SETUP)
    expected = json.loads(server.run_cell(kid, EXPECTED))

    code, body = server.call("POST", "gkeresume/api/pause", {"release": False})
    assert code == 202, body
    server.wait_for(lambda s: s["operation"] is None, "checkpointed")
    after_checkpoint = json.loads(server.run_cell(kid, "print(json.dumps(_rng_probe()))"))
    assert after_checkpoint == expected, "the server's checkpoint path drew random numbers"

    code, body = server.call("POST", "gkeresume/api/pause", {})
    assert code == 202, body
    status = server.wait_for(lambda s: s["operation"] is None, "paused")
    assert status["state"] == "paused", status
    server.stop()

    fresh = server_process("after", config(store))
    code, body = fresh.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    status = fresh.wait_for(lambda s: s["operation"] is None, "resumed")
    assert status["state"] == "ready", status
    [kernel] = status["kernels"]
    drawn = json.loads(fresh.run_cell(kernel["kernel_id"], DRAW))
    assert drawn == {k: expected[k] for k in ("random", "numpy", "generator", "torch")}
