"""What a session holds beyond its variables' values, cut by a checkpoint in one kernel and
resumed in a fresh one: gradients accumulated over ``backward()`` calls and the wrapper an LR
scheduler puts on its optimizer's ``step`` (torch/_tensor.py ``_reduce_ex_internal`` and
torch/nn/parameter.py ``Parameter.__reduce_ex__`` drop ``.grad``; torch/optim/lr_scheduler.py
``LRScheduler.__init__`` sets ``optimizer.step``, which ``Optimizer.__getstate__`` drops),
attributes a session call patched into a library (tqdm/std.py ``tqdm.pandas`` sets
``DataFrame.progress_apply`` and friends), the warnings already shown, how a figure displays, and
the verdict of the resume."""

from __future__ import annotations

import json

TRAINING = r"""
import hashlib, json, warnings
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
model[0].bias.requires_grad_(False)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
batches, targets = torch.randn(4, 32, 8), torch.randn(4, 32, 1)

def micro(i):
    (((model(batches[i]) - targets[i]) ** 2).mean() / 2).backward()

micro(0); micro(1); opt.step(); sched.step(); opt.zero_grad()
micro(2)  # half of the next step's gradient, accumulated before the cut
"""

HELD = r"""
print(json.dumps({
    "grads": [None if p.grad is None else p.grad.tolist() for p in model.parameters()],
    "requires_grad": [p.requires_grad for p in model.parameters()],
}))
"""

NEXT_STEP = r"""
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    micro(3); opt.step(); sched.step()
state = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
print(json.dumps({"params": hashlib.sha256(state).hexdigest(), "lr": sched.get_last_lr(),
                  "warnings": [str(w.message) for w in caught]}))
"""


def test_gradients_and_the_lr_schedule_cross_a_cut_bit_for_bit(start_kernel):
    """The gradient accumulated before the cut comes back on every parameter (``requires_grad``
    too), and the next optimizer step after the resume gives the same parameters, bit for bit,
    as the kernel that never stopped, without the scheduler's "overridden" warning."""
    a = start_kernel()
    a.run(TRAINING)
    held = a.run_json(HELD)
    assert all(g is not None for g, r in zip(held["grads"], held["requires_grad"], strict=True) if r)
    a.run("%checkpoint")
    uninterrupted = a.run_json(NEXT_STEP)
    assert uninterrupted["warnings"] == []
    a.kill()

    b = start_kernel()
    out = b.run("%resume")
    assert "not restored" not in out, out
    assert b.run_json(HELD) == held
    resumed = b.run_json(NEXT_STEP)
    assert resumed == uninterrupted, json.dumps([uninterrupted, resumed])
