"""kernel_hooks: the IPython extension that checkpoints and restores a kernel's state.

``%load_ext kernel_hooks`` loads it (installing jupyter-gkeresume makes every IPython kernel of
the environment load it at start, through ``etc/ipython/ipython_kernel_config.json``). Magics:
``%checkpoint``, ``%snapshots``, ``%resume``, ``%pause``; the same verbs as functions below.

Every kernel of the environment pays for loading it, also those that never pause: the load
imports only what it records (``tests/test_kernel_start.py`` pins what it must not import). The verbs, the
store and its GCS stack, torch and numpy are imported by the first checkpoint or resume (the
verbs below are loaded on first use, PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .interpreter_state import register_state
from .registry import on_resume, register

__all__ = ["checkpoint", "list_snapshots", "load_ipython_extension", "on_resume", "pause",
           "register", "register_state", "replay", "resume"]

_VERBS = ("checkpoint", "list_snapshots", "pause", "replay", "resume")  # from .api

# The submodule ``replay`` (the planner, light) shares its name with the verb: loading it binds
# the package attribute once, so it is loaded here and the name handed back to the verb (on a
# ``%reload_ext`` the name holds the verb or nothing).
importlib.import_module(".replay", __name__)
globals().pop("replay", None)


def __getattr__(name: str) -> Any:
    if name not in _VERBS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(".api", __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from .api import checkpoint, list_snapshots, pause, replay, resume


def load_ipython_extension(ipython) -> None:
    """Register the magics, shorten the kernel's exit (``teardown``), note the exit handlers
    and codec search functions registered from now on (``registrations``), keep the banner from
    drawing random numbers (``enable_tip``) and remember the session's
    starting sys.path, environment, warnings filters, loggers and extensions
    (``interpreter_state``), installed distributions (``distributions.remember_environment``) and
    threads (``left_behind``). Opens no store: the first checkpoint or resume does."""
    from . import (
        distributions,
        interpreter_state,
        left_behind,
        registrations,
        session_state,
        teardown,
    )
    from .magics import ResumeMagics

    teardown.install(ipython)
    registrations.track()
    # IPython's banner picks its "Tip:" with the global ``random`` (IPython/core/tips.py
    # pick_tip), and ipykernel builds the banner for every kernel_info_request: each client
    # that connects (the server's own calls, every lab tab) would move the user's generator.
    ipython.enable_tip = False
    session_state.remember_baseline()
    interpreter_state.remember_baseline(ipython)
    distributions.remember_environment()
    left_behind.remember_baseline()
    ipython.register_magics(ResumeMagics)
