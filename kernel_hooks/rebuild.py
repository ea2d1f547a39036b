"""Reconstructors named in the graph pickle for storages that left it as blobs.

The capture reduces each torch storage to ``storage(key, dtype)`` (``untyped(key)`` for a bare
UntypedStorage), each large numpy array to ``array(key, ...)`` and each ``__cuda_array_interface__``
object to ``cuda_array(key, record)``, and each notebook function to ``notebook_function`` +
``notebook_function_state``; ``tensor_grad``, ``tensor_hooks``, ``optimizer_state`` and
``parametrized_module`` put back what torch's own pickling drops, ``script_module`` and
``script_function`` what it refuses (``torch_reduce``). While a graph
is read, the restore code installs its loader and target namespace with ``loading(Loading(loader,
namespace))``; storages ask the loader for their bytes, notebook functions are bound to the
namespace. Pickle's memo makes each reduced object come back once, so aliases stay aliases.
"""

from __future__ import annotations

import functools
import importlib
import math
import struct
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol


class Loader(Protocol):
    def torch_storage(self, key: str) -> Any: ...

    def numpy_buffer(self, key: str) -> Any: ...

    def cuda_array(self, key: str, record: dict[str, Any]) -> Any: ...


@dataclass
class Loading:
    """One graph being read: where storages come from, and the namespace notebook functions are
    bound to. A notebook function may run while the graph loads (a registered ``load``, a
    ``__setstate__``), so the globals it referenced are put in the namespace at once, where it
    lacks them (a name it has keeps its value); ``added`` lists those names, and ``take_back()``
    removes them again when the restore fails. ``weak``: each weak reference or container
    rebuilt, with references to its referents and their type names (``weak_references``).
    ``after``: what to start once the whole session is back, interpreter state included (a
    DataLoader's persistent workers: ``live_objects``), each with what it starts; the restore
    runs them last, and names each one that fails."""

    loader: Loader
    namespace: dict[str, Any]
    added: list[str] = field(default_factory=list)
    weak: list[tuple[object, list[tuple[Any, str]]]] = field(default_factory=list)
    after: list[tuple[str, Callable[[], None]]] = field(default_factory=list)

    def take_back(self) -> None:
        for name in self.added:
            self.namespace.pop(name, None)
        self.added.clear()


_loading: Loading | None = None


@contextmanager
def loading(state: Loading) -> Iterator[Loading]:
    """Serve the reconstructors from ``state`` while a graph is unpickled."""
    global _loading
    previous, _loading = _loading, state
    try:
        yield state
    finally:
        _loading = previous


def current_loading() -> Loading | None:
    """The graph being read, if one is."""
    return _loading


def _current_loading() -> Loading:
    if _loading is None:
        raise RuntimeError("a gkeresume graph can only be unpickled by kernel_hooks.resume")
    return _loading


def _current() -> Loader:
    return _current_loading().loader


def notebook_function(code: types.CodeType, name: str | None, defaults: tuple | None,
                      closure: tuple | None) -> types.FunctionType:
    """A notebook function whose globals are the namespace being restored into."""
    return types.FunctionType(code, _current_loading().namespace, name, defaults, closure)


def notebook_function_state(func: types.FunctionType, state: tuple[dict, dict]) -> None:
    """cloudpickle's ``_function_setstate`` for a notebook function, except that the globals it
    referenced fill only the names the namespace lacks (``Loading``)."""
    attributes, slots = state
    func.__dict__.update(attributes)
    loading = _current_loading()
    for name, value in slots.pop("__globals__").items():
        if name not in loading.namespace:
            loading.namespace[name] = value
            loading.added.append(name)
    closure = slots.pop("__closure__")
    slots.pop("_cloudpickle_submodules", None)
    for cell, saved in zip(func.__closure__ or (), closure or (), strict=True):
        try:
            cell.cell_contents = saved.cell_contents
        except ValueError:  # an empty cell stays empty
            continue
    for attribute, value in slots.items():
        setattr(func, attribute, value)


def single_dispatch(registry: dict[type, Any]) -> Any:
    """A ``functools.singledispatch`` function with the implementations of ``registry``
    (``graph._is_single_dispatch``)."""
    function = functools.singledispatch(registry[object])
    for kind, implementation in registry.items():
        if kind is not object:
            function.register(kind, implementation)
    return function


def class_skeleton(quiet: list[tuple[type, str]], *skeleton: Any) -> Any:
    """cloudpickle's skeleton of a notebook class (``_make_skeleton_class(*skeleton)``), made while
    each ``(owner, hook)`` in ``quiet`` only passes the call on to the owner's parents
    (``graph._quiet_skeleton``); each hook is put back at once."""
    from cloudpickle.cloudpickle import _make_skeleton_class

    own = {(owner, name): vars(owner)[name] for owner, name in quiet
           if name in vars(owner)}  # a base still a skeleton has none yet
    for owner, name in own:
        type.__setattr__(owner, name, _passing_on(owner, name))
    try:
        return _make_skeleton_class(*skeleton)
    finally:
        for (owner, name), hook in own.items():
            type.__setattr__(owner, name, hook)


def _passing_on(owner: type, name: str) -> Any:
    """A stand-in for ``owner``'s ``name`` (``__init_subclass__``, a metaclass's ``__new__`` or
    ``__init__``) that calls its parents' only."""
    if name == "__init_subclass__":
        def init_subclass(cls: type, **kwargs: Any) -> None:
            super(owner, cls).__init_subclass__(**kwargs)

        return classmethod(init_subclass)
    if name == "__new__":
        def new(meta: type, *args: Any, **kwargs: Any) -> Any:
            return super(owner, meta).__new__(meta, *args, **kwargs)

        return staticmethod(new)

    def init(made: Any, *args: Any, **kwargs: Any) -> None:
        super(owner, made).__init__(*args, **kwargs)

    return init


def new_object(cls: type, args: tuple) -> Any:
    """``cls.__new__(cls, *args)`` as pickle calls it, or where that ``__new__`` (written in
    Python) wants other arguments, the ``__new__`` of the nearest base that is not written in
    Python (``tuple.__new__(Point, (1, 2))``); the state is set on it after, as pickle does."""
    try:
        return cls.__new__(cls, *args)
    except TypeError:
        base = next(b for b in cls.__mro__[1:] if type(b.__new__) is not types.FunctionType)
        return base.__new__(cls, *args)


def instance_of(cls: type, args: tuple) -> Any:
    """``cls(*args)``, as the ``__reduce__`` of one of its bases asks, or where the class's own
    ``__init__`` wants other arguments (``Vocab(tokens)`` over an ``OrderedDict``, ``Counts(text,
    min_count)`` over a ``Counter``, ``MyError(code, detail)`` passing only ``code`` on), the
    instance made as that base makes one (its ``__new__`` and ``__init__`` with ``args``); the
    state is set on it after, as pickle does."""
    try:
        return cls(*args)
    except Exception:
        base = reducing_base(cls)
        made = base.__new__(cls, *args)
        base.__init__(made, *args)
        return made


def reducing_base(cls: type) -> type:
    """The class whose ``__reduce__`` (or ``__reduce_ex__``) ``cls`` pickles with."""
    return next(b for b in cls.__mro__ if "__reduce__" in vars(b) or "__reduce_ex__" in vars(b))


def exception_state(exception: BaseException, state: tuple) -> None:
    """State setter of an exception (``graph._exception_reduce``): its own state, then its cause
    and context."""
    attributes, cause, context, suppress = state
    if attributes:
        exception.__setstate__(attributes)
    exception.__cause__, exception.__context__ = cause, context
    exception.__suppress_context__ = suppress


def cached_property(function: Any, name: str | None) -> Any:
    """A ``functools.cached_property`` over ``function``, cached under ``name`` as ``__set_name__``
    made it (a class pickled by value gets its attributes set, not named: before Python 3.12 the
    property also held a lock, which became a placeholder)."""
    prop = functools.cached_property(function)
    prop.attrname = name
    return prop


def lru_cached(function: Any, maxsize: int | None, typed: bool) -> Any:
    """``function`` under a new ``functools.lru_cache`` (``graph._lru_cached_by_value``)."""
    return functools.lru_cache(maxsize=maxsize, typed=typed)(function)


def storage(key: str, dtype: str) -> Any:
    return _typed(_current().torch_storage(key), dtype)


def _typed(untyped_storage: Any, dtype: str) -> Any:
    import torch

    return torch.storage.TypedStorage(wrap_storage=untyped_storage, dtype=getattr(torch, dtype),
                                      _internal=True)


def untyped(key: str) -> Any:
    return _current().torch_storage(key)


def in_shared_memory(key: str, dtype: str | None) -> Any:
    """A storage the session had moved to shared memory (``share_memory_()``: a model trained by
    several processes, tensors handed to workers), moved there again: it came back private,
    and a worker started after the resume no longer saw its updates."""
    made = untyped(key)
    made.share_memory_()
    return _typed(made, dtype) if dtype else made


def array(key: str, dtype: Any, shape: tuple, strides: tuple, offset: int, writeable: bool) -> Any:
    return array_view(_current().numpy_buffer(key), dtype, shape, strides, offset, writeable)


def array_view(base: Any, dtype: Any, shape: tuple, strides: tuple, offset: int,
               writeable: bool) -> Any:
    """An array over ``base`` (a restored array, ``storages.StorageCollector._view_reduce``, or
    a blob's buffer, ``array``)."""
    import numpy

    view = numpy.ndarray(shape, dtype, buffer=base, offset=offset, strides=strides)
    view.flags.writeable = writeable
    return view


def memory_view(exporter: Any, offset: int, format: str, shape: tuple[int, ...],
                readonly: bool) -> memoryview:
    """A contiguous memoryview of ``exporter`` (a ``bytearray``, an array, ...) from byte
    ``offset`` on, as ``format`` and ``shape`` (``graph._memory_view_reduce``)."""
    nbytes = math.prod(shape) * struct.calcsize(format)
    view = memoryview(exporter).cast("B")[offset:offset + nbytes]
    if (format, shape) != ("B", (nbytes,)):  # cast refuses an empty view
        view = view.cast(format, shape)
    return view.toreadonly() if readonly else view


def graph_module_state(module: Any, state: tuple[dict, list[tuple[str, str, dict]], dict]) -> None:
    """State setter of a ``GraphModule`` traced again from its code (``torch_reduce``): its
    ``meta``, the methods bound to it, and each node's metadata, given as (name, op, metadata)
    in graph order. The new graph has the same nodes in the same order, some named anew
    (``sin`` traced again is ``sin_default``): they are matched by position where the ops agree
    all along, else by name (a node the new graph lacks is skipped)."""
    meta, nodes, bound = state
    vars(module)["meta"] = meta
    vars(module).update(bound)
    new = list(module.graph.nodes)
    if [op for _, op, _ in nodes] == [node.op for node in new]:
        pairs = zip(new, (kept for _, _, kept in nodes), strict=True)
    else:
        by_name = {name: kept for name, _, kept in nodes}
        pairs = ((node, by_name.get(node.name, {})) for node in new)
    for node, kept in pairs:
        node.meta.update(kept)


def dynamo_config_patch(changes: dict[str, Any]) -> Any:
    """``torch._dynamo.patch_dynamo_config(changes)`` again (``torch_reduce``): a patch of
    dynamo's config, as a context or a decorator (``dont_skip_tracing``), holds the config
    module's context variables, which do not pickle; its changes are constants."""
    from torch._dynamo.decorators import patch_dynamo_config

    return patch_dynamo_config(changes)


def process_group_of_one(backend: str) -> None:
    """torch.distributed's default group of one process, made on a store of its own (the
    port the session's store listened on may be another process's now), unless one is up."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def distributed_module(group: tuple[str, int], cls: type, *args: Any) -> Any:
    """A ``DistributedDataParallel`` as ``initialised_module`` makes one, after its default
    group (``group``: backend, world size), which its ``__setstate__`` asks for while the
    variables load, before ``library_state`` makes the group again: made first where it is one
    process (a larger one cannot be; the ``__setstate__`` then fails and the model is named)."""
    backend, world_size = group
    if world_size == 1:
        process_group_of_one(backend)
    return initialised_module(cls, *args)


def initialised_module(cls: type, *args: Any) -> Any:
    """A module of ``cls`` as ``Module.__init__`` makes one, before pickle sets its state with
    the class's own ``__setstate__`` (``torch_reduce._initialised_reduce``)."""
    import torch

    module = cls.__new__(cls, *args)
    torch.nn.Module.__init__(module)
    return module


def inference_tensor(make: Callable[..., Any], args: tuple) -> Any:
    """An inference tensor (``torch_reduce``): torch's own rebuild, run in inference mode."""
    import torch

    with torch.inference_mode():
        return make(*args)


def tensor_view(base: Any, dtype: Any, size: tuple, stride: tuple, offset: int,
                bits: tuple[bool, bool] = (False, False)) -> Any:
    """The view of ``base`` (a tensor) as ``dtype`` with these strides and ``bits`` (conjugate,
    negative: ``x.conj()``) (``torch_reduce``), made without autograd: ``_base`` is ``base``, and
    the two share the version counter. Only views torch makes (``view_as_real``,
    ``view_as_complex``) change the dtype; any other is a ``ValueError``."""
    import torch

    with torch.no_grad():
        if dtype == base.dtype:
            view = base.as_strided(size, stride, offset)
        elif base.is_complex() and not dtype.is_complex:
            view = torch.view_as_real(base).as_strided(size, stride, offset)
        elif dtype.is_complex and not base.is_complex():
            pairs = base.as_strided((*size, 2), (*(2 * step for step in stride), 1), 2 * offset)
            view = torch.view_as_complex(pairs)
        else:
            raise ValueError(f"no view of a {base.dtype} tensor is a {dtype} one")
        conjugate, negative = bits
        if view.is_conj() != conjugate:
            view = view.conj()
        if view.is_neg() != negative:
            view = view._neg_view()
        return view


def observed_state(obj: Any, state: tuple[dict, list[tuple[Any, Any, Any]]]) -> None:
    """State setter of a traitlets object with run-time observers (``callbacks``): its own
    ``__setstate__``, then each observer registered again (a ``None`` name: every trait)."""
    import traitlets

    own, observers = state
    obj.__setstate__(own)
    for name, change, handler in observers:
        obj.observe(handler, names=traitlets.All if name is None else name, type=change)


def library_object(module: str, attribute: str, contents: Any = None) -> Any:
    """The object ``attribute`` of library ``module`` in this process (``library_objects``,
    ``singletons.GlobalGenerators``); a container given its session's ``contents`` in place,
    or the contents themselves where this version of the library has no such container."""
    found = getattr(importlib.import_module(module), attribute, None)
    if contents is None:
        return found
    return found if refill(found, contents) else contents


#: The containers ``refill`` gives a session's items in place.
REFILLABLE = (dict, list, set)


def refill(found: Any, contents: Any) -> bool:
    """Give the ``dict``, ``list`` or ``set`` ``found`` the items of ``contents``, in place;
    False (nothing done) where the two are not of one type."""
    if type(found) is not type(contents):
        return False
    if isinstance(found, list):
        found[:] = contents
    else:
        found.clear()
        found.update(contents)
    return True


def array_subclass_state(array: Any, state: tuple) -> None:
    """State setter of an array subclass pickled with its attributes (``storages``): the state
    its class's reduction gave (NumPy's, or the class's own), then the attributes."""
    numpy_state, attributes = state
    array.__setstate__(numpy_state)
    vars(array).update(attributes)


def custom_op(namespace: str, name: str, schema: str, function: Any,
              tags: tuple[str, ...]) -> Any:
    """A ``torch.library.custom_op`` defined again (``torch_reduce``): its ``CustomOpDef``, made
    as ``custom_op`` makes it, before its kernels are registered."""
    import torch
    from torch._library.custom_ops import CustomOpDef

    return CustomOpDef(namespace, name, schema, function,
                       [getattr(torch.Tag, tag) for tag in tags] or None)


def torch_operator(path: tuple[str, ...]) -> Any:
    """``torch.ops`` followed along ``path``: ``("aten", "add", "Tensor")`` is
    ``torch.ops.aten.add.Tensor`` of this process (``torch_reduce._operator_reduce``)."""
    import torch

    found = torch.ops
    for name in path:
        found = getattr(found, name)
    return found


def custom_op_registrations(op: Any, registered: dict[str, Any]) -> None:
    """State setter of a custom operator: each registration made again through its method."""
    for device_type, kernel in registered["kernels"].items():
        op.register_kernel(device_type, kernel)
    if registered["fake"] is not None:
        op.register_fake(registered["fake"])
    backward, setup_context = registered["autograd"]
    if backward is not None:
        op.register_autograd(backward, setup_context=setup_context)
    for dispatch_class, rule in registered["torch_dispatch"].items():
        op.register_torch_dispatch(dispatch_class, rule)
    if registered["vmap"] is not None:
        op.register_vmap(registered["vmap"])
    for device_type, cast_inputs in registered["autocast"].items():
        op.register_autocast(device_type, cast_inputs)


def storage_in_array(array: Any, offset: int, nbytes: int, dtype: str | None) -> Any:
    """A torch storage over the restored NumPy ``array``'s memory (``host_regions``): typed when
    ``dtype`` is given."""
    import warnings

    import numpy
    import torch

    flat = numpy.ndarray((array.nbytes,), numpy.uint8, buffer=array)[offset:offset + nbytes]
    with warnings.catch_warnings():  # a read-only array: the tensor over it was one too
        warnings.simplefilter("ignore", UserWarning)
        storage = torch.from_numpy(flat).untyped_storage()
    if dtype is None:
        return storage
    return torch.storage.TypedStorage(wrap_storage=storage, dtype=getattr(torch, dtype),
                                      _internal=True)


def array_in_storage(storage: Any, dtype: Any, shape: tuple, strides: tuple, offset: int,
                     writeable: bool) -> Any:
    """A NumPy array over the restored torch ``storage`` (``host_regions``)."""
    import torch

    whole = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
    return array_view(whole.numpy(), dtype, shape, strides, offset, writeable)


def cuda_array(key: str, record: dict[str, Any]) -> Any:
    return _current().cuda_array(key, record)


def tensor_grad(tensor: Any, grad: Any) -> None:
    """State setter of a tensor pickled with its gradient (``torch_reduce``): ``.grad`` back, on
    the tensor's device (the two storages are placed one by one: a device that could not take
    one of them holds neither)."""
    if grad.device != tensor.device:
        grad = grad.to(tensor.device)
    tensor.grad = grad


def tensor_hooks(tensor: Any, state: tuple) -> None:
    """State setter of a tensor pickled with its hooks (``torch_reduce``): ``(grad, hooks)``,
    ``hooks`` by attribute (``_backward_hooks`` ...), set as ``register_hook`` leaves them (torch's
    setter installs the dict with autograd)."""
    grad, hooks = state
    if grad is not None:
        tensor_grad(tensor, grad)
    for name, value in hooks.items():
        setattr(tensor, name, value)


def instance_dict(instance: Any, state: dict | None) -> None:
    """State setter of an instance whose ``__getattr__`` forwards (``graph._forwards_attributes``):
    its ``__dict__`` is filled without an attribute lookup on it."""
    if state:
        object.__getattribute__(instance, "__dict__").update(state)


def compiled_function(context: Any, original: Any) -> Any:
    """``torch.compile(original, ...)`` again: ``context`` is the compile context it was made
    with (``torch_reduce``)."""
    return context(original)


def compiled_module(module: Any, packed: tuple) -> None:
    """The state of a module compiled in place (``torch_reduce._with_compiled_call``): its own
    state set as pickle would (through ``setter`` where its reduction named one), then
    ``compiled`` put back as its ``_compiled_call_impl``."""
    state, setter, compiled = packed
    if setter is not None:
        setter(module, state)
    elif state is not None:
        module.__setstate__(state)
    module._compiled_call_impl = compiled


def global_hook_handle(module: str, name: str, hook_id: int, extra: tuple[str | None, ...]) -> Any:
    """The handle of a global hook (``torch_reduce``), on torch's own dicts ``name`` (and
    ``extra``: where ``always_call`` and ``with_kwargs`` marks go) of ``module``."""
    import importlib

    from torch.utils.hooks import RemovableHandle

    owner = importlib.import_module(module)
    handle = RemovableHandle(getattr(owner, name),
                             extra_dict=[getattr(owner, e) for e in extra if e is not None] or None)
    handle.id = hook_id
    RemovableHandle.next_id = max(RemovableHandle.next_id, hook_id + 1)
    return handle


def parametrized_module(base: type, names: tuple[str, ...]) -> Any:
    """An empty module of class ``base`` made parametrized in ``names`` as
    ``register_parametrization`` leaves it (its class replaced by one that injects a property
    per name, torch/nn/utils/parametrize.py); pickle then sets its ``__dict__``
    (``torch_reduce._parametrized_reduce``)."""
    from torch.nn.utils import parametrize

    module = base.__new__(base)
    parametrize._inject_new_class(module)
    for name in names:
        parametrize._inject_property(module, name)
    return module


def recomputed_module(module: Any, state: tuple[dict, tuple[str, ...]]) -> None:
    """State setter of a module whose hooks' weights were left out (``torch_reduce``): its own
    ``__setstate__``, then each weight computed again by its hook, with its autograd graph."""
    attributes, names = state
    module.__setstate__(attributes)
    kinds = recomputing_hooks()
    hooks = {hook_attribute(hook): hook for hook in module._forward_pre_hooks.values()
             if isinstance(hook, kinds)}
    for name in names:
        setattr(module, name, hook_weight(hooks[name], module))


#: torch's forward pre-hooks that set a module attribute from its parameters at every call
#: (torch/nn/utils/spectral_norm.py ``SpectralNorm``, weight_norm.py ``WeightNorm``, prune.py's
#: pruning methods, which set it when applied too): by module.
RECOMPUTING_HOOKS = {"torch.nn.utils.spectral_norm": "SpectralNorm",
                     "torch.nn.utils.weight_norm": "WeightNorm",
                     "torch.nn.utils.prune": "BasePruningMethod"}


def recomputing_hooks() -> tuple[type, ...]:
    """The classes of ``RECOMPUTING_HOOKS`` loaded now."""
    return tuple(hook for module in RECOMPUTING_HOOKS if (hook := _hook_class(module)))


def _hook_class(module: str) -> Any:
    """The ``RECOMPUTING_HOOKS`` class of ``module``, or ``()`` where it is not loaded (an
    ``isinstance`` of nothing)."""
    return getattr(sys.modules.get(module), RECOMPUTING_HOOKS[module], ())


def hook_attribute(hook: Any) -> str | None:
    """The module attribute a ``spectral_norm``/``weight_norm`` hook or a pruning method sets."""
    pruning = isinstance(hook, _hook_class("torch.nn.utils.prune"))
    return getattr(hook, "_tensor_name" if pruning else "name", None)


def hook_weight(hook: Any, module: Any) -> Any:
    """The weight such a hook computes from ``module`` (a spectral norm without its power
    iteration)."""
    if isinstance(hook, _hook_class("torch.nn.utils.prune")):
        return hook.apply_mask(module)
    if isinstance(hook, _hook_class("torch.nn.utils.spectral_norm")):
        return hook.compute_weight(module, do_power_iteration=False)
    return hook.compute_weight(module)


def optimizer_state(optimizer: Any, state: tuple) -> None:
    """State setter of an optimizer (``torch_reduce``): torch's own ``__setstate__`` with the
    whole state, then, when an LR scheduler had wrapped its ``step``, the wrapper again, as
    ``LRScheduler.__init__``'s ``patch_track_step_called`` makes it (torch/optim/
    lr_scheduler.py): it marks the optimizer ``_opt_called`` and calls the class's ``step``;
    ``_opt_called`` as it was. ``state``: ``(state, called, wrapped)``; a snapshot written
    before ``wrapped`` existed holds ``(state, called)`` of a wrapped optimizer."""
    import functools
    import weakref

    from .torch_reduce import LR_SCHEDULER_MARK

    torch_state, called, *rest = state
    optimizer.__setstate__(torch_state)
    if called:
        optimizer._opt_called = True
    if rest and not rest[0]:
        return
    reference = weakref.ref(optimizer)
    func = optimizer.step.__func__

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        opt = reference()
        opt._opt_called = True
        return func.__get__(opt, opt.__class__)(*args, **kwargs)

    setattr(wrapper, LR_SCHEDULER_MARK, True)
    optimizer.step = wrapper


def script_module(archive: bytes, tensors: dict[str, Any],
                  own: dict[str, dict[str, Any]] | None = None) -> Any:
    """A TorchScript module loaded from its ``torch.jit.save`` archive, its parameter and buffer
    slots given ``tensors`` and its wrappers (by submodule path, "" the root) the Python
    attributes ``own`` (``torch_reduce._script_module_reduce``). Loaded onto the device those
    tensors came back on, when they share one (what else the archive holds, constants of a
    traced graph, must sit with them)."""
    import io

    import torch

    devices = {tensor.device for tensor in tensors.values()}
    if len(devices) == 1:
        location = devices.pop()
    else:
        location = None if torch.cuda.is_available() else "cpu"
    module = torch.jit.load(io.BytesIO(archive), map_location=location)
    for name, tensor in tensors.items():
        owner, leaf = script_slot(module, name)
        setattr(owner, leaf, tensor)
    for path, attributes in (own or {}).items():
        wrapper = script_submodule(module, path)
        for name, value in attributes.items():
            setattr(wrapper, name, value)
    return module


def script_slot(module: Any, name: str) -> tuple[Any, str]:
    """The submodule of ``module`` that holds the slot ``name`` ("encoder.layer.weight"), and
    the slot's own name."""
    path, _, leaf = name.rpartition(".")
    return script_submodule(module, path), leaf


def script_submodule(module: Any, path: str) -> Any:
    """The submodule of ``module`` at ``path`` ("encoder.layer"; "" is ``module``):
    ScriptModules have no ``get_submodule``."""
    for part in path.split(".") if path else ():
        module = getattr(module, part)
    return module


def exported_program(archive: bytes, state: dict[str, Any]) -> Any:
    """A ``torch.export`` program from its archive, with its state dict's own tensors
    (``torch_reduce._exported_program_reduce``)."""
    import io

    import torch

    program = torch.export.load(io.BytesIO(archive))
    program._state_dict.update(state)
    return program


def script_function(archive: bytes) -> Any:
    """A scripted function again: the ``forward`` of the module ``torch.jit.save`` wrapped it in."""
    import io

    import torch

    return torch.jit.load(io.BytesIO(archive)).forward
