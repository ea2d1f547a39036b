"""Objects of library modules that the session holds under names of its own, carried as the
library's object: ``from warnings import filters``, ``from matplotlib import rcParams``,
``from matplotlib import colormaps``, ``rc = mpl.rcParams``.

Pickled by value, each came back a copy: ``rcParams["font.size"] = 14`` or
``colormaps.register(...)`` after a resume changed the copy, and matplotlib never saw it, under
an ``exact`` verdict (found by a probe). ``held(namespace, sources)`` reads the cells' text
(``sources``: ``from M import A [as B]``, ``B = m.A`` with ``m`` a module) and keeps each name
whose value is still that very attribute of that library module; ``capture`` pickles a
``LibraryObject`` in its place (``stand_in``: pickle asks no reducer about a top-level ``dict``,
``list`` or ``set``). What the resume makes of it (``rebuild.library_object``):

- a ``dict``, ``list`` or ``set`` is the resumed process's object, refilled in place with the
  session's contents: in the session they were the library's;
- a matplotlib ``RcParams`` or ``ColormapRegistry`` (``BY_REFERENCE``) is the resumed
  process's object: the "matplotlib rcParams" and "matplotlib colormaps" entries give it the
  session's settings and colormaps;
- a class pickle does not find by its own module and qualified name (``from
  torch.nn.attention import SDPBackend``, a pybind class named ``_SDPBackend``, was not
  restored) is the class the cells imported, by the name they used;
- ``sys.path`` and ``os.environ`` (``PLACES_BY_REFERENCE``: ``sp = sys.path``, ``from os
  import environ``) are the resumed process's, which ``session_state`` gives the session's;
- anything else pickles as before (a copy): without an entry that puts its state back, the
  library's own object would lose what the session changed in it.

Not the notebook's own modules (``local_modules`` carries them), nor the rest of ``sys``, nor
this product's.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from . import cell_text, local_modules
from .library_patches import OWN
from .rebuild import REFILLABLE

#: The kinds of library object carried as the library's own (see the module docstring).
BY_REFERENCE = frozenset({("matplotlib", "RcParams"), ("matplotlib.cm", "ColormapRegistry")})
#: Objects carried as the process's own, never refilled: ``session_state`` puts the session's
#: ``sys.path`` and environment back into them.
PLACES_BY_REFERENCE = frozenset({("sys", "path"), ("os", "environ")})


def held(namespace: dict[str, Any], sources: list[str]) -> dict[str, tuple[str, str]]:
    """``{name: (module, attribute)}`` for the names of ``namespace`` that hold the library
    object the cells ``sources`` took by that name (see the module docstring)."""
    found = {}
    for source in sources:
        for name, module_name, attribute, through_name in cell_text.facts(source).takings:
            if through_name:  # ``B = m.A``: ``m`` names the module in the namespace
                module = namespace.get(module_name)
                module_name = getattr(module, "__name__", "") if isinstance(
                    module, types.ModuleType) else ""
            module, place = sys.modules.get(module_name), (module_name, attribute)
            if module is None or name not in namespace or not (
                    place in PLACES_BY_REFERENCE or _library(module_name)):
                continue
            value = vars(module).get(attribute, _ABSENT)
            if value is namespace[name] and (place in PLACES_BY_REFERENCE or _carried(value)):
                found[name] = place
    return found


_ABSENT = object()


def _carried(value: Any) -> bool:
    kind = type(value)
    return (kind in REFILLABLE or (kind.__module__, kind.__qualname__) in BY_REFERENCE
            or (isinstance(value, type) and not findable(value)))


def findable(cls: Any) -> bool:
    """Whether pickle finds ``cls`` by its own module and qualified name (torch's
    ``SDPBackend`` is ``torch.nn.attention._SDPBackend``, which is no attribute there)."""
    import cloudpickle

    return cloudpickle.cloudpickle._lookup_module_and_qualname(cls) is not None


def _library(module_name: str) -> bool:
    top = module_name.partition(".")[0]
    return (module_name not in ("__main__", "sys", "builtins") and top not in OWN
            and not local_modules.is_local_module(module_name))


class LibraryObject:
    """Stands, in the records, for a library's object held by a name (``held``): the resumed
    process's object, a container refilled with the session's ``contents``."""

    def __init__(self, module: str, attribute: str, contents: Any = None):
        self.module, self.attribute, self.contents = module, attribute, contents

    def __reduce__(self) -> tuple:
        from . import rebuild

        return (rebuild.library_object, (self.module, self.attribute, self.contents))


def stand_in(place: tuple[str, str], value: Any) -> LibraryObject:
    """What ``capture`` pickles in place of ``value``, held at ``place`` (``held``)."""
    refilled = type(value) in REFILLABLE and place not in PLACES_BY_REFERENCE
    return LibraryObject(*place, value if refilled else None)
