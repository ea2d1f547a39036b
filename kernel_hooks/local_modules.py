"""The state of the session's own modules: ``import mycfg`` from the notebook's folder, then
``mycfg.lr = 0.1`` or ``mycfg.items.append(3)``. A fresh kernel re-imports ``mycfg.py`` as it is on
disk, so without this entry those values are back to the file's after a resume and nothing
says so.

What counts (``local_modules``): a module imported in the session (not in ``sys.modules`` when the
extension loaded, ``remember_baseline``), whose ``__file__`` is Python source outside every
library root (the interpreter's prefixes, site-packages and the standard library), in a
top-level package that counts too, and not this product's own. Editable installs under
development count: they are the user's code too.

What travels, per module: every attribute but dunders, modules, and the functions and classes
the module defines under their own name (the import makes them again; an attribute that names
one of them under another name travels, by reference); and the class attributes of those
classes (``Config.lr = 0.2``), but their methods and dunder and ``_sunder_`` names. Each value
is tried alone first (``graph.why_not_whole``): one that would not come back whole (a lock, an
open connection) is not carried but noted with its type.

At resume (after the variables, so ``settings is mycfg.items`` holds when a variable named it):
each module is imported (the resume's ``sys.path`` and cwd are already back) and, where its file
is the one the checkpoint saw (by digest), its attributes are set; a file edited during the
pause wins, and the module is named. So is one whose file was edited after the session imported
it and before the checkpoint (no ``importlib.reload``): the session ran the code it imported,
the resumed kernel runs the file's (``_code_changed``: the file compiled again, each function
and method the module holds compared with it, line numbers aside; Python 3.11+). A class
attribute equal to the one the import made is left as the import made it. A noted value is
named only where the fresh import did not make an attribute of that type again: a module-level
lock comes back with the import and is not named; a lock or connection the session made and
set there is named, and the resume is not exact.

Cost at checkpoint: one pass over ``sys.modules`` where it changed since the last (each module
judged once); values are pickled only for the session's own modules (twice: the dry run, then
the graph), and their files are read for the digest.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import sys
import types
from typing import Any

from .cpython_versions import dict_version
from .library_patches import OWN, _function

_baseline: set[str] = set()


def remember_baseline() -> None:
    """The modules loaded now are the kernel's own (idempotent; a checkpoint takes it too when
    no kernel loaded the extension)."""
    if not _baseline:
        _baseline.update(sys.modules)


@functools.cache
def _library_roots() -> tuple[str, ...]:
    import site  # at the first checkpoint, not at the extension's load (issue 31)
    import sysconfig

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             *site.getsitepackages(), site.getusersitepackages(),
             *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))}
    return tuple({os.path.join(form(r), "") for r in roots if r
                  for form in (os.path.abspath, os.path.realpath)})


def _is_local_file(path: str) -> bool:
    roots = _library_roots()
    if path.startswith(roots):
        return False
    path = os.path.realpath(path)
    return "site-packages" not in path and not path.startswith(roots)


def _is_local(name: str, module: Any) -> bool:
    """``__main__`` is the namespace's (multiprocessing names it ``__mp_main__`` too). A
    submodule counts only within a package that counts: code a library generates and loads
    under its own name from a cache outside its roots (inductor's
    ``torch._inductor.runtime.compile_tasks.<hash>`` from /tmp/torchinductor_*) is the library's."""
    top = name.partition(".")[0]
    if name in _baseline or module is sys.modules.get("__main__") or top in OWN:
        return False
    path = getattr(module, "__dict__", {}).get("__file__")
    if not (isinstance(path, str) and path.endswith(".py") and _is_local_file(path)):
        return False
    package = sys.modules.get(top)
    return top == name or (package is not None and _is_local(top, package))


#: name -> (module, whether it is the session's own), for the modules in ``sys.modules``: a
#: session that imports torch adds some 2,500 modules, judged once (7 ms), not at every
#: checkpoint; a module gone from ``sys.modules`` is let go at the next ``local_modules()``.
_judged: dict[str, tuple[Any, bool]] = {}


def local_modules() -> dict[str, types.ModuleType]:
    """The session's own modules (see the module docstring), by name (the last answer again
    while ``sys.modules`` did not change since: a checkpoint asks three times)."""
    remember_baseline()
    version = dict_version(sys.modules)  # before reading: a change meanwhile shows next time
    if version and _last_found[0] == version:
        return dict(_last_found[1])
    loaded = list(sys.modules.items())
    found = {name: module for name, module in loaded if _judge(name, module)}
    if len(_judged) > len(loaded):  # every loaded name is in it: the rest are gone
        names = dict(loaded)
        for gone in [name for name in _judged if name not in names]:
            del _judged[gone]
    _last_found[:] = [version, found]
    return dict(found)


#: ``sys.modules``' version (``cpython_versions.dict_version``) at the last ``local_modules()``,
#: and what it found.
_last_found: list[Any] = [0, {}]


def is_local_module(name: str) -> bool:
    """Whether module ``name`` is one of ``local_modules()`` (without a pass over them all)."""
    remember_baseline()
    module = sys.modules.get(name)
    return module is not None and _judge(name, module)


def _judge(name: str, module: Any) -> bool:
    seen = _judged.get(name)
    if seen is None or seen[0] is not module:
        seen = _judged[name] = (module, isinstance(module, types.ModuleType)
                                and _is_local(name, module))
    return seen[1]


def _defined_here(module: str, name: str, value: Any) -> bool:
    """A function or class the module's code makes under this name (its import makes it
    again), or the method-like wrapper of one."""
    kind = type(value)
    if kind is classmethod or kind is staticmethod:
        value = value.__func__
    elif kind is property:
        value = value.fget
    return (isinstance(value, type | types.FunctionType) and value.__module__ == module
            and value.__qualname__.rpartition(".")[2] == name.rpartition(".")[2])


def _attributes(name: str, module: types.ModuleType) -> list[tuple[str, Any]]:
    """(path, value) of what may have been set in the session: the module's attributes and the
    class attributes of the classes it defines, by dotted path, without dunders and ``_sunder_``
    names (Enum's), modules and what the import makes again."""
    found = []
    for attribute, value in list(vars(module).items()):
        if attribute.startswith("__") or isinstance(value, types.ModuleType):
            continue
        if not _defined_here(name, attribute, value):
            found.append((attribute, value))
        elif isinstance(value, type) and value.__qualname__ == attribute:
            found += [(f"{attribute}.{key}", member) for key, member in list(vars(value).items())
                      if not key.startswith("__") and not (key.startswith("_") and key.endswith("_"))
                      and not _defined_here(name, key, member)]
    return found


def _capture() -> Any:
    from .graph import why_not_whole  # at the first checkpoint, not at the extension's load

    carried: dict[str, dict[str, Any]] = {}
    noted: dict[str, dict[str, tuple[str, str]]] = {}
    sources: dict[str, str | None] = {}
    stale: list[str] = []
    for name, module in local_modules().items():
        for path, value in _attributes(name, module):
            why = why_not_whole(value)
            if why is None:
                carried.setdefault(name, {})[path] = value
            else:
                noted.setdefault(name, {})[path] = (type(value).__qualname__, why)
        if _code_changed(name, module):
            stale.append(name)
        if name in carried or name in noted or name in stale:
            sources[name] = _source_digest(module)
    if not sources:
        return None
    return {"modules": carried, "noted": noted, "sources": sources, "stale": stale}


def _code_changed(name: str, module: types.ModuleType) -> bool:
    """Whether a function or method the module holds (``_defined_here``) is no longer what its
    file compiles to now, or gone from it: the file was edited after the import. Judged once
    per module object and file state (path, size, mtime)."""
    path = module.__file__
    if sys.version_info < (3, 11):  # no ``co_qualname`` to match code objects by
        return False
    try:
        stat = os.stat(path)
        seen = (id(module), path, stat.st_size, stat.st_mtime_ns)
        if _compared.get(name, (None,))[0] == seen:
            return _compared[name][1]
        with open(path, "rb") as f:
            source = f.read()
    except OSError:
        return False  # gone: the resume's import names it
    try:
        fresh = _code_shapes(compile(source, path, "exec", dont_inherit=True))
    except (SyntaxError, ValueError):
        changed = True
    else:
        changed = any(fresh.get(code.co_qualname) != _shape(code)
                      for code in _held_code(name, module) if code.co_filename == path)
    _compared[name] = (seen, changed)
    return changed


#: module name -> ((module id, path, size, mtime), whether its code changed) of the last look.
_compared: dict[str, tuple[tuple, bool]] = {}


def _held_code(name: str, module: types.ModuleType) -> list[types.CodeType]:
    """The code of the functions and methods ``module`` holds under the names it defines
    them by (``_defined_here``); those its file made are compared (a dataclass's ``__init__``
    comes from a string)."""
    found = []
    for attribute, value in list(vars(module).items()):
        if not _defined_here(name, attribute, value):
            continue
        members = list(vars(value).values()) if isinstance(value, type) else [value]
        for member in members:
            function = _function(member)
            if function is not None and function.__module__ == name:
                found.append(function.__code__)
    return found


def _code_shapes(code: types.CodeType) -> dict[str, tuple]:
    """Every code object compiled from a file, by qualified name (``co_qualname``: 3.11+)."""
    found = {}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found[const.co_qualname] = _shape(const)
            found.update(_code_shapes(const))
    return found


def _shape(code: types.CodeType) -> tuple:
    """What a code object does, without where it stands (line numbers, file name)."""
    return (code.co_code, code.co_names, code.co_varnames, code.co_freevars,
            tuple(_shape(c) if isinstance(c, types.CodeType) else c for c in code.co_consts))


def _source_digest(module: types.ModuleType) -> str | None:
    """The digest of the module's file as it is now (None: unreadable)."""
    try:
        with open(module.__file__, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _owner(module: types.ModuleType, path: str) -> tuple[Any, str]:
    owner, _, attribute = path.rpartition(".")
    return (getattr(module, owner) if owner else module), attribute


def _restore(state: dict[str, Any]) -> str | None:
    missing = []
    for name in dict.fromkeys([*state["modules"], *state["noted"], *state.get("stale", ())]):
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # the file is gone, or raises now: every value of it is named
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
            continue
        if _source_digest(module) != state["sources"][name]:
            missing.append(f"{name} ({module.__file__} changed since the checkpoint: the file's "
                           "values stand)")
            continue
        if name in state.get("stale", ()):
            missing.append(f"{name} ({module.__file__} was edited after the session imported "
                           "it: the session ran the code it had imported, this kernel runs the "
                           "file's)")
        for path, value in state["modules"].get(name, {}).items():
            try:
                owner, attribute = _owner(module, path)
                current = vars(owner).get(attribute, _ABSENT)
                if current is not value and not (owner is not module and _equal(current, value)):
                    setattr(owner, attribute, value)
            except Exception as exc:  # the class is gone from the file, or refuses the value
                missing.append(f"{name}.{path} ({type(exc).__name__}: {exc})")
        for path, (kind, why) in state["noted"].get(name, {}).items():
            try:
                owner, attribute = _owner(module, path)
                fresh = vars(owner).get(attribute, _ABSENT)
            except AttributeError:
                fresh = _ABSENT
            if type(fresh).__qualname__ != kind:
                missing.append(f"{name}.{path} ({why})")
    return f"not set again: {', '.join(missing)}" if missing else None


_ABSENT = object()


def _equal(current: Any, value: Any) -> bool:
    """Whether a class attribute the import made is the one the session had: left alone, so a
    class whose metaclass reacts to assignments (pydantic's, SQLAlchemy's) sees only what the
    session changed."""
    try:
        return bool(current == value)
    except Exception:  # an array's ==, or one that raises: not known equal
        return False


ENTRIES = (("local module state", _capture, _restore),)
