"""Capture side of what torch's own pickling drops from a session: ``TorchReductions.reduce``.

The graph pickler (``graph``) asks ``reduce(obj)`` for every object it meets after the storage
collector; ``None`` means "pickle it as torch does". Three kinds of object get more than torch gives:

- A tensor or parameter with a gradient. ``Tensor.__reduce_ex__`` (torch/_tensor.py,
  ``_reduce_ex_internal``) and ``Parameter.__reduce_ex__`` (torch/nn/parameter.py) keep the data
  and ``requires_grad``, never ``.grad``: gradients accumulated over several ``backward()``
  calls would be lost at a pause. Here torch's own reduction is kept and the gradient rides as
  its state (``rebuild.tensor_grad`` sets it back, on the tensor's device), so the gradient's
  storage leaves the pickle as a blob like every other storage. The same reductions pickle an
  empty dict for a leaf tensor's hooks (``register_hook``, ``register_post_accumulate_grad_hook``)
  and warn: the hook dicts ride in the state too (``rebuild.tensor_hooks``), so a gradient hook
  still acts after a resume.
- A pruning sparsifier (``torch.ao.pruning``): ``BaseSparsifier.__getstate__`` keeps
  ``defaults``, ``state`` and ``groups``, not the model it prunes, its config or
  ``enable_mask_update``: its next ``step()`` after a resume raised. The rest of its
  ``__dict__`` rides beside that state (``_whole_dict_reduce``).
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

A module with parametrizations (``torch.nn.utils.parametrizations.weight_norm``, ``orthogonal``,
``register_parametrization``) has a class made for it whose ``__getstate__`` raises
(torch/nn/utils/parametrize.py ``_inject_new_class``: "only supported through state_dict()"),
so it, and every wav2vec2-family model of transformers, did not pickle at all. It pickles as
its original class and ``__dict__``; ``rebuild.parametrized_module`` makes the class and the
properties again.

A function made by ``torch.compile`` (torch/_dynamo/eval_frame.py ``_TorchDynamoContext.__call__``:
a closure over the compile context, which ``functools.wraps`` names as the user's function)
held dynamo's config module and did not pickle: it pickles as its context and the original
function, and ``rebuild.compiled_function`` wraps it again (compiled at its first call, as in
the session), as torch's own ``OptimizedModule.__reduce__`` does for a compiled module.

A module compiled in place (``model.compile()``: torch/nn/modules/module.py ``Module.compile``)
keeps its compiled call in ``_compiled_call_impl``, which ``Module.__getstate__`` drops (so does
``torch.save``): it came back running eagerly. That compiled function rides beside the module's
state (``_with_compiled_call``) and is set back after it.

A handle of a global hook (``register_module_forward_hook``, ``register_optimizer_step_pre_hook``
...: ``torch.utils.hooks.RemovableHandle``) pickles its hook dict, which came back as a copy torch
never looks at. It pickles by the dict's name (``GLOBAL_HOOKS``; ``rebuild.global_hook_handle``):
the resumed handle removes from torch's own dict, which the ``torch global hooks`` entry of
``library_state`` fills again.

A TorchScript module (``torch.jit.script``, ``torch.jit.trace``) refuses pickle (torch/jit/
_script.py: "Tried to serialize object ... which does not have a __getstate__"), and so does a
scripted function: the name was not restored. A module pickles as its ``torch.jit.save`` archive,
written with each parameter and buffer slot emptied for the while (``_emptied``), plus those
tensors, which pickle as any tensor (blobs, gradients, shared with the eager module the script
was made from: ``torch.jit.script(net)`` holds ``net``'s very parameters); ``rebuild.
script_module`` loads the archive and puts them back in their slots. It comes back as a
``RecursiveScriptModule`` (a traced one too: torch.jit.load makes no other), with its code,
training flags and other attributes, and the Python attributes the session set on its wrappers. A
scripted function comes back as the ``forward`` of its loaded archive: a ``ScriptMethod``, called
as before. A module whose code calls Python (``@torch.jit.ignore``) cannot be saved: it is named
with torch.jit.save's error.

A tensor computed from others holds its autograd graph (``grad_fn``), which no pickling carries:
it comes back as a leaf. Where that graph could still be used (a ``loss`` cut before its
``backward()``, which then reached no parameter while the verdict said ``exact``), it is noted;
a graph ``backward()`` already freed is not (``_graph_used``). A module's weight set by its
``spectral_norm``/``weight_norm`` hook (the older API) or by a pruning of
``torch.nn.utils.prune`` is the exception: where the hook computes the same weight from what is
saved, the resume computes it again, graph and all (``_recomputed_reduce``).

A view (``row = base[1]``, ``base.T``, ``base.view(torch.int32)``) pickles in torch as a tensor
of its own over the shared storage: after a resume it shared the memory but was no view
(``_base`` ``None``, a version counter of its own, so autograd no longer saw an in-place change
of the base through it). A view that does not require grad pickles as its base (its root: the
one torch's ``_base`` names, itself a tensor of the graph) and the strides over it
with its dtype and its conjugate and negative bits (``rebuild.tensor_view``), where that call
made now gives back the very tensor (a view of the same base at the same memory, of the same
dtype, bits and type); else as torch does.

A custom operator (``torch.library.custom_op``) lives in torch's dispatcher; its ``CustomOpDef``
holds the dispatcher's library, which does not pickle: the name was lost and
``torch.ops.<namespace>.<name>`` was gone. It pickles as what defines it and the functions
registered on it (kernels, fake kernel, autograd formula, vmap and torch_dispatch rules, autocast);
``rebuild.custom_op`` defines it again in the resumed kernel's dispatcher and registers them
through the same methods.

A module whose class sets its own state (``__setstate__``) may set it without
``Module.__init__``: a convolution of ``torch.ao.quantization.convert`` (torch/ao/nn/quantized/
modules/conv.py) came back without its hook dicts, and calling it raised ``AttributeError``
(torch's own ``__deepcopy__`` of it runs ``Module.__init__`` first). Such a module is made that
way (``rebuild.initialised_module``) before its state is set.

A ``torch.fx.GraphModule`` pickles as its code, traced again at load into a module that
keeps only the attributes it lacks (torch/fx/graph_module.py ``_deserialize_graph_module``); it
has a ``meta`` of its own, empty, so what ``quantize_fx.prepare_fx`` kept there was lost, and
``convert_fx`` refused the calibrated model; the new nodes had none of the metadata passes
left on the old ones (``ShapeProp``'s ``tensor_meta``). Both are set back
(``_graph_module_reduce``); node metadata that does not pickle (fake tensors) is named.

A Lightning module's ``__getstate__`` (lightning/pytorch/core/module.py) sets ``_trainer`` to
None, so that saving a model does not save its trainer: in a session that kept both, the module
came back detached (``model.current_epoch`` and ``global_step`` read 0, ``model.trainer`` raised)
while the trainer still named it, under an ``exact`` verdict (found by a probe). The reference
rides in its state (``_module_reduce``).

A profiler (``torch.profiler.profile`` holds a ``torch.autograd.profiler.profile`` for each
session it records): one recording at the pause came back thinking it still recorded, under an
``exact`` verdict: its ``stop()`` found no session ("disableProfiler called but no active
profiling session") and its tables were empty (found by a cut check). What it recorded is
kineto's, in this process: it is named and left out (``_profile_reduce``). A finished one holds
kineto's results, which do not pickle (the whole profiler was named as not saved): it comes
back with its events (``_ensure_function_events``: processed now if they were not; what
``key_averages`` and ``table`` read) and without the trace, which ``export_chrome_trace`` and
``export_stacks`` need: that is named.

A tensor computed under ``torch.inference_mode()`` came back an ordinary one, which took the
in-place updates and ``backward()`` the session refused: it is made again in that mode
(``rebuild.inference_tensor``).

What ``torch.ops`` hands out (a namespace ``aten = torch.ops.aten``, an operator ``aten.add``,
an overload ``aten.add.Tensor``, a higher-order operator) does not pickle: ``aten``, the
``__torch_dispatch__`` subclass whose method read it and its tensors were lost. Each pickles as
its path under ``torch.ops`` (``rebuild.torch_operator``), where that path leads back to it. A
dtype's limits (``torch.finfo``, ``torch.iinfo``) pickle as their dtype.

Invariant: nothing is imported; without torch loaded ``reduce`` answers ``None`` for everything.
"""

from __future__ import annotations

import contextlib
import copyreg
import functools
import inspect
import re
import sys
import types
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import cloudpickle

from . import rebuild

if TYPE_CHECKING:
    from .graph import RecordNote

#: The attribute torch's LR scheduler marks its ``optimizer.step`` wrapper with.
LR_SCHEDULER_MARK = "_wrapped_by_lr_sched"
#: A global torch.compile names: ``unique_id(prefix)`` of torch/_dynamo/bytecode_transformation.py
#: (``f"{prefix}_{n}"``, a uuid after it with ``with_uuid``; every prefix starts with ``__``), or
#: ``install_global_by_id`` of torch/_dynamo/output_graph.py (``f"{prefix}_{id(value)}_c{n}"``,
#: the prefix empty or ``___unnamed_scope``: ``id`` must be the value's own).
DYNAMO_NAME = re.compile(r"\A__\w+?_\d+(?:_[0-9a-f]{8}(?:_[0-9a-f]{4}){3}_[0-9a-f]{12})?\Z"
                         r"|\A_(?:\w*_)?(?P<id>\d+)_c\d+\Z")

#: torch's module-level hook dicts (torch/nn/modules/module.py ``register_module_*_hook``,
#: torch/optim/optimizer.py ``register_optimizer_step_*_hook``), by module.
GLOBAL_HOOKS = {
    "torch.nn.modules.module": (
        "_global_forward_pre_hooks", "_global_forward_hooks", "_global_forward_hooks_always_called",
        "_global_forward_hooks_with_kwargs", "_global_backward_pre_hooks", "_global_backward_hooks",
        "_global_module_registration_hooks", "_global_parameter_registration_hooks",
        "_global_buffer_registration_hooks"),
    "torch.optim.optimizer": ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks"),
}


def loaded_global_hooks() -> Iterator[tuple[str, str, dict]]:
    """(module, name, dict) of each of torch's global hook dicts loaded now."""
    for module, names in GLOBAL_HOOKS.items():
        owner = sys.modules.get(module)
        for name in names if owner is not None else ():
            hooks = vars(owner).get(name)
            if hooks is not None:
                yield module, name, hooks


def dynamo_globals(namespace: Any) -> set[str]:
    """The names torch.compile installed in ``namespace`` for the code it compiled
    (``__compiled_fn_3_...``, ``__resume_at_20_4``, ``__builtins_dict___2``, ...: each a
    ``CleanupHook`` of torch/_dynamo/utils.py ``CleanupManager``, removed with that code; and
    the ``__import_torch_dot_...`` module aliases). They are dynamo's, not the user's: a compile
    in the resumed kernel installs its own, and refuses a name that is there already ("Name ...
    already exists in scope"). Also those no hook removes any more (graph breaks in an
    optimizer step leave ``__builtins_dict___N`` behind), known by how dynamo makes their names
    (``DYNAMO_NAME``)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return set()
    names = set()
    for name, value in list(namespace.items()):
        made = DYNAMO_NAME.match(name)
        if made and (made["id"] is None or int(made["id"]) == id(value)):
            names.add(name)
        elif name.startswith("__import_") and isinstance(value, types.ModuleType):
            names.add(name)  # symbolic_convert.py IMPORT_NAME
    try:
        hooks = utils.CleanupManager.instance.values.values()
        return names | {hook.name for group in hooks for hook in group if hook.scope is namespace}
    except AttributeError:  # another torch's private names
        return names


class TorchReductions:
    """Reductions for one graph (the types are looked up once, from ``sys.modules``)."""

    def __init__(self, protocol: int):
        self.protocol = protocol
        torch = sys.modules.get("torch")
        self._torch = torch
        self._tensor = torch.Tensor if torch is not None else None
        parameter = sys.modules.get("torch.nn.parameter")  # a lazy module's, before its call
        self._uninitialized = getattr(parameter, "UninitializedTensorMixin", ())
        new_dtypes = getattr(getattr(torch, "storage", None), "_new_dtypes", None)
        self._untyped_dtypes = frozenset(new_dtypes()) if new_dtypes is not None else frozenset()
        optim = sys.modules.get("torch.optim")
        self._optimizer = optim.Optimizer if optim is not None else None
        pruning = sys.modules.get("torch.ao.pruning.sparsifier.base_sparsifier")
        self._sparsifier = getattr(pruning, "BaseSparsifier", None)
        self._parametrized = PARAMETRIZE in sys.modules  # a parametrized class is made there
        self._recomputing = rebuild.recomputing_hooks()
        self._module = torch.nn.Module if torch is not None else None
        parallel = sys.modules.get("torch.nn.parallel.distributed")
        self._distributed = getattr(parallel, "DistributedDataParallel", None)
        fx = sys.modules.get("torch.fx.graph_module")
        self._graph_module = getattr(fx, "GraphModule", None)
        frames = sys.modules.get("torch._dynamo.eval_frame")
        self._dynamo_context = getattr(frames, "_TorchDynamoContext", None)
        hooks = sys.modules.get("torch.utils.hooks")
        self._handle = hooks.RemovableHandle if hooks is not None else None
        self._profile = getattr(sys.modules.get("torch.autograd.profiler"), "profile", None)
        self._lightning = tuple(
            cls for name in LIGHTNING_MODULES
            if (cls := getattr(sys.modules.get(name), "LightningModule", None)) is not None)
        self._global_hooks = {id(dicts): (module, name)
                              for module, name, dicts in loaded_global_hooks()}
        script = sys.modules.get("torch.jit._script")
        self._script_module = getattr(script, "ScriptModule", None)
        self._script_function = torch._C.ScriptFunction if torch is not None else None
        decorators = sys.modules.get("torch._dynamo.decorators")
        self._config_patch = getattr(decorators, "DynamoConfigPatchProxy", None)
        exported = sys.modules.get("torch.export.exported_program")
        self._exported = getattr(exported, "ExportedProgram", None)
        custom_ops = sys.modules.get("torch._library.custom_ops")
        self._custom_op = getattr(custom_ops, "CustomOpDef", None)
        ops = sys.modules.get("torch._ops")
        self._limits = (torch.finfo, torch.iinfo) if torch is not None else ()
        self._operators = tuple(getattr(ops, name) for name in _OPERATOR_TYPES
                                if hasattr(ops, name))

    def reduce(self, obj: object, note: RecordNote) -> tuple | None:
        """A reduce tuple for a tensor with a gradient or hooks, an optimizer, a parametrized
        module, an FX graph module, a module that sets its own state, a global hook's handle,
        a compiled function, a TorchScript module or function, an exported program, a custom
        operator, a profiler, an operator of ``torch.ops`` or a dtype's limits (see the module
        docstring), else None. A tensor's autograd graph that could still be used is noted in
        ``note``."""
        if self._tensor is not None and isinstance(obj, self._tensor):
            node = obj.grad_fn
            if node is not None and not _graph_used(node, self._tensor):
                note.without(f"autograd graph ({type(node).__name__})", (
                    "no pickling carries it: the tensor is a leaf after the resume, and "
                    "backward() through it no longer reaches what it was computed from (compute "
                    "it again after the resume)"))
            return self._tensor_reduce(obj)
        if self._optimizer is not None and isinstance(obj, self._optimizer):
            return self._optimizer_reduce(obj)
        if self._sparsifier is not None and isinstance(obj, self._sparsifier):
            return _whole_dict_reduce(obj, self._sparsifier, self.protocol)
        if self._parametrized and _is_parametrized_class(type(obj)):
            return _parametrized_reduce(obj)
        if self._module is not None and isinstance(obj, self._module):
            reduced = self._module_reduce(obj, note)
            compiled = vars(obj).get("_compiled_call_impl")
            if compiled is not None:
                return _with_compiled_call(reduced or obj.__reduce_ex__(self.protocol), compiled)
            if reduced is not None:
                return reduced
        if self._handle is not None and type(obj) is self._handle:
            return self._handle_reduce(obj)
        if self._dynamo_context is not None and type(obj) is types.FunctionType:
            return self._compiled_function_reduce(obj)
        if self._script_module is not None and isinstance(obj, self._script_module):
            return _script_module_reduce(obj)
        if self._script_function is not None and type(obj) is self._script_function:
            return rebuild.script_function, (_archive(obj),)
        if self._exported is not None and isinstance(obj, self._exported):
            return _exported_program_reduce(obj)
        if self._config_patch is not None and type(obj) is self._config_patch:
            return rebuild.dynamo_config_patch, (dict(obj.changes),)
        if self._custom_op is not None and type(obj) is self._custom_op:
            return _custom_op_reduce(obj)
        if self._profile is not None and isinstance(obj, self._profile):
            return _profile_reduce(obj, note, self.protocol)
        if type(obj) in self._limits:  # a dtype's limits, which do not pickle: by their dtype
            return type(obj), (getattr(self._torch, obj.dtype),)
        if self._operators and isinstance(obj, self._operators):
            return _operator_reduce(obj)
        return None

    def _module_reduce(self, module: Any, note: RecordNote) -> tuple | None:
        """A module whose weight a hook computes again, an FX graph module, a module that
        sets its own state (see the module docstring; a ``DistributedDataParallel`` is made
        after its default group: ``rebuild.distributed_module``) or a Lightning module attached
        to its trainer, else None."""
        if self._recomputing and (
                reduced := _recomputed_reduce(module, self._recomputing)) is not None:
            return reduced
        if self._graph_module is not None and isinstance(module, self._graph_module):
            return _graph_module_reduce(module, note)
        if type(module).__setstate__ is not self._module.__setstate__:
            reduced = _initialised_reduce(module, self.protocol)
            if reduced is not None and self._distributed and isinstance(module, self._distributed):
                group = self._torch.distributed  # DDP pickles over the default group only
                made = ((group.get_backend(), group.get_world_size()), *reduced[1])
                return (rebuild.distributed_module, made, *reduced[2:])
            return reduced
        trainer = vars(module).get("_trainer") if isinstance(module, self._lightning) else None
        if trainer is not None:  # Lightning's __getstate__ leaves it out
            make, args, state, *rest = module.__reduce_ex__(self.protocol)
            return (make, args, {**state, "_trainer": trainer}, *rest)
        return None

    def _compiled_function_reduce(self, function: Any) -> tuple | None:
        original = vars(function).get("_torchdynamo_orig_callable")
        if original is None or function.__closure__ is None:
            return None
        cells = dict(zip(function.__code__.co_freevars, function.__closure__, strict=True))
        context = cells["self"].cell_contents if "self" in cells else None
        if not isinstance(context, self._dynamo_context):
            return None
        return rebuild.compiled_function, (context, original)

    def _handle_reduce(self, handle: Any) -> tuple | None:
        where = self._global_hooks.get(id(handle.hooks_dict_ref()))
        if where is None:  # a module's or tensor's own hooks: its dict travels with it
            return None
        extra = tuple(self._global_hooks.get(id(ref()), (None, None))[1]
                      for ref in handle.extra_dict_ref)
        return rebuild.global_hook_handle, (*where, handle.id, extra)

    def _tensor_reduce(self, tensor: Any) -> tuple | None:
        if isinstance(tensor, self._uninitialized):  # raises on any query: as torch pickles it
            return None
        if tensor._base is not None and not tensor.requires_grad:
            return _view_reduce(tensor)
        # Reading .grad of a non-leaf tensor that does not retain it warns: such a tensor has none.
        grad = tensor.grad if tensor.is_leaf or tensor.retains_grad else None
        hooks = _hooks(tensor) if tensor.is_leaf else {}
        untyped = tensor.dtype in self._untyped_dtypes
        with self._torch._C.DisableTorchFunctionSubclass():  # a subclass's own answers aside
            inference = tensor.is_inference()  # then no view, gradient or hook
        if grad is None and not hooks and not untyped and not inference:
            return None
        with _hooks_left_to_us(tensor, hooks):
            reduced = tensor.__reduce_ex__(self.protocol)
        if len(reduced) != 2:  # a subclass that reduces with a state of its own: as torch does
            return None
        make, args = reduced
        if untyped and isinstance(args[0], self._torch.UntypedStorage):
            # torch gives these dtypes (float8, uint16, ...) an untyped storage, and its own
            # _rebuild_tensor_v3 reads ``storage._untyped_storage``: plain pickle of one fails
            args = (self._torch.storage.TypedStorage(wrap_storage=args[0], dtype=tensor.dtype,
                                                     _internal=True), *args[1:])
        if inference:
            return rebuild.inference_tensor, (make, args)
        if grad is None and not hooks:
            return make, args
        if not hooks:
            return make, args, grad, None, None, rebuild.tensor_grad
        return make, args, (grad, hooks), None, None, rebuild.tensor_hooks

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


#: What ``torch.ops`` hands out (torch/_ops.py): namespaces (``torch.ops.aten``), operators
#: (``aten.add``), their overloads (``aten.add.Tensor``) and higher-order operators. None pickles.
_OPERATOR_TYPES = ("_OpNamespace", "OpOverloadPacket", "OpOverload", "HigherOrderOperator")


def _operator_reduce(operator: Any) -> tuple | None:
    """A namespace or operator of ``torch.ops`` by its path there, when that path leads back to
    it now (``rebuild.torch_operator``); else None (pickled as anything else, or named)."""
    path = _operator_path(operator)
    try:
        found = rebuild.torch_operator(path)
    except (AttributeError, RuntimeError):
        return None
    return (rebuild.torch_operator, (path,)) if found is operator else None


def _operator_path(operator: Any) -> tuple[str, ...]:
    if isinstance(operator, types.ModuleType):  # a namespace: "torch.ops.aten"
        return tuple(operator.__name__.split(".")[2:])
    packet = getattr(operator, "overloadpacket", None)
    if packet is not None:  # an overload: "aten::add" and "Tensor"
        return (*packet._qualified_op_name.split("::"), operator._overloadname)
    qualified = getattr(operator, "_qualified_op_name", None)
    if qualified is not None:  # an operator: "aten::add"
        return tuple(qualified.split("::"))
    return (operator.namespace, operator.name())  # a higher-order operator


def _graph_module_reduce(module: Any, note: RecordNote) -> tuple:
    """torch's reduction of a ``GraphModule`` (its code, traced again at load), with its
    ``meta`` and its nodes' metadata (``ShapeProp``'s ``tensor_meta``, a pass's marks) set back
    after, node by node (``rebuild.graph_module_state``): the module that load makes has an
    empty ``meta`` and new nodes. Node metadata that does not pickle (the fake tensors and
    symbolic sizes ``make_fx`` and dynamo leave in ``val``) is noted as not carried. Methods
    bound to the module itself (``ExportedProgram.module()`` sets ``train`` and ``eval``) are
    set back after too: in torch's arguments they are a cycle pickle cannot close. A tracer
    class that cannot be made without arguments (export's ``_ModuleStackTracer``: torch's load
    traces with ``tracer_cls()``) gives way to torch's plain ``Tracer``."""
    make, (body, *rest) = module.__reduce__()
    bound = {name: value for name, value in body.items()  # ExportedProgram.module()'s train/eval
             if type(value) is types.MethodType and value.__self__ is module}
    body = {name: value for name, value in body.items() if name not in bound}
    if _needs_arguments(body.get("_tracer_cls")):  # torch's load traces with ``tracer_cls()``
        body["_tracer_cls"], body["_tracer_extras"] = None, {}  # export's: its plain Tracer
    args = (body, *rest)
    nodes, dropped = [], set()
    for node in module.graph.nodes:
        kept = {key: value for key, value in node.meta.items() if _pickles(value)}
        dropped.update(set(node.meta) - set(kept))
        nodes.append((node.name, node.op, kept))
    if dropped:
        note.without("FX node metadata", (
            f"{', '.join(sorted(dropped)[:5])} of its graph's nodes: the graph is traced again "
            "from its code at the resume, without what made them"))
    return (make, args, (vars(module).get("meta") or {}, nodes, bound), None, None,
            rebuild.graph_module_state)


def _whole_dict_reduce(obj: Any, base: type, protocol: int) -> tuple | None:
    """``obj`` as pickle reduces it, with the rest of its ``__dict__`` beside the state that
    ``base.__getstate__`` keeps (a pruning sparsifier's: ``defaults``, ``state`` and
    ``groups``, not the model it prunes), set back by ``base.__setstate__`` (``__dict__``
    updated); None where its class has a ``__getstate__`` of its own (it chose what it keeps)."""
    if type(obj).__getstate__ is not base.__getstate__:
        return None
    make, args, state, *rest = obj.__reduce_ex__(protocol)
    return (make, args, {**vars(obj), **state}, *rest)


def _profile_reduce(profile: Any, note: RecordNote, protocol: int) -> tuple:
    """A ``torch.autograd.profiler.profile`` (see the module docstring): one whose session is
    under way (entered, not exited since: ``__exit__`` stamps its end after its start) is left
    out and named; a finished one pickles without kineto's results, its events processed
    first (named: the trace stays here)."""
    start = getattr(profile, "profiling_start_time_ns", 0)  # 0, 0: a torch without the stamps
    end = getattr(profile, "profiling_end_time_ns", 0)
    if getattr(profile, "entered", False) and end <= start:
        return note.placeholder(profile, (
            "a profiling session in progress: what it records stays in this process (stop "
            "it before the pause, or start a new one after the resume)"))
    if getattr(profile, "kineto_results", None) is None:
        return profile.__reduce_ex__(protocol)
    with contextlib.suppress(Exception):  # a trace_only config keeps no events
        profile._ensure_function_events()  # what key_averages and table read, into the state
    note.without("profiler trace", (
        "kineto's trace of a finished profiling session stays in this process: "
        "export_chrome_trace and export_stacks need it (its events, key_averages and table "
        "come back)"))
    make, args, state, *rest = profile.__reduce_ex__(protocol)
    return (make, args, {**state, "kineto_results": None}, *rest)


def _needs_arguments(cls: Any) -> bool:
    """Whether ``cls`` is a class that cannot be made without arguments."""
    if not isinstance(cls, type):
        return False
    try:
        inspect.signature(cls).bind()
    except TypeError:
        return True
    except ValueError:  # no signature to read
        return False
    return False


def _with_compiled_call(reduced: tuple, compiled: Any) -> tuple:
    """``reduced`` (a module's reduce tuple) with the compiled call ``Module.compile`` left in
    ``_compiled_call_impl``, which ``Module.__getstate__`` drops: it rides beside the state
    and ``rebuild.compiled_module`` sets it back after (a compiled function: ``torch.compile``
    over the module's ``_call_impl`` again, compiled at its first call)."""
    make, args, state, items, pairs, setter = (*reduced, None, None, None, None)[:6]
    return make, args, (state, setter, compiled), items, pairs, rebuild.compiled_module


def _pickles(value: Any) -> bool:
    try:
        cloudpickle.dumps(value)
    except Exception:  # whatever it holds that does not pickle
        return False
    return True


def _initialised_reduce(module: Any, protocol: int) -> tuple | None:
    """A module whose class sets its own state, as pickle reduces it, made by
    ``rebuild.initialised_module`` (``Module.__init__`` before that state), or None."""
    reduced = module.__reduce_ex__(protocol)
    if reduced[0] is not copyreg.__newobj__:
        return None
    return (rebuild.initialised_module, *reduced[1:])


def _custom_op_reduce(op: Any) -> tuple:
    """A ``torch.library.custom_op`` as what defines it (namespace, name, schema, function, tags
    by name) and what was registered on it since (``rebuild.custom_op_registrations``)."""
    registered = {
        "kernels": dict(op._backend_fns), "fake": op._abstract_fn,
        "autograd": (op._backward_fn, op._setup_context_fn),
        "torch_dispatch": dict(op._torch_dispatch_fns), "vmap": op._vmap_fn,
        "autocast": dict(op._autocast_dtype)}
    tags = tuple(tag.name for tag in op._tags)
    return (rebuild.custom_op, (op._namespace, op._name, op._schema, op._init_fn, tags),
            registered, None, None, rebuild.custom_op_registrations)


def _view_reduce(view: Any) -> tuple | None:
    """``rebuild.tensor_view``'s call for ``view`` (see the module docstring), or None when it
    would not make the same tensor again."""
    if vars(view):  # attributes torch's own reduction carries besides the data
        return None
    args = (view._base, view.dtype, tuple(view.shape), view.stride(), view.storage_offset(),
            (view.is_conj(), view.is_neg()))
    try:
        again = rebuild.tensor_view(*args)
    except (RuntimeError, ValueError):  # a layout or dtype the base cannot be viewed as
        return None
    same = (type(again) is type(view) and again._base is view._base
            and again.data_ptr() == view.data_ptr() and again.dtype == view.dtype
            and (again.is_conj(), again.is_neg()) == args[-1])
    return (rebuild.tensor_view, args) if same else None


def _graph_used(root: Any, tensor_type: type, limit: int = 256) -> bool:
    """Whether ``backward()`` already went through the graph from ``root`` and freed it (the
    ``loss`` a training loop leaves behind): the first node met that saved tensors says, since
    reading a freed one raises (torch/csrc/autograd/saved_variable.cpp, "Trying to backward
    through the graph a second time"). A graph that saves no tensors can always be used."""
    seen: set[Any] = set()
    todo = [root]
    while todo and len(seen) < limit:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):
            if name.startswith("_saved_") or name == "saved_tensors":  # a custom Function's
                try:
                    value = getattr(node, name)
                except RuntimeError:
                    return True
                values = value if isinstance(value, (tuple, list)) else (value,)
                if any(isinstance(v, tensor_type) for v in values):
                    return False
        todo.extend(parent for parent, _ in node.next_functions)
    return False


#: The module whose ``_inject_new_class`` makes a parametrized module's class.
def _script_module_reduce(module: Any) -> tuple:
    tensors = dict(module.named_parameters(remove_duplicate=False))
    tensors.update(module.named_buffers(remove_duplicate=False))
    with _emptied(module, tensors):
        archive = _archive(module)
    own = {path: attributes for path, sub in module.named_modules()
           if (attributes := _own_attributes(sub))}
    return rebuild.script_module, (archive, tensors, own)


#: What a ScriptModule wrapper's ``__dict__`` holds beside ``nn.Module``'s and its methods
#: (torch/jit/_script.py ``RecursiveScriptModule``, torch/jit/_trace.py ``TracedModule``).
_SCRIPT_WRAPPER = frozenset({"_initializing", "_c", "_concrete_type", "_name",
                             "_actual_script_module"})


def _own_attributes(wrapper: Any) -> dict[str, Any]:
    """The Python attributes a session set on a ScriptModule wrapper (``scripted.labels =
    [...]``; a traced wrapper keeps them on its ``_actual_script_module``): the archive does not
    hold them. Not its methods, nor the properties torch copies there (a scripted
    ``GraphModule``'s ``code``): a property in an instance's ``__dict__`` does nothing."""
    import torch

    standard = _module_attributes()
    inner = vars(wrapper).get("_actual_script_module")
    found = {**(vars(inner) if inner is not None else {}), **vars(wrapper)}
    return {k: v for k, v in found.items()
            if k not in standard and k not in _SCRIPT_WRAPPER
            and not isinstance(v, (torch._C.ScriptMethod, property))}


@functools.cache
def _module_attributes() -> frozenset[str]:
    import torch

    return frozenset(vars(torch.nn.Module()))


def _archive(scripted: Any) -> bytes:
    import io

    import torch

    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    return buffer.getvalue()


def _exported_program_reduce(program: Any) -> tuple:
    """A ``torch.export`` program: its ``torch.export.save`` archive, written with each state
    entry standing in as a one-element tensor of its shape (the verifier checks kind, dtype and
    shape), and its state dict as graph objects. Pickled as it is, it loaded only as far as a
    tracer object that cannot be made again ("``_ModuleStackTracer.__init__()`` missing ...":
    the name was not restored). Its state holds the exported module's very parameters, so
    training the module changed the program: they stay shared, and travel once."""
    import io

    import torch

    state = dict(program._state_dict)

    def stand_in(tensor: Any) -> Any:
        if not isinstance(tensor, torch.Tensor):
            return tensor
        light = torch.empty((), dtype=tensor.dtype).expand(tensor.shape)
        if isinstance(tensor, torch.nn.Parameter):
            return torch.nn.Parameter(light, requires_grad=tensor.requires_grad)
        return light

    buffer = io.BytesIO()
    program._state_dict = {name: stand_in(tensor) for name, tensor in state.items()}
    try:
        torch.export.save(program, buffer)
    finally:
        program._state_dict = state
    return rebuild.exported_program, (buffer.getvalue(), state)


@contextlib.contextmanager
def _emptied(module: Any, tensors: dict[str, Any]) -> Iterator[None]:
    """Each slot of ``tensors`` (qualified names in ``module``) holds an empty tensor of its
    dtype and device meanwhile; the tensors are back in their slots after, whatever happens."""
    import torch

    emptied: list[tuple[Any, str, Any]] = []
    try:
        for name, tensor in tensors.items():
            owner, leaf = rebuild.script_slot(module, name)
            emptied.append((owner, leaf, tensor))
            setattr(owner, leaf, torch.empty(0, dtype=tensor.dtype, device=tensor.device))
        yield
    finally:
        for owner, leaf, tensor in reversed(emptied):
            setattr(owner, leaf, tensor)


PARAMETRIZE = "torch.nn.utils.parametrize"
#: Where Lightning's module class lives (the ``lightning`` package and ``pytorch_lightning``).
LIGHTNING_MODULES = ("lightning.pytorch.core.module", "pytorch_lightning.core.module")


def _is_parametrized_class(cls: type) -> bool:
    """``Parametrized<Base>``, made by ``_inject_new_class`` (torch/nn/utils/parametrize.py)."""
    return cls.__module__ == PARAMETRIZE and cls.__name__.startswith("Parametrized")


def _parametrized_reduce(module: Any) -> tuple:
    """The module as its original class and ``__dict__`` (parameters, buffers, submodules: the
    ``parametrizations`` ModuleDict with its originals and parametrization modules) plus the
    names parametrized; ``rebuild.parametrized_module`` injects the class and properties again
    as ``register_parametrization`` did."""
    cls = type(module)
    return (rebuild.parametrized_module, (cls.__bases__[0], tuple(module.parametrizations)),
            module.__dict__)


def _recomputed_reduce(module: Any, kinds: tuple[type, ...]) -> tuple | None:
    """A module whose ``spectral_norm``/``weight_norm`` hook (the older API) set its weight at
    the last call, or whose pruning set it from ``weight_orig`` and ``weight_mask``: that weight
    holds an autograd graph back to the module's parameters, which no pickling carries (a
    forward run without ``backward()``, a model pruned and not yet run, left the session
    ``partial``). Where the hook computes the same weight again from what is saved (the
    parameters, and a spectral norm's ``u`` and ``v`` after their last power iteration), the
    weight is left out and the resume computes it again, graph and all
    (``rebuild.recomputed_module``); else None (it travels as it is, its graph named)."""
    names = [rebuild.hook_attribute(hook) for hook in module._forward_pre_hooks.values()
             if isinstance(hook, kinds) and _recomputes(hook, module)]
    if not names:
        return None
    state = dict(module.__getstate__())
    for name in names:
        del state[name]
    return (copyreg.__newobj__, (type(module),), (state, tuple(names)), None, None,
            rebuild.recomputed_module)


def _recomputes(hook: Any, module: Any) -> bool:
    """Whether the hook's weight on ``module`` holds a graph and equals what the hook computes
    now (no power iteration: ``u`` and ``v`` stay as they are)."""
    import torch

    weight = vars(module).get(rebuild.hook_attribute(hook))
    if not isinstance(weight, torch.Tensor) or weight.grad_fn is None:
        return False
    try:
        with torch.no_grad():
            again = rebuild.hook_weight(hook, module)
        return again.dtype == weight.dtype and torch.equal(again, weight)
    except Exception:  # a hook or module in a state torch did not leave it in: as it is
        return False


#: A leaf tensor's hook dicts: ``register_hook`` and ``register_post_accumulate_grad_hook``
#: (torch/_tensor.py); torch's own reduction pickles neither.
HOOK_DICTS = ("_backward_hooks", "_post_accumulate_grad_hooks")


def _hooks(tensor: Any) -> dict[str, dict]:
    """The tensor's non-empty hook dicts, by attribute, the very dicts (the ``RemovableHandle``
    a session keeps points at them). Hooks marked ``torch.utils.hooks.unserializable_hook``
    stay behind, as torch means them to: that dict travels as a copy without them."""
    found = {}
    for name in HOOK_DICTS:
        hooks = getattr(tensor, name, None)
        if hooks:
            kept = {k: h for k, h in hooks.items() if not getattr(h, "__torch_unserializable__", False)}
            if kept:
                found[name] = hooks if len(kept) == len(hooks) else type(hooks)(kept)
    return found


@contextlib.contextmanager
def _hooks_left_to_us(tensor: Any, hooks: dict[str, dict]) -> Iterator[None]:
    """Torch's reduction warns that a tensor's hooks will not be serialized; ours carries them
    (``hooks``), so that warning is not shown for this tensor."""
    if not hooks:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*hook .* on tensor will not be serialized")
        yield


def _rebuilt_by_torch(name: str, value: object) -> bool:
    """What ``Optimizer.__setstate__`` makes again as it was: an empty hook dict, the profile
    name of ``zero_grad``."""
    if name == "_zero_grad_profile_name":
        return True
    return name.startswith("_optimizer_") and name.endswith("_hooks") and not value
