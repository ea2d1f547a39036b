"""Attributes the session set on library classes and modules: found at checkpoint, set again at
resume.

A call such as ``tqdm.pandas()`` (tqdm/std.py) sets ``DataFrame.progress_apply`` and friends on
pandas' classes; a cell may set ``torch.Tensor.__repr__ = mine`` or ``json.dumps = my_dumps``. A
fresh kernel imports those libraries as they ship, so without this entry the attributes are gone
after a resume (``AttributeError`` in the next cell) and nothing says so.

What counts (``find_patches``), in every loaded module but ``__main__``, this product's own and
the session's own modules (``local_modules`` carries all of theirs):

- on each class the module defines at its top level (made by a call, such as pyplot's
  ``backend_mod``, it is made again in a fresh kernel): an attribute whose value is a class or a
  function (or a ``classmethod``, ``staticmethod`` or ``property`` over one) defined in the
  notebook (``__main__``); or a function, not a dunder, defined in another distribution than the
  class's, on a class outside the standard library, unless the class's distribution requires the
  function's (with any extra): the standard library makes the methods of namedtuples, enums and
  dataclasses, and a library's classes use its dependencies' decorators (huggingface_hub's strict
  dataclasses in transformers, pyparsing in matplotlib, typing_extensions' ``deprecated`` in
  torch);
- on each such class, too: an object that holds a class or function of the notebook in its own
  attributes (pandas' accessor descriptor, which ``register_dataframe_accessor`` sets);
- on the module itself: a function or class defined in the notebook (the module's other foreign
  functions are its own imports);
- on ``builtins``, also data (``builtins.DEBUG = True``, which every module then sees): it keeps
  no state of its own that changes.

Those present before the session's first code ran (``remember_baseline``: the kernel's own
machinery) do not count, nor what this product sets. Data attributes (numbers, strings) set on
a library are not found here: nothing in the objects tells them from the library's own values
(``builtins`` aside); ``library_values`` finds those the cells assigned, from their text.

At resume (``_restore_patches``, after the variables): each attribute is set again on its owner
(its module imported if the resume has not: the session had it) unless the owner already has that
value or one of the same origin (module and qualified name: a library that patches another when it
is imported did it again when the resume imported it). An owner that cannot be found, or a value
that could not be pickled at checkpoint, is named.

Cost (measured in docs/core.md): the first walk (the baseline, at the session's first code) reads
every class of every loaded module; each later one reads only the modules and classes that
CPython's version tags say changed since (``_candidates``), where they can be read
(``cpython_versions``: CPython through 3.13 for modules, from 3.11 for classes); nothing is
imported at checkpoint.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import re
import sys
import types
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from .cpython_versions import class_version, dict_version

#: Packages whose patches are the product's own (set again when the extension loads).
OWN = frozenset({"kernel_hooks", "jupyter_gkeresume"})
NOTEBOOK = "__main__"
#: Origins that are never a patch on a library's class (the standard library's: see the module
#: docstring; this product's own).
NOT_PATCHES = frozenset(sys.stdlib_module_names) | OWN


@dataclass(frozen=True)
class Patch:
    """``owner`` (a module, or a class of it by qualified name) has ``attribute`` = ``value``."""

    module: str
    owner: str | None  # a class's qualified name in ``module``; None: the module itself
    attribute: str
    value: Any

    @property
    def label(self) -> str:
        where = f"{self.module}.{self.owner}" if self.owner else self.module
        return f"{where}.{self.attribute}"


_baseline: set[tuple[str, str | None, str, int]] = set()


def remember_baseline_before_code(shell: Any) -> None:
    """Take the baseline just before the first code the kernel runs (IPython's ``pre_execute``,
    which every cell triggers, silent ones included), not when the extension loads: the walk
    over every loaded class (10-20 ms) stays off the kernel's start (issue 31), and no code of
    the session has run yet then. A checkpoint's capture takes it too, whichever comes first."""
    if _baseline:
        return

    def first_code(*_: Any) -> None:
        shell.events.unregister("pre_execute", first_code)
        remember_baseline()

    shell.events.register("pre_execute", first_code)


def remember_baseline() -> None:
    """The attributes of this kind present now are the kernel's own (idempotent)."""
    if not _baseline:  # candidates, not patches: no distribution metadata read at load
        _baseline.update(_key(p) for p in _candidates())
        _baseline.add(("", None, "", 0))  # taken, even when empty


def _key(patch: Patch) -> tuple[str, str | None, str, int]:
    return patch.module, patch.owner, patch.attribute, id(patch.value)


def _function(value: Any) -> Any:
    """The function a method-like attribute is made of, or None (``type(value)``, never
    ``isinstance``: a deprecated object's ``__class__`` warns when it is read)."""
    kind = type(value)
    if kind is classmethod or kind is staticmethod:
        value = value.__func__
    elif kind is property:
        value = value.fget
    return value if type(value) is types.FunctionType else None


def _is_class(value: Any) -> bool:
    kind = type(value)
    return kind is type or issubclass(kind, type)


def _package(name: Any) -> str | None:
    return name.partition(".")[0] if isinstance(name, str) else None


@functools.cache
def _distributions() -> dict[str, list[str]]:
    """Top-level package -> distributions (read once per kernel, and only when needed)."""
    return metadata.packages_distributions()


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def _requires(distribution: str) -> frozenset[str]:
    """What ``distribution`` requires, with any of its extras (names normalized; markers are not
    evaluated: a requirement for some platform or extra counts)."""
    try:
        requirements = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return frozenset()
    return frozenset(_normalized(re.match(r"[A-Za-z0-9._-]*", r).group()) for r in requirements)


def _own_making(owner: str, origin: str) -> bool:
    """Whether a function of package ``origin`` on a class of package ``owner`` is how the
    owner's distribution is built (see the module docstring), not a patch."""
    owners = {_normalized(d) for d in _distributions().get(owner, [])}
    origins = {_normalized(d) for d in _distributions().get(origin, [])}
    return bool(owners & origins) or any(origins & _requires(d) for d in owners)


_FUNCTION = types.FunctionType
#: The kinds of most module attributes besides functions: known not to be classes (no
#: ``issubclass`` call for them).
_NOT_CLASSES = frozenset({types.ModuleType, types.BuiltinFunctionType, str, int, float, bool,
                          dict, list, tuple, set, frozenset, type(None), bytes})


def find_patches(*, remembered: bool = True) -> list[Patch]:
    """The session's attributes on library classes and modules (see the module docstring), in
    import order; ``remembered``: leave out those of the baseline, first, so that the
    distributions' metadata (``_own_making``) is read only for what the session added."""
    found = _candidates()
    if remembered and _baseline:
        found = [p for p in found if _key(p) not in _baseline]
    return [p for p in found if not _library_made(p)]


def _library_made(patch: Patch) -> bool:
    """Whether a candidate is how its class's distribution is built (a function of another
    package on a library class, which that class's distribution requires): not a patch."""
    origin = _origin(patch.value)[0]
    return (patch.owner is not None and origin != NOTEBOOK and not _wraps_notebook_code(patch.value)
            and _own_making(_package(patch.module), _package(origin)))


def _candidates() -> list[Patch]:
    """Every attribute ``find_patches`` may count, before the distributions are asked whether a
    library's class got a function of another package from its own making (cheap: no metadata).

    A module's dict and a class's attributes that CPython says did not change since the last
    walk (``cpython_versions``) are not read again: what they gave then is asked again only
    where it depends on something else (whether a module is loaded, what an object on the class
    holds). A function's or a class's ``__module__`` is taken as it was when the module holding
    it was last read (a cell does not rename them; it sets them on a module or class, which is
    then read again)."""
    from .local_modules import local_modules  # their every attribute travels there

    found = []
    notebook = sys.modules.get(NOTEBOOK)
    session_own = local_modules()
    walked: dict[str, _ModuleSeen] = {}
    for name, module in list(sys.modules.items()):
        package = _package(name)
        if (package in OWN or module is notebook or not isinstance(module, types.ModuleType)
                or name in session_own):
            continue
        if module is builtins:
            found.extend(_builtins_data(vars(module)))
        seen = walked[name] = _ModuleSeen.current(name, vars(module), _last_walk.get(name))
        found.extend(seen.notebook_code)
        for held in seen.classes:
            version = class_version(held.owner)  # before reading: a change meanwhile shows next time
            if not version or version != held.version:
                held.version, held.candidates = version, _class_candidates(name, package, held.owner)
            for attribute, value, condition in held.candidates:
                if condition is None or (condition.now(value) if type(condition) is _Holding
                                         else condition in sys.modules):
                    found.append(Patch(name, held.owner.__qualname__, attribute, value))
    _last_walk.clear()  # what is gone from sys.modules is let go
    _last_walk.update(walked)
    return found


@dataclass(slots=True)
class _ModuleSeen:
    """What a module's own attributes gave at a walk, valid while its dict keeps ``version``
    (the dict held: its id is not reused meanwhile)."""

    attributes: dict
    version: int
    notebook_code: list[Patch]  # the notebook's functions and classes on the module
    classes: list[_ClassSeen]  # those the module defines at its top level

    @classmethod
    def current(cls, name: str, attributes: dict, last: _ModuleSeen | None) -> _ModuleSeen:
        """``last`` where the dict did not change since, else what the dict gives now (a class
        ``last`` held keeps its record; a new one is not read yet). Modules change their
        globals as they run (caches, counters): their classes are not read again for that."""
        version = dict_version(attributes)  # before reading: a change meanwhile shows next time
        if last is not None and last.attributes is attributes and version and last.version == version:
            return last
        known = {id(held.owner): held for held in last.classes} if last is not None else {}
        notebook_code, classes = [], []
        for attribute, value in list(attributes.items()):
            kind = type(value)
            if kind is types.FunctionType:
                if value.__module__ == NOTEBOOK:
                    notebook_code.append(Patch(name, None, attribute, value))
            elif kind is type or (kind not in _NOT_CLASSES and issubclass(kind, type)):
                if value.__module__ == name and "<locals>" not in value.__qualname__:
                    classes.append(known.get(id(value)) or _ClassSeen(value, 0, ()))
                elif value.__module__ == NOTEBOOK:
                    notebook_code.append(Patch(name, None, attribute, value))
        return cls(attributes, version, notebook_code, classes)


@dataclass(slots=True)
class _ClassSeen:
    """A library class's candidates, valid while CPython's version of the class stays
    ``version`` (0: not read yet; the class held: its id is not reused meanwhile); the walk
    reads the class again, in place, when it changed."""

    owner: type
    version: int
    candidates: tuple[tuple[str, Any, Any], ...]  # (attribute, value, condition): see below


#: The last walk's modules, by name.
_last_walk: dict[str, _ModuleSeen] = {}


def _builtins_data(names: dict[str, Any]) -> list[Patch]:
    """The data names on ``builtins`` (``builtins.DEBUG = True``: every module sees it): unlike a
    library, ``builtins`` keeps no state of its own that changes, so what is not in the baseline
    is the session's. Callables are left to the rules above: the kernel's own machinery swaps
    ``input`` for ipykernel's at every request."""
    return [Patch("builtins", None, attribute, value) for attribute, value in list(names.items())
            if attribute not in _BUILTINS_AT_START and not attribute.startswith("__")
            and attribute != "_" and not callable(value) and type(value) is not types.ModuleType]


#: The names ``builtins`` has as the extension loads (``None``, ``Ellipsis``, ``copyright``...).
_BUILTINS_AT_START = frozenset(vars(builtins))


def _class_candidates(module: str, package: str | None,
                      cls: type) -> tuple[tuple[str, Any, Any], ...]:
    """The candidates on ``cls`` (of ``module``, in ``package``), each as ``(attribute, value,
    condition)``: it counts if the condition is None, if it is a ``_Holding`` and the value holds
    the notebook's code, if it names a module and that module is loaded (see ``_candidates``).
    Inlined type tests, no call per attribute: the common case, a method defined in the class's
    own module, costs a type check and one comparison (this runs over every class that changed
    of every loaded module)."""
    found = []
    library = package not in sys.stdlib_module_names
    for attribute, value in list(vars(cls).items()):
        kind = type(value)
        if kind is _FUNCTION:
            origin = value.__module__
        elif kind is classmethod or kind is staticmethod or kind is property:
            function = _function(value)
            if function is None:
                continue
            origin = function.__module__
        else:
            if kind in _PLAIN_ATTRIBUTES:
                continue
            if kind is type or issubclass(kind, type):
                if value.__module__ == NOTEBOOK:
                    found.append((attribute, value, None))
            elif type(_own_dict(value)) is dict:  # without one, it holds nothing
                found.append((attribute, value, _Holding()))
            continue
        if origin == module:
            continue
        if origin == NOTEBOOK:
            found.append((attribute, value, None))
        elif library and not attribute.startswith("__") and _foreign(package, origin):
            found.append((attribute, value, origin))
    return tuple(found)


@dataclass(slots=True)
class _Holding:
    """The condition of a candidate that counts while its own dict holds the notebook's code
    (``_wraps_notebook_code``), answered again only when that dict changed: ``holds`` as of
    ``attributes`` (held, so its id is not reused) at ``version`` (0: not known, ask again).
    Most such candidates are enum members (a torch session has 3,500 on library classes, most
    of cuda.bindings'), asked at every walk."""

    attributes: Any = None
    version: int = 0
    holds: bool = False

    def now(self, value: Any) -> bool:
        attributes = _own_dict(value)
        version = dict_version(attributes)  # before reading: a change meanwhile shows next time
        if not version or version != self.version or attributes is not self.attributes:
            self.attributes, self.version = attributes, version
            self.holds = _holds_notebook_code(attributes)
        return self.holds


#: The kinds of most class attributes that are neither functions nor classes: descriptors of
#: built-in types, data (no ``issubclass`` call, no look inside them).
_PLAIN_ATTRIBUTES = _NOT_CLASSES | frozenset({
    types.MemberDescriptorType, types.GetSetDescriptorType, types.WrapperDescriptorType,
    types.MethodDescriptorType, types.ClassMethodDescriptorType, types.MethodWrapperType,
    staticmethod, classmethod, property})


def _wraps_notebook_code(value: Any) -> bool:
    """Whether an object set on a library class holds, in its own attributes, a class or function
    of the notebook: what ``pd.api.extensions.register_dataframe_accessor("geo")`` sets on
    ``DataFrame`` (pandas' accessor descriptor over the notebook's class). It was lost at the
    resume while the verdict said ``exact``."""
    return _holds_notebook_code(_own_dict(value))


def _holds_notebook_code(attributes: dict | types.MappingProxyType | None) -> bool:
    """Whether an object's own dict (``_own_dict``) holds a class or function of the notebook."""
    return type(attributes) is dict and any(
        (type(held) is _FUNCTION or isinstance(held, type)) and held.__module__ == NOTEBOOK
        for held in list(attributes.values()))


def own_attributes(value: Any) -> dict | types.MappingProxyType:
    """``value``'s own ``__dict__`` (a class's: its mapping proxy), read without running its
    class's code (no ``__getattribute__``, property or ``__getattr__``), or {} where it has none
    or refuses even this (pydantic raises on a bare ``BaseModel``, a dead weak proxy too)."""
    attributes = _own_dict(value)
    return {} if attributes is None else attributes


def _own_dict(value: Any) -> dict | types.MappingProxyType | None:
    """``own_attributes``, but None where there are none."""
    try:
        attributes = object.__getattribute__(value, "__dict__")
    except Exception:
        return None
    return attributes if isinstance(attributes, (dict, types.MappingProxyType)) else None


def _foreign(package: str | None, origin: Any) -> bool:
    """Whether a function of module ``origin`` on a class of ``package`` may be a patch (a
    module of another package, outside the standard library; it counts while that module is
    loaded; ``_library_made`` then asks the distributions)."""
    top = _package(origin)
    return top is not None and top != package and top not in NOT_PATCHES


def _patches() -> Any:
    """The state: the patches whose values pickle, and the labels of those that do not."""
    from .graph import why_not_whole  # at the first checkpoint, not at the extension's load

    remember_baseline()
    kept, lost = [], {}
    for patch in find_patches():
        why = why_not_whole(patch.value)
        if why is None:
            kept.append(patch)
        else:  # reported at resume: the attribute will be missing there
            lost[patch.label] = why
    return {"patches": kept, "lost": lost} if kept or lost else None


def _origin(value: Any) -> tuple[Any, Any]:
    function = _function(value) or value
    return getattr(function, "__module__", None), getattr(function, "__qualname__", None)


def _owner(patch: Patch) -> Any:
    target = sys.modules.get(patch.module) or importlib.import_module(patch.module)
    for part in (patch.owner or "").split(".") if patch.owner else ():
        target = getattr(target, part)
    return target


#: The labels of the attributes the last restore set again (for measurements: the others were
#: there already).
set_again: list[str] = []


def _restore_patches(state: dict[str, Any]) -> str | None:
    missing = [f"{label} ({why})" for label, why in state["lost"].items()]
    set_again.clear()
    for patch in state["patches"]:
        try:
            owner = _owner(patch)
        except Exception as exc:  # a module or class of the session not found here
            missing.append(f"{patch.label} ({type(exc).__name__}: {exc})")
            continue
        current = vars(owner).get(patch.attribute)
        if current is patch.value or (current is not None and _origin(current)[0] is not None
                                      and _origin(current) == _origin(patch.value)):
            continue
        setattr(owner, patch.attribute, patch.value)
        set_again.append(patch.label)
    return f"not set again: {', '.join(missing)}" if missing else None


ENTRIES = (("attributes set on libraries", _patches, _restore_patches),)
