"""The cyclic garbage collector held off while a checkpoint or a resume runs.

A checkpoint or a resume imports its machinery on first use and allocates for every object it
pickles or unpickles, so the collector's counters pass its thresholds inside it; a full
collection that lands there walks the whole heap of the libraries the session imported (0.09 s
with torch, 0.14-0.16 s with a session of 1.5 GB, docs/benchmarks.md) and finds nothing to
free: what the operation makes is freed by reference counts. Held off, the collection that came
due runs after the operation, in the session's own time, as it would have without it; after a
pause's checkpoint it never runs, as the kernel's exit collects once (``teardown``).

Call order: ``paused()`` wraps the verbs ``api.checkpoint`` and ``api.resume``, and the
server's request in ``server_api.run`` from before the verb is looked up (its import). Nested
uses leave the collector to the outermost one. Meanwhile the session's switch is
``session_enabled()`` (what a checkpoint saves: ``library_state``'s python settings), and a
resume sets it with ``set_session_enabled``; the outermost pause ends with the collector
switched as the session has it (a session that disabled it keeps it disabled).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_session: list[bool] = []  # while a pause holds the collector: the session's switch


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block, then switched as the session has it, also when the
    block raises."""
    if _session:  # an outer pause holds it
        yield
        return
    _session.append(gc.isenabled())
    gc.disable()
    try:
        yield
    finally:
        if _session.pop():
            gc.enable()


def session_enabled() -> bool:
    """Whether the session has the collector on (while a pause holds it: as it was before)."""
    return _session[0] if _session else gc.isenabled()


def set_session_enabled(enabled: bool) -> None:
    """Switch the collector for the session (while a pause holds it: when the pause ends)."""
    if _session:
        _session[0] = enabled
    else:
        (gc.enable if enabled else gc.disable)()
