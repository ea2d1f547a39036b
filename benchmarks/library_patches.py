"""False positives and cost of finding what a session patched into libraries
(``kernel_hooks.library_patches``), and of the warnings-already-shown capture
(``kernel_hooks.warnings_shown``), in real kernels running ordinary sessions of pandas, torch,
transformers, lightning and scikit-learn that patch nothing, and one that does (``tqdm.pandas()``).

    .venv/bin/python benchmarks/library_patches.py [--out x.json]

Each session runs in a fresh kernel (jupyter_client, the extension auto-loaded as in a notebook);
then the kernel times ``find_patches()`` after a walk (what every checkpoint after the kernel's
first code does) and from nothing, and the ``warnings_shown`` capture (median of 5, CPU time
of the kernel: it holds on a shared machine), lists what was found, and checkpoints; a second
fresh kernel resumes and lists what it had to set again (the rest was there already). Prints a
markdown table (docs/core.md keeps the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

from jupyter_client.manager import start_new_kernel

SESSIONS = {
    "pandas": r"""
import io, numpy as np, pandas as pd
df = pd.DataFrame({"a": np.arange(1000) % 7, "b": np.random.default_rng(0).normal(size=1000)})
summary = df.groupby("a").agg(["mean", "std"]).reset_index()
frame = pd.read_csv(io.StringIO(df.to_csv(index=False)))
frame["c"] = frame["b"].rolling(5).mean(); frame.describe(); frame.pivot_table(index="a")
pd.set_option("display.max_rows", 20); repr(frame)
import matplotlib.pyplot as plt
frame.plot(x="a", y="b")
""",
    "torch": r"""
import torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.AdamW(model.parameters(), 1e-3)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 10)
loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=32)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y); opt.zero_grad(); loss.backward()
    opt.step(); sched.step()
traced = torch.fx.symbolic_trace(model); traced(torch.randn(2, 8))
""",
    "transformers": r"""
import torch
from transformers import BertConfig, BertForSequenceClassification, logging as hf_logging
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=64)
model = BertForSequenceClassification(config)
out = model(input_ids=torch.randint(0, 100, (2, 16)), labels=torch.tensor([0, 1]))
out.loss.backward(); hf_logging.set_verbosity_error()
model.save_pretrained(OUTPUT); BertForSequenceClassification.from_pretrained(OUTPUT)
""",
    "lightning": r"""
import torch, lightning as L
from torch.utils.data import DataLoader, TensorDataset

class Net(L.LightningModule):
    def __init__(self):
        super().__init__(); self.layer = torch.nn.Linear(8, 1)
    def training_step(self, batch, _):
        x, y = batch; return torch.nn.functional.mse_loss(self.layer(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, default_root_dir=OUTPUT)
trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=16))
""",
    "scikit-learn": r"""
import numpy as np
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
X, y = make_classification(n_samples=300, random_state=0)
search = GridSearchCV(make_pipeline(StandardScaler(), LogisticRegression()),
                      {"logisticregression__C": [0.1, 1.0]}, cv=3).fit(X, y)
search.best_estimator_.predict_proba(X[:5]); repr(search)
""",
    "tqdm.pandas() (patches)": r"""
import pandas as pd
from tqdm.auto import tqdm
tqdm.pandas()
pd.DataFrame({"a": range(10)}).progress_apply(lambda c: c * 2)
""",
}

MEASURE = r"""
import gc, json, statistics, sys, time, types
from kernel_hooks import library_patches, warnings_shown

def _median(f, prepare=lambda: None):
    times = []
    for _ in range(5):
        prepare()
        start = time.process_time(); f(); times.append(time.process_time() - start)
    return statistics.median(times) * 1000

def _forget():  # as a kernel that walked nothing before (what is let go is not timed)
    getattr(library_patches, "_last_walk", {}).clear()
    gc.collect()

_classes = sum(1 for n, m in list(sys.modules.items()) if isinstance(m, types.ModuleType)
               for v in list(vars(m).values()) if isinstance(v, type) and v.__module__ == n)
print(json.dumps({
    "found": [p.label for p in library_patches.find_patches()],
    "find_ms": _median(library_patches.find_patches),
    "find_fresh_ms": _median(library_patches.find_patches, _forget),
    "warnings_ms": _median(warnings_shown._shown),
    "modules": len(sys.modules), "classes": _classes,
}))
"""


def measure(name: str, code: str, work: str) -> dict:
    env = {**os.environ, "GKERESUME_STORE": os.path.join(work, "store"),
           "GKERESUME_WORKSPACE": "bench", "GKERESUME_SIGNING_KEY": "bench-key-" + "0" * 32,
           "OMP_NUM_THREADS": "1"}
    os.makedirs(env["GKERESUME_STORE"], exist_ok=True)
    manager, client = start_new_kernel(env=env, cwd=work)
    try:
        lines: list[str] = []

        def run(source: str) -> None:
            def hook(msg):
                if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                    lines.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    raise RuntimeError(f"{name}: {msg['content']['evalue']}")
            client.execute_interactive(source, output_hook=hook, timeout=600)

        run(f"OUTPUT = {os.path.join(work, 'out')!r}")
        run(code)
        lines.clear()
        run(MEASURE)
        measured = json.loads("".join(lines).strip().splitlines()[-1])
        run("import kernel_hooks; kernel_hooks.checkpoint()")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    manager, client = start_new_kernel(env=env, cwd=work)
    try:
        lines.clear()
        run("import json, kernel_hooks\nfrom kernel_hooks import library_patches\n"
            "kernel_hooks.resume()\nprint(json.dumps(library_patches.set_again))")
        measured["set_again"] = json.loads("".join(lines).strip().splitlines()[-1])
        return measured
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for name, code in SESSIONS.items():
            results[name] = measure(name, code, work)
    print("| session | modules | classes | found at checkpoint | set again at resume | "
          "find_patches CPU ms: after a walk (from nothing) | warnings capture CPU ms |")
    print("|---|---:|---:|---|---|---:|---:|")
    for name, r in results.items():
        found = ", ".join(r["found"]) or "none"
        again = f"{len(r['set_again'])} of them" if r["set_again"] else "none"
        print(f"| {name} | {r['modules']} | {r['classes']} | {found} | {again} | "
              f"{r['find_ms']:.1f} ({r['find_fresh_ms']:.1f}) | {r['warnings_ms']:.2f} |")
    if args.out:
        with open(args.out, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
