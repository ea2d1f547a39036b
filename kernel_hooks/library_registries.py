"""The ``library registries`` ``interpreter_state`` entry: entries of a library's registries
that hold the notebook's classes and functions, found at checkpoint, put back at resume.

A notebook registers its classes with a library by calling it (``AutoModel.register(Config,
Model)``, ``torch.serialization.add_safe_globals([Box])``, ``pytree.register_pytree_node(Pair,
...)``, ``register_extension_dtype``); the library keeps them in a dict, list or set of its
module, or of an object or class of its module (transformers' ``MODEL_MAPPING._extra_content``).
A fresh process has the library's own entries only, and nothing in the notebook's objects says
they were registered.

``capture()``: the candidates are the classes and functions of the session (defined in the
notebook or its own modules: ``library_state.the_sessions``) its namespace and its own modules
hold. One ``gc.get_referrers`` pass finds the plain dicts, lists and sets that hold one; a walk of
the loaded library modules (``_registries``: each module's attributes, and the attributes of the
objects and classes it defines, read from their ``__dict__``: no property or ``__getattr__``
runs) names those that are a library's: ``(module, attribute chain, kind, entries)``, the entries
that hold a candidate (for a dict, its key or value) and are made of definitions only
(``_definition``: a cache keyed by the notebook's class, torch.jit's, is not a registry). Not
the session's own modules, this product's, IPython's (``ipython_state`` carries what the
notebook registered there), nor the registries other entries carry (``copyreg``'s dispatch
table, torch's global hooks). At resume (after the variables: the candidates are the restored
classes) ``restore_registries`` imports each module again where the resume has not, finds the
registry by its chain, and puts the entries back (a dict's key set, a list's item appended and
a set's added unless there already); a registry this kernel lacks is named with how many
entries it held.

Invariant: nothing is imported at capture, and with no candidate, or none that a dict, list or
set outside the namespaces holds, nothing is walked (the walk took 0.12 s with torch,
transformers and pandas loaded, about 3,000 modules).
"""

from __future__ import annotations

import collections
import functools
import gc
import importlib
import sys
import types
import weakref
from typing import Any

from . import local_modules
from .ipython_state import the_shell
from .library_patches import OWN, own_attributes
from .library_state import the_sessions

#: The registries' kinds, by exact type (a dict subclass of the notebook is no registry).
_KINDS = {dict: "dict", collections.OrderedDict: "dict", collections.defaultdict: "dict",
          list: "list", set: "set"}
#: Top-level packages whose registries this entry leaves alone (see the module docstring).
_NOT_HERE = frozenset({"__main__", "builtins", "sys", "copyreg", "IPython", "ipykernel",
                       "traitlets", "jupyter_client", "comm"}) | {name.partition(".")[0]
                                                                      for name in OWN}
_ATTRIBUTE_SKIP = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                   *weakref.ProxyTypes)

_LITERALS = frozenset({type(None), bool, int, float, complex, str, bytes})

Registry = tuple[str, tuple[str, ...], str, list]


def _candidates() -> tuple[list[Any], list[dict]]:
    """The session's classes and functions, and the namespaces they were found in (the
    notebook's and its own modules')."""
    shell = the_shell()
    spaces = [shell.user_ns] if shell is not None else []
    spaces += [vars(sys.modules[name]) for name in local_modules.local_modules()
               if name in sys.modules]
    found: dict[int, Any] = {}
    for space in spaces:
        for value in list(space.values()):
            # type(), not isinstance: that reads __class__ (a dead weak proxy raises)
            if issubclass(type(value), (type, types.FunctionType)) and the_sessions(value):
                found[id(value)] = value
    return list(found.values()), spaces


def capture() -> list[Registry] | None:
    candidates, spaces = _candidates()
    if not candidates:
        return None
    ids = {id(candidate) for candidate in candidates}
    ours = {id(candidates), *(id(space) for space in spaces)}
    held = {id(r): r for r in gc.get_referrers(*candidates)
            if type(r) in _KINDS and id(r) not in ours}
    if not held:
        return None
    registries = []
    for module, chain, registry in _registries(held, ours):
        if _KINDS[type(registry)] == "dict":
            entries = [(k, v) for k, v in list(registry.items())
                       if (id(k) in ids or id(v) in ids) and _definition((k, v))]
        else:
            entries = [item for item in list(registry) if id(item) in ids]
        if entries:
            registries.append((module, chain, _KINDS[type(registry)], entries))
    return registries or None


def _definition(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is made of definitions only: classes, functions (also in a
    ``functools.partial``), literals, and tuples (named ones too), lists, sets and dicts of
    those. A registry maps to definitions (pytree's ``NodeDef`` of a class and two functions);
    a cache maps to what the library computed from them (torch.jit's store of each scripted
    class's ``ConcreteModuleType``), which it computes again, and which may not pickle."""
    kind = type(value)
    if kind in _LITERALS or issubclass(kind, (type, types.FunctionType, types.BuiltinFunctionType)):
        return True
    if depth > 3:
        return False
    if kind is functools.partial:
        return _definition((value.func, value.args, value.keywords), depth + 1)
    if issubclass(kind, dict):
        return all(_definition(item, depth + 1) for item in value.items())
    if issubclass(kind, (tuple, list, set, frozenset)):
        return all(_definition(item, depth + 1) for item in value)
    return False


def _registries(held: dict[int, Any], ours: set[int]) -> list[tuple[str, tuple[str, ...], Any]]:
    """``(module, chain, registry)`` for each of ``held`` (containers by id) a library module
    holds as an attribute, or as an attribute of an object or class it holds; not in a module
    whose namespace is one of ``ours`` (the notebook's, also as ``__mp_main__``)."""
    skip = _carried_elsewhere()
    local = local_modules.local_modules()
    found: dict[int, tuple[str, tuple[str, ...], Any]] = {}
    for name, module in list(sys.modules.items()):
        if (not isinstance(module, types.ModuleType) or name.partition(".")[0] in _NOT_HERE
                or name in local or id(own_attributes(module)) in ours):
            continue
        for attribute, value in list(own_attributes(module).items()):
            if id(value) in held:
                found.setdefault(id(value), (name, (attribute,), value))
                continue
            kind = type(value)  # not isinstance: it reads __class__, which may run code
            if issubclass(kind, _ATTRIBUTE_SKIP) or kind in _KINDS:
                continue
            if issubclass(kind, type) and own_attributes(value).get("__module__") != name:
                continue  # a class another module defines: walked there
            for inner_name, inner in list(own_attributes(value).items()):
                if id(inner) in held:
                    found.setdefault(id(inner), (name, (attribute, inner_name), inner))
    return [entry for key, entry in found.items() if key not in skip]


def _carried_elsewhere() -> set[int]:
    """The registries other entries carry: torch's global hooks (``library_state``)."""
    from .torch_reduce import loaded_global_hooks

    return {id(hooks) for _, _, hooks in loaded_global_hooks()}


def restore_registries(registries: list[Registry]) -> str | None:
    """Put each registry's entries back (see the module docstring); what could not be, named."""
    missing = []
    for module_name, chain, kind, entries in registries:
        try:
            registry: Any = importlib.import_module(module_name)
            for attribute in chain:
                registry = getattr(registry, attribute)
        except (ImportError, AttributeError):
            registry = None
        if _KINDS.get(type(registry)) != kind:
            where = ".".join((module_name, *chain))
            missing.append(f"{where} ({len(entries)} entries: no such registry here)")
            continue
        for entry in entries:
            if kind == "dict":
                registry[entry[0]] = entry[1]
            elif kind == "set":
                registry.add(entry)
            elif not any(item is entry for item in registry):
                registry.append(entry)
    return f"not restored: {', '.join(missing)}" if missing else None


ENTRIES = (("library registries", capture, restore_registries),)
