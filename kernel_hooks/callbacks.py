"""Callbacks the notebook connected to matplotlib's objects (``ax.callbacks.connect``,
``fig.canvas.mpl_connect``), kept in a snapshot.

matplotlib's ``CallbackRegistry.__getstate__`` (lib/matplotlib/cbook.py) keeps only the callbacks
whose ids are in its ``_pickled_cids`` (those matplotlib connected itself as picklable) and drops
the rest: the notebook's never fired after a resume. ``CallbackRegistries.reduce`` pickles a
registry with the notebook's callbacks (functions, lambdas, methods and partials of the notebook
or its own modules: ``library_state.the_sessions``, or a library's closure over one, as a
widget's ``on_changed`` makes) added to those ids for the while; matplotlib's
own ``__setstate__`` connects them again (a method weakly, as ``connect`` does), and since the
ids stay in ``_pickled_cids``, a later checkpoint keeps them too. A library's callbacks stay
matplotlib's choice.

Invariant: nothing is imported; without ``matplotlib.cbook`` loaded ``reduce`` answers None.
"""

from __future__ import annotations

import sys
from typing import Any

from . import rebuild
from .library_state import the_sessions


class CallbackRegistries:
    """The reduction for one graph (the class is looked up once, from ``sys.modules``)."""

    def __init__(self) -> None:
        self._registry = getattr(sys.modules.get("matplotlib.cbook"), "CallbackRegistry", None)

    def reduce(self, obj: object) -> tuple | None:
        """A registry's reduction with the notebook's callbacks kept, or None (none of its
        callbacks is the notebook's, or it is no ``CallbackRegistry``)."""
        if self._registry is None or type(obj) is not self._registry:
            return None
        registry: Any = obj
        mine = {cid for callbacks in registry.callbacks.values()
                for cid, reference in callbacks.items() if _the_notebooks(reference())}
        kept = registry._pickled_cids
        if mine <= kept:
            return None
        registry._pickled_cids = kept | mine
        try:
            state = registry.__getstate__()
        finally:
            registry._pickled_cids = kept
        return rebuild.new_object, (type(registry), ()), state


def _the_notebooks(callback: Any) -> bool:
    """A callback of the notebook or its own modules, or a library's closure over one (a
    widget's ``on_changed`` connects ``lambda val: func(val)``)."""
    if callback is None:  # a method whose object is gone
        return False
    cells = getattr(callback, "__closure__", None) or ()
    return the_sessions(callback) or any(the_sessions(_contents(cell)) for cell in cells)


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None
