"""The state of the session's own modules: ``import mycfg`` from the notebook's folder, then
``mycfg.lr = 0.1`` or ``mycfg.items.append(3)``. A fresh kernel re-imports ``mycfg.py`` as it is on
disk, so without this entry those values are back to the file's after a resume and nothing
says so.

What counts (``local_modules``): a module imported in the session (not in ``sys.modules`` when the
extension loaded, ``remember_baseline``), whose ``__file__`` is Python source outside every
library root (the interpreter's prefixes, site-packages and the standard library), and not this
product's own. Editable installs under development count: they are the user's code too.

What travels, per module: every attribute but dunders, modules, and the functions and classes
the module defines under their own name (the import makes them again; an attribute that names
one of them under another name travels, by reference). Each value is tried alone first
(``graph.why_not_whole``): one that would not come back whole (a lock, an open connection) is not
carried but noted with its type.

At resume (after the variables, so ``settings is mycfg.items`` holds when a variable named it):
each module is imported (the resume's ``sys.path`` and cwd are already back) and its attributes
set. A noted value is named only where the fresh import did not make an attribute of that type
again (a module-level lock comes back with the import; a connection the session opened and
set does not, and neither is named as exact).

Cost at checkpoint: one pass over ``sys.modules``; values are pickled only for the session's
own modules (twice: the dry run, then the graph).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import types
from typing import Any

from .library_patches import OWN

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
    """``__main__`` is the namespace's (multiprocessing names it ``__mp_main__`` too)."""
    if (name in _baseline or module is sys.modules.get("__main__")
            or name.partition(".")[0] in OWN):
        return False
    path = getattr(module, "__dict__", {}).get("__file__")
    return isinstance(path, str) and path.endswith(".py") and _is_local_file(path)


#: name -> (module, whether it is the session's own), for the modules seen so far: a session
#: that imports torch adds some 2,500 modules, judged once (7 ms), not at every checkpoint.
_judged: dict[str, tuple[Any, bool]] = {}


def local_modules() -> dict[str, types.ModuleType]:
    """The session's own modules (see the module docstring), by name."""
    remember_baseline()
    found = {}
    for name, module in list(sys.modules.items()):
        seen = _judged.get(name)
        if seen is None or seen[0] is not module:
            seen = _judged[name] = (module, isinstance(module, types.ModuleType)
                                    and _is_local(name, module))
        if seen[1]:
            found[name] = module
    return found


def _made_by_import(module: str, attribute: str, value: Any) -> bool:
    if attribute.startswith("__") or isinstance(value, types.ModuleType):
        return True
    return (isinstance(value, type | types.FunctionType)
            and value.__module__ == module and value.__qualname__ == attribute)


def _capture() -> Any:
    from .graph import why_not_whole  # at the first checkpoint, not at the extension's load

    carried: dict[str, dict[str, Any]] = {}
    noted: dict[str, dict[str, tuple[str, str]]] = {}
    for name, module in local_modules().items():
        for attribute, value in list(vars(module).items()):
            if _made_by_import(name, attribute, value):
                continue
            why = why_not_whole(value)
            if why is None:
                carried.setdefault(name, {})[attribute] = value
            else:
                noted.setdefault(name, {})[attribute] = (type(value).__qualname__, why)
    return {"modules": carried, "noted": noted} if carried or noted else None


def _restore(state: dict[str, Any]) -> str | None:
    missing = []
    for name in dict.fromkeys([*state["modules"], *state["noted"]]):
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # the file is gone, or raises now: every value of it is named
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
            continue
        for attribute, value in state["modules"].get(name, {}).items():
            setattr(module, attribute, value)
        for attribute, (kind, why) in state["noted"].get(name, {}).items():
            fresh = vars(module)
            if attribute not in fresh or type(fresh[attribute]).__qualname__ != kind:
                missing.append(f"{name}.{attribute} ({why})")
    return f"not set again: {', '.join(missing)}" if missing else None


ENTRIES = (("local module state", _capture, _restore),)
