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


MADV_POPULATE_WRITE = 23  # Linux 5.14+
_PAGE = 4096
_madvise = None


def populate(address: int, nbytes: int) -> bool:
    """Fault in the pages of ``[address, address + nbytes)`` for writing in one system call
    (``madvise(MADV_POPULATE_WRITE)``) instead of one page fault per 4 KiB as a read first
    touches them: measured 0.5-0.7 s instead of 1-3.6 s for 1.45 GB of new memory on the VMs
    these sessions run on. The GIL is released meanwhile. Only an optimization: False (and
    nothing done) where the system lacks it; the pages are then faulted in by the read."""
    global _madvise
    start, end = (address + _PAGE - 1) & ~(_PAGE - 1), (address + nbytes) & ~(_PAGE - 1)
    if end <= start:
        return False
    if _madvise is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _madvise = libc.madvise
            _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        except (OSError, AttributeError):
            _madvise = False
    return bool(_madvise) and _madvise(start, end - start, MADV_POPULATE_WRITE) == 0
