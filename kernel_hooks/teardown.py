"""A kernel's exit without the interpreter's last passes over the libraries' heap.

A pause waits for its kernels to be gone (the GPU is free only then), so the kernel's exit is
part of every pause. At exit IPython's ``atexit_operations`` runs a full ``gc.collect()`` and
then clears the user namespace (in that order: its collection finds none of the user's objects),
and the interpreter then tears its modules down, running the cycle collector again, more than
once, over everything still tracked. With torch imported those passes are most of the exit
(docs/benchmarks.md, "Through the server").

``install(shell)`` moves IPython's handler into a wrapper that does the same work with one full
collection where it counts: the heap frozen while IPython's operations run (their collection
then walks only what is new), one ``gc.collect()`` once the user namespace is cleared (every
object of the user's, reference cycles included, is finalized there: buffered files flushed and
closed, HDF5 handles closed), then ``gc.freeze()``: the interpreter's own passes skip what is
left. Modules are still cleared and their objects deallocated by reference counting
(``__del__`` runs, files close); what is skipped is the search for reference cycles among the
libraries' own objects, which Python does not promise to finalize at exit. Handlers that
libraries imported later registered (h5py closing its files) still run before it, and those
registered earlier (``logging.shutdown``, ``weakref.finalize``) after it, as they did.

Call order: ``install`` from ``load_ipython_extension`` (before any cell ran); a second call
(``%reload_ext``) changes nothing.
"""

from __future__ import annotations

import atexit
import gc
from typing import Any

_installed: list[Any] = []  # the shell whose exit is wrapped (one per process)


def install(shell: Any) -> None:
    """At exit, run ``shell.atexit_operations`` with one full collection after it, then
    ``gc.freeze()`` (see the module docstring)."""
    if shell in _installed:
        return
    _installed.append(shell)
    operations = shell.atexit_operations
    atexit.unregister(operations)  # bound methods compare equal: IPython's own registration

    def operations_then_freeze() -> None:
        gc.freeze()  # IPython collects before it clears the namespace: nothing to find yet
        try:
            operations()
        finally:
            gc.unfreeze()
        gc.collect()  # the user's objects, cycles included, finalized here
        gc.freeze()  # the interpreter's passes at exit skip the libraries' objects

    atexit.register(operations_then_freeze)
