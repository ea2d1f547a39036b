"""A custom operator the notebook defined (``torch.library.custom_op``, PyTorch's "Python custom
operators" tutorial, advanced_source/python_custom_ops.py), carried across a cut
(``kernel_hooks.torch_reduce``, ``rebuild.custom_op``).

The operator lives in torch's C++ dispatcher; its ``CustomOpDef`` (torch/_library/custom_ops.py)
holds the dispatcher's library and did not pickle ("cannot pickle 'torch._C._DispatchModule'"):
the name was not restored and ``torch.ops.nb.scaled`` was gone. It comes back defined again in the
resumed kernel's dispatcher, with its kernels, fake kernel and autograd formula."""

from __future__ import annotations

from fixtures_kernels import resumed_elsewhere

SESSION = r"""
import torch

@torch.library.custom_op("nb::scaled", mutates_args=())
def scaled(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x * factor

@scaled.register_fake
def _(x, factor):
    return torch.empty_like(x)

def setup_context(ctx, inputs, output):
    ctx.factor = inputs[1]

def backward(ctx, grad):
    return grad * ctx.factor * 10, None  # not the true gradient: proves this formula runs

scaled.register_autograd(backward, setup_context=setup_context)
"""
OBSERVE = r"""
import json, torch
x = torch.ones(3, requires_grad=True)
torch.ops.nb.scaled(x, 2.0).sum().backward()
compiled = torch.compile(lambda t: scaled(t, 3.0) + 1, backend="aot_eager", fullgraph=True)
print(json.dumps([scaled(torch.ones(2), 2.0).tolist(), x.grad.tolist(),
                  compiled(torch.ones(2)).tolist(), type(scaled).__name__]))
del x, compiled
"""


def test_a_custom_operator_comes_back_with_its_registrations(start_kernel):
    a = start_kernel()
    a.run(SESSION)
    expected = a.run_json(OBSERVE)
    assert expected == [[2.0, 2.0], [20.0, 20.0, 20.0], [4.0, 4.0], "CustomOpDef"]
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0], out
    assert b.run_json(OBSERVE) == expected


def test_operators_the_cells_made_with_torch_library_are_named(start_kernel):
    """``torch.library.define`` and ``@torch.library.impl`` (the functional API) keep their
    ``Library`` where the Python functions cannot be read back (torch/library.py ``_keep_alive``;
    the functions live in the dispatcher): the operator was gone after a resume, under an exact
    verdict (found by a probe). It is not carried; the resume names it."""
    a = start_kernel()
    a.run("import torch\n"
          "torch.library.define('nbdef::plus_one', '(Tensor x) -> Tensor')\n"
          "@torch.library.impl('nbdef::plus_one', 'cpu')\n"
          "def plus_one(x):\n"
          "    return x + 1\n"
          "torch.ops.nbdef.plus_one(torch.ones(1))")
    _, out = resumed_elsewhere(a, start_kernel)
    assert "(partial)" in out.splitlines()[0], out
    assert "nbdef::plus_one" in out, out


WRAPPER_SESSION = r"""
import torch
aten = torch.ops.aten

class Scaled(torch.Tensor):
    @staticmethod
    def __new__(cls, elem, scale):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype,
                                                   device=elem.device)

    def __init__(self, elem, scale):
        self.elem, self.scale = elem, scale

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs):
        if func in (aten.detach.default, aten._to_copy.default):
            return cls(func(args[0].elem, *args[1:], **kwargs), args[0].scale)
        return OP_TABLE[func](*(a.elem * a.scale if isinstance(a, cls) else a for a in args))

OP_TABLE = {aten.add.Tensor: torch.add, torch.ops.aten.mul.Tensor: torch.mul}
cond, ops, nb = torch.ops.higher_order.cond, torch.ops, torch.ops.nb
weight = Scaled(torch.arange(3.0), 0.5)
"""
WRAPPER_OBSERVE = r"""
import json
print(json.dumps([(weight + 1).tolist(), weight.to(torch.float64).elem.dtype == torch.float64,
                  aten is torch.ops.aten, ops is torch.ops, nb is torch.ops.nb,
                  cond is torch.ops.higher_order.cond,
                  [op is getattr(aten, op.__name__.split(".")[0]).Tensor for op in OP_TABLE]]))
"""


def test_operators_and_namespaces_of_torch_ops_come_back_as_themselves(start_kernel):
    """``aten = torch.ops.aten`` and a table keyed by ``aten.add.Tensor``, as in every
    ``__torch_dispatch__`` tensor subclass (pytorch/tutorials
    recipes_source/recipes/swap_tensors.py @102956ffb0b138738a60a163c979f8a7f7f9c8ff): none of
    torch's operator namespaces, packets or overloads pickles ("cannot pickle
    '_OpNamespace' object", torch/_ops.py), so ``aten``, the subclass whose method reads it and
    every tensor of that subclass were not restored (found by cutting that recipe). They come
    back as the resumed kernel's own, found along their path under ``torch.ops``."""
    a = start_kernel()
    a.run(SESSION + WRAPPER_SESSION)
    expected = a.run_json(WRAPPER_OBSERVE)
    assert expected == [[1.0, 1.5, 2.0], True, True, True, True, True, [True, True]]
    b, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0], out
    assert b.run_json(WRAPPER_OBSERVE) == expected
