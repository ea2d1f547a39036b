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
uses leave the collector to the outermost one, which gives it back as it found it (a session
that disabled it keeps it disabled).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block, back as it was after, also when the block raises."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
