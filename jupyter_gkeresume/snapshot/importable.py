"""Which of the modules a manifest names could be imported here, found without executing code.

``missing_modules(names)`` answers once; a ``ModuleLookup`` answers many times and remembers, so
a listing of snapshots asks ``lookup.prefetch(every name of the listing)`` first, then each
``check_compatible`` asks the same lookup: at most one child interpreter per listing (below).

Only the interpreter's own finders (builtin, frozen, the path finder) are asked in this process:
they look at files and run nothing. ``importlib.util.find_spec`` is not used on a dotted name (it
imports the parents: ``this.x`` printed the Zen of Python, ``venv.__main__.x`` made virtualenvs),
nor on any name through a third-party finder on ``sys.meta_path``, which may run anything when
asked: setuptools' ``_distutils_hack`` imports ``setuptools._distutils`` (97 modules) when asked
for ``distutils``. A top-level name that only such a finder knows (an editable install's finder,
say) is asked in one fresh interpreter of this Python for all such names at once; that child is
also the closest picture of the kernel that will restore. A name already imported counts as
available.
"""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Iterable
from importlib.machinery import ModuleSpec

from .child import ask_child

_OWN_FINDERS = (
    importlib.machinery.BuiltinImporter,
    importlib.machinery.FrozenImporter,
    importlib.machinery.PathFinder,
)

# Asked in the child: each top-level name's submodule search locations, null for a plain module.
_CHILD = r"""
import importlib.util, json, sys
found = {}
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    if spec is not None:
        locations = spec.submodule_search_locations
        found[name] = None if locations is None else list(locations)
print(json.dumps(found))
"""


class ModuleLookup:
    """Which module names could be imported here, each top-level name found once: call
    ``prefetch(names)`` with every name that will be asked, then ``missing(names)`` per
    question. Answers hold for the lookup's life (one listing, one resume): make a new one to
    see modules installed since."""

    def __init__(self) -> None:
        self._specs: dict[str, ModuleSpec | None] = {}

    def prefetch(self, names: Iterable[str]) -> None:
        """Find every top-level name of ``names`` not found yet, in one child at most."""
        new = sorted({name.split(".")[0] for name in names if _valid(name)} - self._specs.keys())
        for top in new:
            self._specs[top] = _own_spec(top)
        unknown = [top for top in new if self._specs[top] is None]
        if unknown and len(sys.meta_path) > len(_OWN_FINDERS):
            self._specs.update(_specs_in_child(unknown))

    def missing(self, names: Iterable[str]) -> list[str]:
        """The names in ``names`` (dotted module names) that could not be imported here, sorted."""
        names = sorted(set(names))
        self.prefetch(names)
        return [name for name in names if not _available(name, self._specs.get(name.split(".")[0]))]


def missing_modules(names: Iterable[str]) -> list[str]:
    """The names in ``names`` that could not be imported here, sorted (a lookup of its own)."""
    return ModuleLookup().missing(names)


def _valid(name: str) -> bool:
    return all(part.isidentifier() for part in name.split("."))


def _own_spec(top: str) -> ModuleSpec | None:
    """The spec of an imported or own-finder-found top-level module, else None."""
    if top in sys.modules:
        return getattr(sys.modules[top], "__spec__", None) or ModuleSpec(top, None)
    for finder in _OWN_FINDERS:
        try:
            spec = finder.find_spec(top)
        except Exception:  # an odd sys.path entry: not found through it
            spec = None
        if spec is not None:
            return spec
    return None


def _specs_in_child(tops: list[str]) -> dict[str, ModuleSpec]:
    """Specs (name and search locations only) of ``tops`` as a fresh interpreter finds them."""
    found = ask_child(_CHILD, *tops)  # a child that fails answers "not found" for its names
    if not isinstance(found, dict):
        return {}
    specs = {}
    for top, locations in found.items():
        spec = ModuleSpec(top, None, is_package=locations is not None)
        if locations is not None:
            spec.submodule_search_locations = [str(p) for p in locations]
        specs[top] = spec
    return specs


def _available(name: str, spec: ModuleSpec | None) -> bool:
    """Follow ``name``'s parts below its top-level ``spec`` by path search, executing nothing."""
    if spec is None or not _valid(name):
        return False
    parts = name.split(".")
    try:
        for depth in range(2, len(parts) + 1):
            dotted = ".".join(parts[:depth])
            if dotted in sys.modules:
                spec = getattr(sys.modules[dotted], "__spec__", None) or spec
                continue
            locations = spec.submodule_search_locations
            if locations is None:  # a plain module has no submodules
                return False
            spec = importlib.machinery.PathFinder.find_spec(dotted, list(locations))
            if spec is None:
                return False
    except Exception:  # odd search locations: not found
        return False
    return True
