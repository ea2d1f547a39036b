"""Tensors of every kind a session may hold come back equal, or are named, and none fails the
checkpoint: dtypes torch pickles without a typed storage (float8, uint16/32/64:
``torch.storage._new_dtypes``), nested tensors of both layouts, sparse, quantized, complex and
bfloat16 tensors, a tensor subclass with its attributes, views, tensors in shared memory. In
process, on a local store.
Found by a probe through ``scripts/cut_check.py``: a nested tensor failed the whole pause (its
``shape`` raises), a float8 tensor was saved and then not restored (torch's own
``_rebuild_tensor_v3`` wants a typed storage where ``Tensor.__reduce_ex__`` gives an untyped
one: plain ``pickle`` of such a tensor fails the same way)."""

from __future__ import annotations

import warnings

import pytest
import torch

import kernel_hooks


class Tagged(torch.Tensor):
    """A tensor subclass of the notebook kind: torch's own ``__torch_function__``."""


class Guarded(torch.Tensor):
    """A subclass whose ``__torch_function__`` refuses what it does not know, as a lazy
    module's uninitialized parameters do for every query."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.is_inference:
            raise RuntimeError("not supported")
        return super().__torch_function__(func, types, args, kwargs or {})


def _kinds() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    base = torch.arange(24.0).reshape(4, 6)
    tagged = torch.randn(3).as_subclass(Tagged)
    tagged.note = "kept"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the strided layout is a prototype
        strided = torch.nested.nested_tensor([torch.arange(3.0), torch.arange(5.0)])
    return {
        "float8": torch.randn(6).to(torch.float8_e4m3fn),
        "float8_e5m2": torch.randn(6).to(torch.float8_e5m2),
        "uint16": torch.arange(5).to(torch.uint16),
        "nested": strided,
        "jagged": torch.nested.nested_tensor([torch.arange(2.0), torch.arange(4.0)],
                                             layout=torch.jagged),
        "sparse": torch.eye(4).to_sparse(),
        "csr": torch.eye(3).to_sparse_csr(),
        "quantized": torch.quantize_per_tensor(torch.randn(4), 0.1, 10, torch.quint8),
        "complex": torch.randn(3, dtype=torch.complex64),
        "bfloat16": torch.randn(5, dtype=torch.bfloat16),
        "tagged": tagged,
        "base": base,
        "view": base[1:, ::2],
        "shared": torch.arange(4.0).share_memory_(),
        "shared_big": torch.zeros(1 << 18).share_memory_(),  # 1 MiB: a blob of its own, mapped
    }


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.is_nested:
        return all(torch.equal(x, y) for x, y in zip(a.unbind(), b.unbind(), strict=True))
    if a.is_quantized:
        return torch.equal(a.int_repr(), b.int_repr()) and a.q_scale() == b.q_scale()
    if a.layout != torch.strided:
        return a.layout == b.layout and torch.equal(a.to_dense(), b.to_dense())
    if a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return b.dtype == a.dtype and torch.equal(a.float(), b.float())
    return b.dtype == a.dtype and torch.equal(a, b)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("kinds") / "store")
    namespace = _kinds()
    result = kernel_hooks.checkpoint(namespace=namespace, store=root, workspace="ws")
    restored: dict = {}
    report = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    return namespace, result, restored, report


def test_every_kind_is_saved_and_comes_back(resumed):
    namespace, result, restored, report = resumed
    assert result.skipped == []
    assert report.not_restored == [] and set(restored) == set(namespace), report.not_restored


@pytest.mark.parametrize("name", list(_kinds()))
def test_each_kind_is_equal(resumed, name):
    namespace, _, restored, _ = resumed
    assert _same(namespace[name], restored[name]), (namespace[name], restored[name])


def test_a_subclass_and_a_view_keep_what_they_were(resumed):
    _, _, restored, _ = resumed
    assert type(restored["tagged"]) is Tagged and restored["tagged"].note == "kept"
    restored["view"].mul_(2)  # still a view of the restored base
    assert restored["base"][1, 0].item() == 12.0 and restored["base"][1, 1].item() == 7.0


def _add_one(tensor: torch.Tensor) -> None:
    tensor.numpy()[:] += 1  # through NumPy: torch's thread pool does not survive a fork


def test_shared_memory_stays_shared(resumed):
    """A tensor the session moved to shared memory (``share_memory_()``: Hogwild training,
    tensors for worker processes) came back private while the verdict said ``exact``: a process
    started after the resume no longer wrote into it (found by a probe)."""
    import multiprocessing

    _, _, restored, _ = resumed
    assert restored["shared"].is_shared() and restored["shared_big"].is_shared()
    assert not restored["base"].is_shared()
    worker = multiprocessing.get_context("fork").Process(target=_add_one,
                                                          args=(restored["shared_big"],))
    worker.start()
    worker.join(60)
    worker.kill()
    assert worker.exitcode == 0 and restored["shared_big"].sum().item() == 1 << 18


def test_dtype_limits_come_back(tmp_path):
    """``torch.finfo``/``torch.iinfo`` objects (``fi = torch.finfo(x.dtype)``, read later for
    ``fi.eps`` or ``fi.min``) do not pickle ("cannot pickle 'torch.finfo' object"): they were not
    restored (found by a probe). They come back as the same dtype's limits."""
    root = str(tmp_path / "store")
    namespace = {"fi": torch.finfo(torch.bfloat16), "ii": torch.iinfo(torch.uint8)}
    assert kernel_hooks.checkpoint(namespace=namespace, store=root, workspace="ws").skipped == []
    restored: dict = {}
    report = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert report.not_restored == []
    assert (restored["fi"].eps, restored["fi"].dtype) == (namespace["fi"].eps, "bfloat16")
    assert (restored["ii"].max, restored["ii"].dtype) == (255, "uint8")


def test_an_inference_tensor_stays_one(tmp_path):
    """What ``torch.inference_mode()`` computed (``with torch.inference_mode(): preds =
    model(x)``, common in evaluation cells) came back as an ordinary tensor under an ``exact``
    verdict: an in-place update or a ``backward()`` through it, refused in the session, passed
    after a resume (found by a probe). It comes back an inference tensor."""
    root = str(tmp_path / "store")
    with torch.inference_mode():
        preds = torch.arange(4.0) * 2
        low = preds.to(torch.float8_e4m3fn)  # a dtype torch pickles with an untyped storage
    kernel_hooks.checkpoint(namespace={"preds": preds, "low": low}, store=root, workspace="ws")
    restored: dict = {}
    kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert restored["preds"].is_inference() and torch.equal(restored["preds"], preds)
    assert restored["low"].is_inference() and torch.equal(restored["low"].float(), preds)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        restored["preds"].add_(1)



def test_a_lazy_module_not_yet_called_comes_back_lazy(tmp_path):
    """``nn.LazyLinear`` (d2l's models are made of them) holds uninitialized parameters until
    its first call, which raise on any tensor query: reading whether one was an inference
    tensor failed its pickle, and the model was not restored (found by a probe). It comes back
    lazy, and its first call initialises it as it would have. A subclass whose
    ``__torch_function__`` refuses that query pickles too."""
    root = str(tmp_path / "store")
    net = torch.nn.Sequential(torch.nn.LazyLinear(8), torch.nn.ReLU(), torch.nn.LazyLinear(2))
    guarded = torch.ones(2).as_subclass(Guarded)
    kernel_hooks.checkpoint(namespace={"net": net, "guarded": guarded}, store=root,
                            workspace="ws")
    restored: dict = {}
    report = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert report.not_restored == [] and report.verdict["level"] == "exact", report.verdict
    assert torch.nn.parameter.is_lazy(restored["net"][0].weight)
    assert type(restored["guarded"]) is Guarded
    torch.manual_seed(1)
    first = restored["net"](torch.ones(2, 4))
    torch.manual_seed(1)
    assert torch.equal(first, net(torch.ones(2, 4)))
