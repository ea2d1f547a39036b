"""Hooks registered on tensors come back with them (kernel_hooks/torch_reduce.py): torch's own
reduction (torch/_tensor.py ``_reduce_ex_internal``, torch/nn/parameter.py ``__reduce_ex__``)
pickles an empty hook dict and only warns, so a gradient hook (``register_hook``: clipping,
scaling) or an optimizer-in-backward hook (``register_post_accumulate_grad_hook``) was dropped
while the resume said "exact" and the next ``backward()`` computed other numbers. In process."""

from __future__ import annotations

import warnings

import torch

import kernel_hooks


def _step(weight: torch.Tensor, param: torch.nn.Parameter) -> list[float]:
    weight.grad = None
    param.grad = None
    ((weight * 3).sum() + (param * 2).sum()).backward()
    return [*weight.grad.tolist(), *param.grad.tolist()]


def test_backward_and_post_accumulate_hooks_come_back(tmp_path):
    weight = torch.ones(3, requires_grad=True)
    handle = weight.register_hook(lambda g: g * 2)
    param = torch.nn.Parameter(torch.zeros(2))
    seen: list[int] = []
    param.register_post_accumulate_grad_hook(lambda p: seen.append(len(seen)))
    plain = torch.ones(2, requires_grad=True)
    namespace = {"weight": weight, "handle": handle, "param": param, "seen": seen, "plain": plain}
    before = _step(weight, param)
    assert before == [6.0, 6.0, 6.0, 2.0, 2.0] and seen == [0]

    root = str(tmp_path / "store")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "hook will not be serialized" warns no more
        kernel_hooks.checkpoint(namespace=namespace, store=root, workspace="ws")
    restored: dict = {}
    result = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert result.verdict["level"] == "exact", result.verdict

    assert _step(restored["weight"], restored["param"]) == before
    assert len(restored["param"]._post_accumulate_grad_hooks) == 1
    assert type(restored["param"]) is torch.nn.Parameter
    restored["handle"].remove()  # the handle the session kept still removes the hook
    assert _step(restored["weight"], restored["param"])[:3] == [3.0, 3.0, 3.0]
    assert not restored["plain"]._backward_hooks  # torch rebuilds it with an empty dict
