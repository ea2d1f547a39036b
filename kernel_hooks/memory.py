"""Zero-copy byte views of host memory (torch CPU storages, numpy buffers) by address.

The views alias live memory: the caller keeps the owning object alive for as long as it uses
the view.
"""

from __future__ import annotations

import ctypes


def host_view(address: int, nbytes: int) -> memoryview:
    """A writable byte view of ``nbytes`` at ``address`` (an empty view for ``nbytes == 0``)."""
    if nbytes == 0:
        return memoryview(bytearray())
    return memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B")
