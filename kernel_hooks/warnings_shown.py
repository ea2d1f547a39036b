"""Which warnings the session has already shown: untouched by a checkpoint, brought back by a resume.

Python shows a warning once per place (``default``), per module (``module``) or per process
(``once``) by remembering it in registries: the ``__warningregistry__`` of the module a warning is
attributed to, and ``warnings.onceregistry``. Each registry carries the version of the filters it
was filled under; every change of the filters (``warnings._filters_mutated``: each
``catch_warnings`` enter and exit, ``simplefilter``, ``filterwarnings``) moves the version on, and
the next warning checked against an older registry clears it first (CPython
Python/_warnings.c, ``already_warned``). A checkpoint runs library code that enters
``catch_warnings`` (torch's pickling, reading pandas options), so without care the session would
print again, after ``%checkpoint``, the warnings it had already shown.

Call order: ``kept()`` wraps a whole checkpoint or resume. At its start it copies the registries
that are valid (filled under the current filters); at its end, when the filters are the same list
again, those registries get their copied entries back at the version of now: what the user saw
shown stays shown, and what was checked only inside the operation is forgotten. The
``interpreter_state`` entry ``warnings already shown`` (``ENTRIES``) captures those copies by
module; its restore (after the ``warnings filters`` entry: a filter change would void them) puts
them back into each module's registry, importing a module the resume has not imported yet (the
session had), and into ``onceregistry``, and marks them as the ones ``kept()`` keeps.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

REGISTRY = "__warningregistry__"
ONCE = "<once>"  # the key of ``warnings.onceregistry`` in a captured state


class _Probe(Warning):
    """The category of the warning that reads the filters' version (never shown)."""


def filters_version() -> int:
    """The interpreter's current filters version, read the only way Python offers: a registry
    without one is given the current one by the first warning checked against it. The probe is
    shown nowhere (the filters may say ``always`` or ``error``)."""
    registry: dict[Any, Any] = {}
    show = warnings._showwarnmsg
    warnings._showwarnmsg = lambda _message: None
    try:
        warnings.warn_explicit("gkeresume filters version probe", _Probe, "<gkeresume>", 0,
                               module="gkeresume", registry=registry)
    except _Probe:  # an ``error`` filter
        pass
    finally:
        warnings._showwarnmsg = show
        warnings.onceregistry.pop(("gkeresume filters version probe", _Probe), None)
    return registry["version"]


@dataclass
class _Mark:
    """The valid registries at one moment: (module name, the registry, a copy of its entries)."""

    filters: list
    registries: list[tuple[str, dict, dict]] = field(default_factory=list)


def _mark_now() -> _Mark:
    version = filters_version()
    mark = _Mark(list(warnings.filters))
    for name, registry in _registries():
        if registry.get("version") == version and len(registry) > 1:
            mark.registries.append((name, registry, dict(registry)))
    return mark


def _registries() -> Iterator[tuple[str, dict]]:
    """Every module's registry (``__main__``: the user namespace), in import order, then
    ``onceregistry``."""
    for name, module in list(sys.modules.items()):
        registry = getattr(module, "__dict__", {}).get(REGISTRY)
        if isinstance(registry, dict):
            yield name, registry
    yield ONCE, warnings.onceregistry


_mark: _Mark | None = None


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Wrap a checkpoint or a resume (see the module docstring); nested uses are the outer one."""
    global _mark
    if _mark is not None:
        yield
        return
    _mark = _mark_now()
    try:
        yield
    finally:
        mark, _mark = _mark, None
        if warnings.filters == mark.filters:
            version = filters_version()
            for _name, registry, entries in mark.registries:
                registry.clear()
                registry.update(entries)
                registry["version"] = version


def _shown() -> Any:
    """The warnings shown so far, by module: those valid when the operation started."""
    mark = _mark or _mark_now()
    shown: dict[str, list] = {}
    for name, _registry, entries in mark.registries:
        module = sys.modules.get(name)
        if name == ONCE or name == "__main__" or getattr(module, "__spec__", None) is not None:
            shown.setdefault(name, []).extend(k for k in entries if k != "version")
    return shown or None


def _restore_shown(shown: dict[str, list]) -> str | None:
    """Each module's entries back in its registry at the current version (see the docstring)."""
    global _mark
    version, failed = filters_version(), []
    for name, keys in shown.items():
        if name == ONCE:
            registry = warnings.onceregistry
        else:
            try:
                module = sys.modules.get(name) or importlib.import_module(name)
            except Exception as exc:  # a module of the session that does not import here
                failed.append(f"{name} ({type(exc).__name__}: {exc})")
                continue
            registry = vars(module).setdefault(REGISTRY, {})
        if registry.get("version") != version:
            registry.clear()
            registry["version"] = version
        registry.update(dict.fromkeys(map(tuple, keys), True))
    if _mark is not None:
        _mark = _mark_now()
    return f"not brought back for modules: {', '.join(failed)}" if failed else None


ENTRIES = (("warnings already shown", _shown, _restore_shown),)
