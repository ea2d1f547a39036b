"""App checkpoints: user-provided save/load for objects only the user knows how to rebuild.

``register(Type, save=..., load=...)`` applies to every instance of ``Type`` anywhere in the
graph; ``register("name", ...)`` to the top-level variable of that name. ``save(obj)`` returns
picklable state; the capture stores ``load`` (by value when notebook-defined) with that state, so
a fresh kernel rebuilds the object with ``load(state)`` without registering anything first.
``@on_resume`` functions are saved with the session and run after a restore, with the
``ResumeResult``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jupyter_gkeresume.errors import InvalidInputError


@dataclass(frozen=True)
class AppCheckpoint:
    save: Callable[[Any], Any]
    load: Callable[[Any], Any]


by_type: dict[type, AppCheckpoint] = {}
by_name: dict[str, AppCheckpoint] = {}
resume_hooks: list[Callable[..., Any]] = []


def register(target: type | str, *, save: Callable[[Any], Any], load: Callable[[Any], Any]) -> None:
    """Use ``save``/``load`` for instances of a type, or for the top-level variable ``target``."""
    if not callable(save) or not callable(load):
        raise InvalidInputError("register() needs callable save= and load=")
    if isinstance(target, type):
        by_type[target] = AppCheckpoint(save, load)
    elif isinstance(target, str) and target.isidentifier():
        by_name[target] = AppCheckpoint(save, load)
    else:
        raise InvalidInputError(f"register() takes a type or a variable name, not {target!r}")


def on_resume(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: run ``func(result)`` after every successful resume (saved with the session)."""
    if func not in resume_hooks:
        resume_hooks.append(func)
    return func


def for_object(obj: object) -> AppCheckpoint | None:
    """The registered checkpoint for ``obj``'s type (most derived registration wins)."""
    if not by_type:
        return None
    for klass in type(obj).__mro__:
        if klass in by_type:
            return by_type[klass]
    return None


class SavedByApp:
    """Pickles as ``load(state)``: how a name-registered variable travels."""

    def __init__(self, load: Callable[[Any], Any], state: Any):
        self.load = load
        self.state = state

    def __reduce__(self):
        return (self.load, (self.state,))
