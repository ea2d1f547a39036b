"""Capture side of what torch's own pickling drops from a session: ``TorchReductions.reduce``.

The graph pickler (``graph``) asks ``reduce(obj)`` for every object it meets after the storage
collector; ``None`` means "pickle it as torch does". Two kinds of object get more than torch gives:

- A tensor or parameter with a gradient. ``Tensor.__reduce_ex__`` (torch/_tensor.py,
  ``_reduce_ex_internal``) and ``Parameter.__reduce_ex__`` (torch/nn/parameter.py) keep the data
  and ``requires_grad``, never ``.grad``: gradients accumulated over several ``backward()``
  calls would be lost at a pause. Here torch's own reduction is kept and the gradient rides as
  its state (``rebuild.tensor_grad`` sets it back, on the tensor's device), so the gradient's
  storage leaves the pickle as a blob like every other storage.
- An optimizer. ``Optimizer.__getstate__`` (torch/optim/optimizer.py) keeps ``defaults``,
  ``state`` and ``param_groups`` only: what a subclass set in ``__init__`` was lost
  (``LBFGS._params``: the next ``step`` raised), and so were the hooks a session registered
  (``register_step_pre_hook`` ...) and the LR scheduler's wrapper: ``LRScheduler.__init__``
  (torch/optim/lr_scheduler.py, ``patch_track_step_called``) sets an instance attribute ``step``
  marked ``_wrapped_by_lr_sched`` that records ``_opt_called``, and without it the first
  ``scheduler.step()`` after a resume warned that ``optimizer.step()`` had been overridden.
  Here the optimizer pickles through its own ``__getstate__`` plus, when that is torch's, the
  rest of its ``__dict__`` (not what ``__setstate__`` makes again: empty hook dicts), with the
  wrapper's two facts beside it; ``rebuild.optimizer_state`` calls ``__setstate__`` and wraps
  ``step`` again. A subclass whose ``__getstate__`` keeps the whole ``__dict__``
  (accelerate/optimizer.py ``AcceleratedOptimizer``) would carry the wrapper, whose closure
  holds a weak reference to the optimizer, which does not pickle (every ``transformers.Trainer``
  was lost): the wrapper is left out of that state.

Invariant: nothing is imported; without torch loaded ``reduce`` answers ``None`` for everything.
"""

from __future__ import annotations

import sys
from typing import Any

from . import rebuild

#: The attribute torch's LR scheduler marks its ``optimizer.step`` wrapper with.
LR_SCHEDULER_MARK = "_wrapped_by_lr_sched"


class TorchReductions:
    """Reductions for one graph (the types are looked up once, from ``sys.modules``)."""

    def __init__(self, protocol: int):
        self.protocol = protocol
        torch = sys.modules.get("torch")
        self._tensor = torch.Tensor if torch is not None else None
        optim = sys.modules.get("torch.optim")
        self._optimizer = optim.Optimizer if optim is not None else None

    def reduce(self, obj: object) -> tuple | None:
        """A reduce tuple for a tensor with a gradient or an optimizer (see the module
        docstring), else None."""
        if self._tensor is not None and isinstance(obj, self._tensor):
            return self._tensor_reduce(obj)
        if self._optimizer is not None and isinstance(obj, self._optimizer):
            return self._optimizer_reduce(obj)
        return None

    def _tensor_reduce(self, tensor: Any) -> tuple | None:
        # Reading .grad of a non-leaf tensor that does not retain it warns: such a tensor has none.
        if not (tensor.is_leaf or tensor.retains_grad) or tensor.grad is None:
            return None
        reduced = tensor.__reduce_ex__(self.protocol)
        if len(reduced) != 2:  # a subclass that reduces with a state of its own: as torch does
            return None
        make, args = reduced
        return make, args, tensor.grad, None, None, rebuild.tensor_grad

    def _optimizer_reduce(self, optimizer: Any) -> tuple | None:
        reduced = optimizer.__reduce_ex__(self.protocol)
        if len(reduced) < 3 or not isinstance(reduced[2], dict):
            return None
        make, args, state = reduced[:3]
        step = vars(optimizer).get("step")
        wrapped = bool(getattr(step, LR_SCHEDULER_MARK, False))
        own = type(optimizer).__getstate__ is not self._optimizer.__getstate__
        extra = {} if own else {  # a class with a __getstate__ of its own chose what it keeps
            k: v for k, v in vars(optimizer).items()
            if k not in state and k != "step" and not _rebuilt_by_torch(k, v)}
        if not wrapped and not extra:
            return None
        if state.get("step") is step:  # a subclass's __getstate__ that keeps its __dict__
            state = {k: v for k, v in state.items() if k != "step"}
        called = bool(vars(optimizer).get("_opt_called", False))
        return (make, args, ({**state, **extra}, called, wrapped), None, None,
                rebuild.optimizer_state)


def _rebuilt_by_torch(name: str, value: object) -> bool:
    """What ``Optimizer.__setstate__`` makes again as it was: an empty hook dict, the profile
    name of ``zero_grad``."""
    if name == "_zero_grad_profile_name":
        return True
    return name.startswith("_optimizer_") and name.endswith("_hooks") and not value
