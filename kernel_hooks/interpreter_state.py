"""The registry of interpreter and library state beside the variables.

Each entry has a ``name`` (what the reports say), ``capture() -> state`` (picklable; ``None``
when there is nothing to carry: the library is not loaded, nothing changed in the session) and
``restore(state) -> None | str`` (``None``: restored; a string: what was not, and why).
``register_state(name, capture=, restore=)`` adds one (a library's or the user's); the built-in
entries (``ipython_state``, ``library_state``, ``stdlib_registries``, ``warnings_shown``,
``library_patches``, ``library_values``, ``object_attributes``, ``library_registries``,
``local_modules``) come first, in
that order, and are restored in registration order (IPython's ``%config`` before the matplotlib
backend, the backend before the figures drawn with it, the warnings filters before the warnings
shown, library patches before the session's own modules).

Call order: ``capture_all()`` at checkpoint gives one state per entry, each pickled as its own
graph record (``record_name``) after the variables, so a figure a variable also names is one
object; an entry whose capture raises is named in the checkpoint's report, and travels as
``NotCaptured`` to be named in the resume's. ``restore_all(states, failures)`` at resume, after
the variables are back, restores every captured entry or names it: nothing is dropped silently.
The core session record (RNG states, cwd, ``sys.path``, environment, execution count, hash seed:
``session_state``) predates this registry and stays its own record.

Invariant: capture is cheap when a library is not in use: entries look at ``sys.modules`` and
never import a library that is not loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jupyter_gkeresume.errors import InvalidInputError

from . import (
    ipython_state,
    library_patches,
    library_registries,
    library_state,
    library_values,
    local_modules,
    object_attributes,
    stdlib_registries,
    warnings_shown,
)

RECORD_PREFIX = "__state__:"


@dataclass(frozen=True)
class StateEntry:
    name: str
    capture: Callable[[], Any]
    restore: Callable[[Any], str | None]


@dataclass(frozen=True)
class NotCaptured:
    """Travels in place of the state of an entry whose capture raised, so the resume names it
    too."""

    why: str


entries: dict[str, StateEntry] = {}


def register_state(name: str, *, capture: Callable[[], Any],
                   restore: Callable[[Any], str | None]) -> None:
    """Add (or replace) the entry ``name``: ``capture()`` at every checkpoint, ``restore(state)``
    at resume with what it captured (see the module docstring for the contract)."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError(f"register_state() needs a non-empty name, not {name!r}")
    if not callable(capture) or not callable(restore):
        raise InvalidInputError("register_state() needs callable capture= and restore=")
    entries[name] = StateEntry(name, capture, restore)


for _name, _capture, _restore in (*ipython_state.ENTRIES, *library_state.ENTRIES,
                                  *stdlib_registries.ENTRIES, *warnings_shown.ENTRIES,
                                  *library_patches.ENTRIES, *library_values.ENTRIES,
                                  *object_attributes.ENTRIES,
                                  *library_registries.ENTRIES, *local_modules.ENTRIES):
    register_state(_name, capture=_capture, restore=_restore)


def remember_baseline(shell: Any) -> None:
    """What a fresh kernel has, recorded when the extension loads (the attributes set on
    libraries: before the first code runs): later changes are the session's (warnings filters,
    loggers, IPython extensions, attributes set on libraries, modules imported)."""
    library_state.remember_baseline()
    stdlib_registries.remember_baseline()
    local_modules.remember_baseline()
    library_patches.remember_baseline_before_code(shell)
    ipython_state.remember_baseline(shell)


def record_name(name: str) -> str:
    """The graph record that carries entry ``name``'s state."""
    return RECORD_PREFIX + name


def entry_name(record: str) -> str | None:
    """The entry a graph record carries, or None for a variable's record."""
    return record.removeprefix(RECORD_PREFIX) if record.startswith(RECORD_PREFIX) else None


def capture_all() -> tuple[dict[str, Any], dict[str, str]]:
    """Every entry's state (entries with nothing to carry left out; ``NotCaptured`` for those
    whose capture raised), and the entries whose capture raised, with why."""
    states, failed = {}, {}
    for entry in list(entries.values()):
        try:
            state = entry.capture()
        except Exception as exc:  # a library's state must never sink the checkpoint
            failed[entry.name] = f"capture failed: {type(exc).__name__}: {exc}"
            states[entry.name] = NotCaptured(failed[entry.name])
            continue
        if state is not None:
            states[entry.name] = state
    return states, failed


def restore_all(states: dict[str, Any], failures: dict[str, str]) -> tuple[list[str], list[str]]:
    """Restore each captured state in registration order (then entries this kernel does not
    know, which are named); ``failures``: entries whose record did not load, with why. Returns
    the names restored and one line per entry not (or not fully) restored."""
    restored, named = [], []
    order = [*(n for n in entries if n in states or n in failures),
             *(n for n in [*states, *failures] if n not in entries)]
    for name in dict.fromkeys(order):
        if name in failures:
            named.append(f"{name} not restored: {failures[name]}")
            continue
        if isinstance(states[name], NotCaptured):
            named.append(f"{name} not restored: {states[name].why}")
            continue
        entry = entries.get(name)
        if entry is None:
            named.append(f"{name} not restored: no entry registered for it in this kernel "
                         "(register_state before %resume)")
            continue
        try:
            why = entry.restore(states[name])
        except Exception as exc:  # one entry failing costs only itself
            why = f"{type(exc).__name__}: {exc}"
        if why is None:
            restored.append(name)
        else:
            named.append(f"{name} not restored: {why}")
    return restored, named
