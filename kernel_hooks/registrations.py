"""Registrations CPython keeps where Python cannot list them: exit handlers
(``atexit.register``), codec search functions (``codecs.register``) and codec error handlers
(``codecs.register_error``: noted as ``registered(ERROR_HANDLERS)``, ``(handler, (name,), {})``,
the latest per name).

``track()`` (from ``load_ipython_extension``, before any cell ran) wraps each module's
``register`` and ``unregister`` so that each registration is also noted here, in order, and
forgotten when unregistered; the registration itself is still the module's. ``registered(module)``
lists them: the ``exit handlers`` entry (``library_state``) and the ``codec search functions``
entry (``stdlib_registries``) carry the session's own and register them again at resume, so a
notebook's "save the results at exit" runs when the resumed kernel exits too, and its codec is
found. A second ``track()`` (``%reload_ext``) changes nothing.
"""

from __future__ import annotations

import atexit
import codecs
import functools
import types
from collections.abc import Callable
from typing import Any

#: The modules whose ``register(func, *args, **kwargs)`` and ``unregister(func)`` are tracked.
TRACKED = (atexit, codecs)
#: The key of ``codecs.register_error``'s registrations.
ERROR_HANDLERS = "codecs.register_error"
#: (function, args, kwargs) of every registration since ``track()``, oldest first, by module.
_registered: dict[str, list[tuple[Callable, tuple, dict[str, Any]]]] = {}


def track() -> None:
    """Note every registration from now on (see the module docstring)."""
    for module in TRACKED:
        if module.__name__ not in _registered:
            _registered[module.__name__] = []
            _wrap(module, _registered[module.__name__])
    if ERROR_HANDLERS not in _registered:
        _registered[ERROR_HANDLERS] = []
        _wrap_error_handlers(_registered[ERROR_HANDLERS])


def _wrap(module: types.ModuleType, noted: list[tuple[Callable, tuple, dict[str, Any]]]) -> None:
    original_register, original_unregister = module.register, module.unregister

    @functools.wraps(original_register)
    def register(func: Callable, /, *args: Any, **kwargs: Any) -> Any:
        result = original_register(func, *args, **kwargs)
        noted.append((func, args, kwargs))
        return result

    @functools.wraps(original_unregister)
    def unregister(func: Callable, /) -> None:
        original_unregister(func)
        noted[:] = [entry for entry in noted if entry[0] != func]

    module.register, module.unregister = register, unregister


def _wrap_error_handlers(noted: list[tuple[Callable, tuple, dict[str, Any]]]) -> None:
    original_register_error = codecs.register_error

    @functools.wraps(original_register_error)
    def register_error(name: str, handler: Callable, /) -> None:
        original_register_error(name, handler)
        noted[:] = [entry for entry in noted if entry[1] != (name,)]
        noted.append((handler, (name,), {}))

    codecs.register_error = register_error


def registered(module: str) -> list[tuple[Callable, tuple, dict[str, Any]]]:
    """The registrations with ``module`` (``"atexit"``, ``"codecs"``, ``ERROR_HANDLERS``) still
    in place, oldest first (atexit runs them newest first)."""
    return list(_registered.get(module, ()))
