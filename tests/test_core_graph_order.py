"""The graph's record order: names that seem to hold no storages are pickled first, so that a
resume unpickles them while the storage blobs are still being read (each storage waits for its
verified blob); the namespace keeps its own order and aliases across names survive. In process,
on a local store."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kernel_hooks
from jupyter_gkeresume.snapshot import SnapshotStore, load_manifest, load_signing_key
from kernel_hooks.record_order import pickling_order
from kernel_hooks.storages import seems_to_hold_storages


@pytest.mark.parametrize("value, holds", [
    (torch.zeros(3), True),
    (torch.nn.Linear(4, 4), True),
    (np.zeros(1 << 14), True),  # 128 KiB: leaves the pickle
    ({"a": [1, 2], "b": {"w": np.zeros(1 << 14)}}, True),
    (np.zeros(10), False),  # small arrays stay in the pickle
    ({f"k{i}": [i, str(i), {"v": i / 7}] for i in range(10_000)}, False),
    ("text", False),
    (np, False),  # a module pickles by reference
])
def test_seems_to_hold_storages(value, holds):
    assert seems_to_hold_storages(value) is holds


def test_an_optimizer_holds_storages():
    model = torch.nn.Linear(4, 4)
    assert seems_to_hold_storages(torch.optim.AdamW(model.parameters()))


def test_records_without_storages_come_first_and_the_namespace_keeps_its_order(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", "graph-order-test-key-" + "4" * 32)
    model = torch.nn.Linear(64, 64)
    namespace = {
        "model": model,
        "arr": np.arange(100_000.0),
        "records": {f"k{i}": [i, str(i)] for i in range(1000)},
        "alias": {"w": model.weight},
        "note": "kept",
    }
    root = str(tmp_path / "store")
    result = kernel_hooks.checkpoint(namespace=namespace, store=root, workspace="ws")
    store = SnapshotStore(root, "ws")
    manifest = load_manifest(store, result.snapshot_id, load_signing_key(workspace="ws"))
    user_records = [r for r in manifest.records if r in namespace]
    assert user_records == ["records", "note", "model", "arr", "alias"]

    restored: dict = {}
    kernel_hooks.resume(result.snapshot_id, namespace=restored, store=root, workspace="ws")
    assert list(restored) == list(namespace)
    assert restored["alias"]["w"] is restored["model"].weight
    assert restored["records"] == namespace["records"] and restored["note"] == "kept"
    assert np.array_equal(restored["arr"], namespace["arr"])


NOTEBOOK = '''
import functools

@torch.no_grad()
def evaluate(x):
    return model(x)

def decorated(f):
    @functools.wraps(f)
    def wrapper(*args):
        return f(*args)
    return wrapper

@decorated
def total():
    return sum(records)

class Trainer:
    def fit(self):
        return model.weight.sum()

trainer = Trainer()
records = [1, 2, 3]
model = torch.nn.Linear(3, 1)
model.last = model(torch.ones(2, 3))  # autograd graphs still to use: named
model.act = torch.relu(model.last)
'''


def test_a_notebook_function_is_pickled_after_the_names_it_uses(tmp_path, monkeypatch):
    """A function defined in the notebook pickles with the globals it uses. ``evaluate``
    (decorated with ``@torch.no_grad()``), seeming to hold no storages, was pickled first and
    carried ``model`` in its record: the verdict named ``evaluate`` as coming back without an
    autograd graph that ``model`` holds, and the model's bytes were counted as the function's
    (seen cutting karpathy/nn-zero-to-hero makemore_part5_cnn1.ipynb @73c3fcc after its
    ``split_loss`` cell). The names a function, a wrapped function or a notebook class's methods
    use are pickled before it; names without storages still come first. The model's seven layer
    outputs each repeated the same long reason: a reason is said once for all it applies to."""
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", "graph-order-test-key-" + "4" * 32)
    namespace: dict = {"__name__": "__main__", "torch": torch}
    exec(NOTEBOOK, namespace)
    root = str(tmp_path / "store")
    result = kernel_hooks.checkpoint(namespace=namespace, store=root, workspace="ws")
    # (the signing key set above may be named too: an environment variable set in the session)
    assert [(s.name, s.type) for s in result.skipped if s.type != "environment variable"] == [
        ("model", "autograd graph (AddmmBackward0)"), ("model", "autograd graph (ReluBackward0)")]
    store = SnapshotStore(root, "ws")
    manifest = load_manifest(store, result.snapshot_id, load_signing_key(workspace="ws"))
    user_records = [r for r in manifest.records if r in namespace and r not in ("torch", "functools")]
    assert user_records == ["decorated", "records", "total", "model", "evaluate", "Trainer", "trainer"]
    sizes = {o.name: o.bytes for o in manifest.objects}
    assert sizes["evaluate"] == sizes["trainer"] == 0 and sizes["model"] > 0, sizes
    why = {o.name: o.reason for o in manifest.objects}["model"]  # one reason, said once
    assert why.startswith("restored without: autograd graph (AddmmBackward0), autograd graph "
                          "(ReluBackward0) (no pickling carries it"), why
    assert why.count("no pickling carries it") == 1, why

    restored: dict = {"__name__": "__main__"}
    resumed = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    reasons = str(resumed.verdict["reasons"])
    assert "left out: model (restored without: autograd graph" in reasons, reasons
    assert "evaluate" not in reasons and "trainer" not in reasons.lower(), reasons
    assert restored["total"]() == 6
    assert torch.equal(restored["evaluate"](torch.ones(1, 3)), namespace["model"](torch.ones(1, 3)))
    restored["model"].weight.data.fill_(1.0)  # the functions see the resumed model
    assert restored["trainer"].fit().item() == 3.0


def test_the_order_is_safe_on_dead_proxies():
    """``isinstance`` on a dead ``weakref.proxy`` raises ReferenceError; the order looks at a
    proxy's type only, as a class attribute, in a closure or as a name's value."""
    import weakref

    class Gone:
        pass

    dead = weakref.proxy(Gone())
    namespace: dict = {"__name__": "__main__", "dead": dead}
    exec("class Holder:\n    kept = dead\n"
         "def uses():\n    return dead\n"
         "def outer():\n    ref = dead\n    def inner():\n        return ref\n    return inner\n"
         "closure = outer()", namespace)
    items = [(n, namespace[n]) for n in ("Holder", "uses", "closure", "dead")]
    assert [name for name, _ in pickling_order(items, holds=lambda value: False)] == [
        "Holder", "dead", "uses", "closure"]
