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

Observers the session registered on a traitlets object at run time (``slider.observe(fn,
"value")`` on an ipywidgets widget, ``traitlets.link``): ``HasTraits.__getstate__``
(traitlets/traitlets.py) empties ``_trait_notifiers``, and ``__setstate__`` registers again only
the class's own ``@observe`` handlers, so the notebook's never fired after a resume, under an
``exact`` verdict (found by a probe). ``reduce`` carries the others beside the object's state;
``rebuild.observed_state`` sets the state, then observes with each again.

Invariant: nothing is imported; without ``matplotlib.cbook`` or ``traitlets`` loaded ``reduce``
answers None for their objects.
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
        self._traitlets = sys.modules.get("traitlets.traitlets")

    def reduce(self, obj: object) -> tuple | None:
        """A registry's reduction with the notebook's callbacks kept, a traitlets object's with
        its run-time observers, or None (no such callbacks, or neither kind of object)."""
        if self._traitlets is not None and isinstance(obj, self._traitlets.HasTraits):
            return _observed_reduce(obj, self._traitlets)
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


def _observed_reduce(obj: Any, traitlets: Any) -> tuple | None:
    """``obj``'s reduction with the observers registered on it at run time (not the class's
    ``@observe`` handlers, which its ``__setstate__`` registers again), each as ``(trait name,
    change type, handler)``, ``None`` for ``All``; None when it has none, or when its class
    pickles otherwise than through ``HasTraits``' own state."""
    kind = type(obj)
    if kind.__getstate__ is not traitlets.HasTraits.__getstate__ or (
            kind.__reduce_ex__ is not object.__reduce_ex__):
        return None
    observers = [(None if name is traitlets.All else name, change, handler)
                 for name, changes in (vars(obj).get("_trait_notifiers") or {}).items()
                 for change, handlers in changes.items() for handler in handlers
                 if not isinstance(handler, traitlets.EventHandler)]
    if not observers:
        return None
    make, args, state, *_ = obj.__reduce_ex__(4)
    return make, args, (state, observers), None, None, rebuild.observed_state


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
