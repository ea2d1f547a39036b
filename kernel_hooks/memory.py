"""Host memory (torch CPU storages, numpy buffers) by address: zero-copy byte views, and new
memory faulted in at once before it is filled.

The views alias live memory: the caller keeps the owning object alive for as long as it uses
the view.
"""

from __future__ import annotations

import ctypes
import functools
import mmap


def host_view(address: int, nbytes: int) -> memoryview:
    """A writable byte view of ``nbytes`` at ``address`` (an empty view for ``nbytes == 0``)."""
    if nbytes == 0:
        return memoryview(bytearray())
    return memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B")


MADV_POPULATE_WRITE = 23  # Linux 5.14+


def populate(address: int, nbytes: int) -> bool:
    """Fault in the whole pages of ``[address, address + nbytes)`` for writing in one system call
    (``madvise(MADV_POPULATE_WRITE)``) instead of one page fault per page as a read first
    touches them: measured 0.5-1.1 s instead of 1.0-4.4 s for 1.45 GB of new memory on the VMs
    these sessions run on. The GIL is released meanwhile; bytes already there are kept. Only an
    optimization: False (and nothing done) where the system lacks it; the read then faults the
    pages in."""
    madvise = _madvise()
    start = -(-address // mmap.PAGESIZE) * mmap.PAGESIZE
    end = (address + nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if madvise is None or end <= start:
        return False
    return madvise(start, end - start, MADV_POPULATE_WRITE) == 0


@functools.cache
def _madvise():
    """libc's ``madvise``, or None where there is none to call."""
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return madvise
