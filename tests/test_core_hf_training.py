"""Hugging Face ``accelerate`` and ``transformers.Trainer`` cut by a checkpoint between cells and
resumed in a fresh kernel (issue 28 item 8): what every later cell prints is what the
uninterrupted kernel printed, bit for bit (losses, learning rates, steps), with tiny randomly
initialised models on synthetic data (no download).

accelerate keeps the process's state in three "Borg" singletons (accelerate/state.py
``PartialState``, ``AcceleratorState``, ``GradientState``: ``self.__dict__ = self._shared_state``),
and ``GradientState`` holds weak references to the active DataLoaders: pickled as plain objects,
every ``Accelerator`` was lost, and one carried naively restarted its gradient accumulation
(``GradientState.plugin_kwargs`` reset by ``DataLoaderShard.__init__`` during the load). The
Trainer's optimizer is accelerate's ``AcceleratedOptimizer``, whose ``__getstate__`` keeps the LR
scheduler's ``step`` wrapper (torch/optim/lr_scheduler.py: its closure holds a weakref).
"""

from __future__ import annotations

import json

ACCELERATE = r"""
import json, torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
torch.manual_seed(0)
accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.9 ** s)
data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
dl = torch.utils.data.DataLoader(data, batch_size=4)
model, opt, dl, sched = accelerator.prepare(model, opt, dl, sched)
done = 0

def steps(n):
    global done
    out = []
    for i, (x, y) in enumerate(dl):  # the batches after those already done (a sequential sampler)
        if i < done:
            continue
        if i == done + n:
            break
        with accelerator.accumulate(model):
            loss = ((model(x) - y) ** 2).mean()
            accelerator.backward(loss)
            opt.step(); sched.step(); opt.zero_grad()
        out.append([loss.item(), sched.get_last_lr()[0], accelerator.step,
                    accelerator.sync_gradients, model.weight.tolist()])
    done += n
    return out

print(json.dumps(steps(3)))  # the cut falls between two micro-batches of one update
"""

ACCELERATE_AFTER = r"""
print(json.dumps([steps(3), AcceleratorState().__dict__ is accelerator.state.__dict__,
                  GradientState().num_steps, str(AcceleratorState().distributed_type)]))
"""

TRAINER = r"""
import json, tempfile, torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from transformers.utils import logging as hf_logging
hf_logging.set_verbosity_error()
torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16, num_labels=2)
g = torch.Generator().manual_seed(1)

class Synthetic(torch.utils.data.Dataset):
    def __init__(self, n):
        self.x = torch.randint(0, 64, (n, 8), generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)
    def __len__(self):
        return len(self.y)
    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i]}

args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=4,
                         max_steps=4, learning_rate=1e-2, warmup_steps=2, logging_steps=1,
                         gradient_accumulation_steps=2, report_to="none", save_strategy="no",
                         disable_tqdm=True, use_cpu=True, seed=0)
trainer = Trainer(model=BertForSequenceClassification(config), args=args,
                  train_dataset=Synthetic(32), eval_dataset=Synthetic(8))
trainer.train()
"""

TRAINER_AFTER = r"""
from accelerate.state import AcceleratorState
print(json.dumps([trainer.state.global_step, trainer.lr_scheduler.get_last_lr(),
                  AcceleratorState().__dict__ is trainer.accelerator.state.__dict__]))
trainer.args.max_steps = 8
trainer.train()
print(json.dumps([[h.get("loss"), h.get("learning_rate")] for h in trainer.state.log_history]))
print(json.dumps(trainer.evaluate()["eval_loss"]))
"""


MIXED_PRECISION = r"""
import json, torch
from accelerate import Accelerator
torch.manual_seed(0)
accelerator = Accelerator(cpu=True, mixed_precision="bf16")  # as Trainer(bf16=True) prepares
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = accelerator.prepare(model, opt)
x = torch.randn(3, 4)

def step():
    out = model(x)  # computed in bfloat16 under autocast, given back as float32
    accelerator.backward(out.square().mean())
    opt.step(); opt.zero_grad()
    return [str(out.dtype), out.tolist()]

print(json.dumps(step()))
"""

MIXED_PRECISION_AFTER = r"""
print(json.dumps([step(), step(), accelerator.mixed_precision]))
"""


def test_a_model_prepared_for_mixed_precision_comes_back(start_kernel):
    """``Accelerator(mixed_precision="bf16").prepare(model)`` (and a ``Trainer`` with ``bf16=True``
    or ``fp16=True``, which prepares so) wraps the model's forward in accelerate's
    ``ConvertOutputsToFp32``, whose ``__getstate__`` raises: the model and the accelerator were
    not restored (named; a helper's probe). The wrapper is made again around the autocast
    forward it holds: the steps after the cut compute in bfloat16 as before, bit for bit."""
    expected, got = cut_and_compare(start_kernel, MIXED_PRECISION, MIXED_PRECISION_AFTER)
    assert got == expected
    first, _second, precision = json.loads(got)
    assert first[0] == "torch.float32" and precision == "bf16"


def cut_and_compare(start_kernel, before: str, after: str) -> tuple[str, str]:
    """Run ``before`` then ``after`` in one kernel, and again with a checkpoint between them and
    ``after`` in a fresh kernel; return what ``after`` printed in each (after checking that the
    first cell printed the same)."""
    whole = start_kernel()
    first = whole.run(before)
    expected = whole.run(after)
    cut = start_kernel()
    assert without_timings(cut.run(before)) == without_timings(first)
    report = cut.run("%checkpoint")
    assert "not saved" not in report, report
    cut.kill()
    fresh = start_kernel()
    resumed = fresh.run("%resume")
    assert "(exact)" in resumed and "not restored" not in resumed, resumed
    return expected, fresh.run(after)


def test_an_accelerate_loop_cut_between_micro_batches_continues_bit_for_bit(start_kernel):
    expected, got = cut_and_compare(start_kernel, ACCELERATE, ACCELERATE_AFTER)
    assert got == expected
    steps, one_state, accumulation, kind = json.loads(got.strip().splitlines()[-1])
    assert [s[3] for s in steps] == [True, False, True]  # the accumulation went on
    assert one_state and accumulation == 2 and kind == "DistributedType.NO"


def test_a_trainer_comes_back_with_its_state_accelerator_and_schedule(start_kernel):
    expected, got = cut_and_compare(start_kernel, TRAINER, TRAINER_AFTER)
    assert without_timings(got) == without_timings(expected)
    step, _lr, one_state = json.loads(got.strip().splitlines()[0])
    assert step == 4 and one_state


def without_timings(text: str) -> list[str]:
    """The lines printed, without the Trainer's timing lines (``train_runtime``, ...)."""
    return [line for line in text.splitlines() if "runtime" not in line]
