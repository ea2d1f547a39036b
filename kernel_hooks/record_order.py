"""The order in which the user's names are pickled as records of the graph.

Two rules, in this order of precedence:

1. **A name comes after the names its notebook code uses.** A function defined in the notebook
   (and a notebook class's methods) pickles with the globals it uses (``graph``: they fill a
   name the resumed namespace lacks). Pickled first, such a function carried ``model`` inside its
   own record: what ``model`` came back without was named under the function, and its storages
   were counted as the function's. With the names it uses written first, pickle's memo makes the
   function's globals mere references to their own records. A decorated function
   (``@torch.no_grad()``, ``functools.wraps``) is followed through its ``__wrapped__`` and the
   functions in its closure.
2. **Names that seem to hold no storages come first** (``storages.seems_to_hold_storages``), so
   that a resume unpickles them while the blobs are still being read. A name whose notebook code
   uses a name that holds storages holds them too: it waits for those blobs either way.

Otherwise the namespace's order is kept. Cycles (two functions calling each other) are broken
where they are met.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterator
from typing import Any

from cloudpickle.cloudpickle import _extract_code_globals

from .storages import seems_to_hold_storages
from .weak_references import PROXIES

#: How deep ``_functions_inside`` follows wrappers (a decorator of a decorator of a function).
_WRAPPER_DEPTH = 4


def pickling_order(items: list[tuple[str, object]],
                   holds: Callable[[object], bool] = seems_to_hold_storages,
                   ) -> list[tuple[str, object]]:
    """``items`` (name, value) in the order to pickle them (module docstring)."""
    values = dict(items)
    uses = {name: [used for used in sorted(_asked(names_used, value, set()))
                   if used in values and used != name]
            for name, value in items}
    heavy: dict[str, bool] = {}

    def holding(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name not in heavy:
            heavy[name] = _asked(holds, values[name], False) or any(
                holding(used, seen | {name}) for used in uses[name] if used not in seen)
        return heavy[name]

    order: list[str] = []
    placed: set[str] = set()

    def place(name: str, path: set[str]) -> None:
        if name in placed or name in path:  # placed, or a cycle: its other end goes first
            return
        path.add(name)
        for used in uses[name]:
            place(used, path)
        path.discard(name)
        placed.add(name)
        order.append(name)

    for light in (True, False):
        for name, _ in items:
            if holding(name) is not light:
                place(name, set())
    return [(name, values[name]) for name in order]


def _asked(question: Callable[[object], Any], value: object, otherwise: Any) -> Any:
    """``question(value)``, or ``otherwise`` for an object that raises when looked at (a
    property that raises, a dead proxy): only an order depends on it, and its pickling names
    it."""
    try:
        return question(value)
    except Exception:
        return otherwise


def names_used(value: object) -> set[str]:
    """The global names the notebook code of ``value`` uses: a notebook function's, a notebook
    class's methods', or those of the class of an instance of one; none for a weak proxy
    (``isinstance`` on a dead one raises: its referent is pickled where it is held)."""
    if type(value) in PROXIES:
        return set()
    kind = value if isinstance(value, type) else type(value)
    functions = list(_functions_inside(value, _WRAPPER_DEPTH))
    if kind.__module__ == "__main__":
        for attribute in vars(kind).values():
            functions.extend(_functions_inside(attribute, _WRAPPER_DEPTH))
    names: set[str] = set()
    for function in functions:
        if function.__globals__.get("__name__") == "__main__":
            names.update(_extract_code_globals(function.__code__))
    return names


def _functions_inside(value: object, depth: int) -> Iterator[types.FunctionType]:
    """``value`` if a function, the function a method, property or partial wraps, and (for a
    wrapper) the functions of its ``__wrapped__`` and its closure, ``depth`` levels down."""
    if type(value) in PROXIES:
        return
    if isinstance(value, staticmethod | classmethod | types.MethodType):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    elif isinstance(value, functools.partial):
        value = value.func
    if not isinstance(value, types.FunctionType) or depth == 0:
        return
    yield value
    inner = [getattr(value, "__wrapped__", None)]
    for cell in value.__closure__ or ():
        try:
            inner.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    for candidate in inner:
        if candidate is not None and candidate is not value:
            yield from _functions_inside(candidate, depth - 1)
