"""The exit handlers registered in this process (``atexit.register``), which CPython keeps where
Python cannot list them.

``track()`` (from ``load_ipython_extension``, before any cell ran) wraps ``atexit.register`` and
``atexit.unregister`` so that each registration is also noted here, in order, and forgotten
when unregistered; the registration itself is still atexit's. ``registered()`` lists them: the
``exit handlers`` state entry (``library_state``) carries the session's own and registers them
again at resume, so a notebook's "save the results at exit" runs when the resumed kernel exits
too. A second ``track()`` (``%reload_ext``) changes nothing.
"""

from __future__ import annotations

import atexit
import functools
from collections.abc import Callable
from typing import Any

#: (function, args, kwargs) of every registration since ``track()``, oldest first.
_registered: list[tuple[Callable, tuple, dict[str, Any]]] = []
_atexit: dict[str, Callable] = {}  # atexit's own register and unregister


def track() -> None:
    """Note every registration from now on (see the module docstring)."""
    if _atexit:
        return
    _atexit.update(register=atexit.register, unregister=atexit.unregister)

    @functools.wraps(_atexit["register"])
    def register(func: Callable, /, *args: Any, **kwargs: Any) -> Callable:
        result = _atexit["register"](func, *args, **kwargs)
        _registered.append((func, args, kwargs))
        return result

    @functools.wraps(_atexit["unregister"])
    def unregister(func: Callable, /) -> None:
        _atexit["unregister"](func)
        _registered[:] = [entry for entry in _registered if entry[0] != func]

    atexit.register, atexit.unregister = register, unregister


def registered() -> list[tuple[Callable, tuple, dict[str, Any]]]:
    """The registrations still in place, oldest first (atexit runs them newest first)."""
    return list(_registered)
