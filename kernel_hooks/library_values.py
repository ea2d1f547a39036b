"""Values the notebook's cells assigned to attributes of library modules and classes
(``Image.MAX_IMAGE_PIXELS = None``, ``ImageFile.LOAD_TRUNCATED_IMAGES = True``,
``tqdm.tqdm.monitor_interval = 0``, ``logging.raiseExceptions = False``): found at checkpoint,
set again at resume.

A fresh kernel imports each library with the values it ships, and nothing in the objects tells a
value a cell assigned from one the library computed or changed itself (``library_patches`` finds
the functions and classes of the notebook set on libraries, not data). The cells' text does
(``cell_text``): every assignment whose target is an attribute of a chain of names (``a.b =
...``, ``a.b.c += 1``, annotated ones, each part of an unpacking), in every cell of the input
history, the bodies of the functions it defines included, and every ``dict``, ``list`` or
``set`` of a chain that they change in place (``mimetypes.types_map[".x"] = t``,
``pd.DataFrame._metadata.append("tag")``: its contents travel and go into the fresh library's
container, which whatever else holds it then sees). ``capture()`` looks each chain's
owner up in the namespace now, through modules and classes only (attributes read from their
``__dict__``: no property runs): an owner that is a library module (``sys.modules`` has it under
its name) or a class of one (found again by its module and qualified name), the attribute in its
own ``__dict__``, is the session's setting, carried with the value it has now. Not the
notebook's own modules (``local_modules`` carries theirs), this product's, ``builtins``
(``library_patches``), and of ``sys`` what is the kernel's own or carried by another entry
(``_SYS_NOT_HERE``: the streams, the hooks, ``sys.path`` and ``sys.argv``). What a
module keeps outside its ``__dict__`` (torch's ``backends`` flags, config modules) has its own
entries; setter functions (``torch.hub.set_dir``) are not assignments and are not seen here.

A string value whose attribute name or text looks like a credential (``openai.api_key``) is not
saved, as with environment variables (``jupyter_gkeresume.credentials``), and named; so is a
value that would not come back whole. At resume (after the variables) each owner is imported
again where the resume has not (the session had it) and the attribute set.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from . import cell_text, local_modules
from .library_patches import OWN
from .rebuild import REFILLABLE, refill

#: Modules whose attributes this entry leaves alone (see the module docstring).
_NOT_HERE = frozenset({"__main__", "builtins"}) | OWN
#: The attributes of ``sys`` it leaves alone: the kernel's streams and hooks (ipykernel's and
#: IPython's), the last error, the import system's lists (``library_state``'s import finders),
#: ``sys.path`` and ``sys.argv`` (``session_state``).
_SYS_NOT_HERE = frozenset({
    "stdin", "stdout", "stderr", "displayhook", "excepthook", "breakpointhook",
    "unraisablehook", "last_type", "last_value", "last_traceback", "last_exc", "modules",
    "meta_path", "path_hooks", "path_importer_cache", "path", "argv"})


def _owner(namespace: dict[str, Any], names: tuple[str, ...]) -> Any:
    """The module or class ``names`` leads to from ``namespace``, read from ``__dict__``s only;
    None when a step is anything else."""
    owner = namespace.get(names[0])
    for name in names[1:]:
        if not isinstance(owner, (types.ModuleType, type)):
            return None
        owner = vars(owner).get(name)
    return owner if isinstance(owner, (types.ModuleType, type)) else None


def _library_place(owner: Any) -> tuple[str, str | None] | None:
    """``(module, class qualified name or None)`` of a library module or class, found again
    there by those names; None for the notebook's, its own modules', this product's."""
    if isinstance(owner, types.ModuleType):
        module, qualname = owner.__name__, None
        if sys.modules.get(module) is not owner:
            return None
    else:
        module, qualname = owner.__module__, owner.__qualname__
        found: Any = sys.modules.get(module)
        for part in qualname.split("."):
            found = vars(found).get(part) if found is not None else None
        if found is not owner:
            return None
    if module in _NOT_HERE or module.split(".")[0] in OWN or local_modules.is_local_module(module):
        return None
    return module, qualname


def capture(namespace: dict[str, Any], sources: list[str]) -> dict[str, Any] | None:
    """``{"values": {(module, class or None, attribute): value}, "lost": [label (why)]}`` for
    what the cells ``sources`` assigned on libraries (see the module docstring); None when
    nothing."""
    values: dict[tuple[str, str | None, str], Any] = {}
    lost: list[str] = []
    seen: set[tuple[str, str | None, str]] = set()
    assigned_somewhere: set[tuple[str, str | None, str]] = set()
    refilled: set[tuple[str, str | None, str]] = set()
    for source in sources:
        for chain, in_place in cell_text.facts(source).assigned:
            owner, attribute = _owner(namespace, chain[:-1]), chain[-1]
            if in_place and isinstance(owner, type):  # the class that holds the container
                owner = next((c for c in owner.__mro__ if attribute in vars(c)), owner)
            place = _library_place(owner) if owner is not None else None
            if (place is None or attribute not in vars(owner)
                    or (owner is sys and attribute in _SYS_NOT_HERE)):
                continue
            key = (*place, attribute)
            value = vars(owner)[attribute]
            if not in_place:
                assigned_somewhere.add(key)
            elif type(value) in REFILLABLE:
                refilled.add(key)
            else:  # a container of another kind: not carried, as before
                continue
            if key in seen:
                continue
            seen.add(key)
            label = ".".join(p for p in key if p)
            if (why := cell_text.why_left_out(attribute, value)) is not None:
                lost.append(f"{label} ({why})")
            else:
                values[key] = value
    refilled = {key for key in refilled - assigned_somewhere if key in values}
    return ({"values": values, "lost": lost, "refilled": refilled}
            if values or lost else None)



def restore(state: dict[str, Any]) -> str | None:
    """Set each value again on its owner, imported where the resume has not (a container the
    cells changed in place, never assigned: its items put into the fresh one, so whatever else
    holds it sees them); what cannot be set, and what was not saved, is named."""
    refused = list(state["lost"])
    for key, value in state["values"].items():
        module, qualname, attribute = key
        label = ".".join(p for p in key if p)
        try:
            owner: Any = importlib.import_module(module)
            for part in qualname.split(".") if qualname else ():
                owner = getattr(owner, part)
            if key not in state.get("refilled", ()) or not refill(
                    vars(owner).get(attribute), value):
                setattr(owner, attribute, value)
        except Exception as exc:  # gone from this version of the library, or refused
            refused.append(f"{label} ({type(exc).__name__}: {exc})")
    return ", ".join(refused) or None


ENTRIES = (("values set on libraries", cell_text.from_the_shell(capture), restore),)
