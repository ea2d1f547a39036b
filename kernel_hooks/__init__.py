"""kernel_hooks: the IPython extension that checkpoints and restores a kernel's state.

``%load_ext kernel_hooks`` loads it (installing jupyter-gkeresume makes every IPython kernel of
the environment load it at start, through ``etc/ipython/ipython_kernel_config.json``). Magics:
``%checkpoint``, ``%snapshots``, ``%resume``, ``%pause``; the same verbs as functions below.
"""

from .api import checkpoint, list_snapshots, pause, replay, resume
from .interpreter_state import register_state
from .registry import on_resume, register

__all__ = ["checkpoint", "list_snapshots", "load_ipython_extension", "on_resume", "pause",
           "register", "register_state", "replay", "resume"]


def load_ipython_extension(ipython) -> None:
    """Register the magics, shorten the kernel's exit (``teardown``), keep the banner from
    drawing random numbers (``enable_tip``) and remember the session's
    starting sys.path, environment, warnings filters, loggers and extensions
    (``interpreter_state``), installed distributions (``packages.remember_environment``) and
    threads (``left_behind``)."""
    from jupyter_gkeresume.errors import GkeResumeError

    from . import interpreter_state, left_behind, packages, session_state, teardown
    from .api import open_store
    from .magics import ResumeMagics

    teardown.install(ipython)
    # IPython's banner picks its "Tip:" with the global ``random`` (IPython/core/tips.py
    # pick_tip), and ipykernel builds the banner for every kernel_info_request: each client
    # that connects (the server's own calls, every lab tab) would move the user's generator.
    ipython.enable_tip = False
    session_state.remember_baseline()
    interpreter_state.remember_baseline(ipython)
    try:
        store = open_store()
    except (GkeResumeError, OSError, ValueError):  # no usable store yet: kept in memory until one
        store = None
    packages.remember_environment(store)
    left_behind.remember_baseline()  # after the store: its threads are the kernel's own
    ipython.register_magics(ResumeMagics)
