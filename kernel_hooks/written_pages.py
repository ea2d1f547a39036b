"""Whether a big host storage was written since its content key was taken, without reading it
(issue 31: the unchanged second checkpoint).

Linux tracks it for us: the whole pages inside a storage are write-protected through a
userfaultfd in asynchronous mode (``UFFD_FEATURE_WP_ASYNC``, Linux 6.7+: a write is never
blocked, the kernel lifts the protection of the page it hits and remembers that it did), and
``PAGEMAP_SCAN`` on ``/proc/self/pagemap`` tells which pages lost it. Linux's
``Documentation/admin-guide/mm/userfaultfd.rst`` calls it "a more accurate version of
soft-dirty tracking", which this kernel lacks (docs/benchmarks.md). torch's version counter is no
substitute: it misses writes through ``.data``, NumPy views and other libraries.

Call order: ``tracker()`` (None where the system refuses: the caller hashes every time, as
before); ``new_checkpoint()`` as a checkpoint starts writing; then per storage at ``address`` with
bytes ``view``: ``known_digest(address, view)``, the key kept for these bytes when nothing wrote
them since, else None; then ``watch(address, view)`` before the bytes are read, and
``keep(watch, digest)`` once their key is taken.

Invariant: ``known_digest`` returns a key only when every whole page inside the storage has been
write-protected since before the bytes of that key were read, and is still protected, present or
swapped out; when the storage was protected its memory was private and anonymous (not a file's,
shared memory or a device's, which another process or the device may write) and all in memory;
and the bytes of its partial first and last pages (which neighbours share; never protected) are
those kept with the key.

What the page tables do not see is not seen: a device writing pinned memory by DMA. torch's
pinned storages are never watched (``watchable``), nor memory torch or NumPy did not allocate
themselves, nor memory a driver mapped (not anonymous); memory they allocated and another library
pinned afterwards (``cudaHostRegister``, RDMA registration) would be.
Protection costs the program one minor fault per page at its first
write after ``watch``, so a storage is watched once: at first sight. One found written is read
at every checkpoint after that, as before, until it is found unchanged between two of them
(then it is protected again and read once more under the protection): a training loop's
parameters, which change every step, pay the fault once, not after every checkpoint.

Where it runs: Linux 6.7+ with ``userfaultfd`` allowed, unless ``GKERESUME_WATCH_WRITES=0``
(``WATCH_ENV``; a platform that also dumps the process with CRIU, which cannot dump an open
userfaultfd: checkpoint-restore/criu issue 2021, turns it off). Docker's default seccomp profile
(moby/profiles ``seccomp/default.json``) does not list ``userfaultfd``: in a container under it
(and under a runtime default derived from it) the system call fails and every checkpoint reads
every storage, as before.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import os
import platform
import struct
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .memory import whole_pages

#: Storages smaller than this are hashed every time: xxh3 over them costs about what the
#: bookkeeping would (two system calls), and each would cost a protected range.
WATCH_MIN_BYTES = 1 << 20
#: Storages remembered, least recently seen forgotten first.
MAX_WATCHED = 4096
#: ``0`` here turns the watching off: every checkpoint reads every storage.
WATCH_ENV = "GKERESUME_WATCH_WRITES"

_PAGE = mmap.PAGESIZE
_USERFAULTFD_SYSCALL = {"x86_64": 323, "aarch64": 282}
_UFFD_USER_MODE_ONLY = 1
_UFFD_API = 0xAA
_UFFD_FEATURE_WP_UNPOPULATED = 1 << 13  # pages not there yet are protected too
_UFFD_FEATURE_WP_ASYNC = 1 << 15
_UFFDIO_REGISTER_MODE_WP = 1 << 1
_UFFDIO_WRITEPROTECT_MODE_WP = 1 << 0
_PAGE_IS_WPALLOWED, _PAGE_IS_WRITTEN, _PAGE_IS_FILE = 1 << 0, 1 << 1, 1 << 2
_PAGE_IS_PRESENT, _PAGE_IS_SWAPPED = 1 << 3, 1 << 4
_CHECKED = _PAGE_IS_WPALLOWED | _PAGE_IS_WRITTEN | _PAGE_IS_PRESENT | _PAGE_IS_SWAPPED
_SCAN_REGIONS = 64


def _iowr(kind: int, number: int, size: int) -> int:
    return (3 << 30) | (size << 16) | (kind << 8) | number


_UFFDIO_API = _iowr(_UFFD_API, 0x3F, 24)  # struct uffdio_api {api, features, ioctls}
_UFFDIO_REGISTER = _iowr(_UFFD_API, 0x00, 32)  # {range {start, len}, mode, ioctls}
_UFFDIO_WRITEPROTECT = _iowr(_UFFD_API, 0x06, 24)  # {range {start, len}, mode}
_PAGEMAP_SCAN = _iowr(ord("f"), 16, 96)  # struct pm_scan_arg: 12 u64


@dataclass
class Watch:
    """A storage as ``watch`` found it: its whole pages ``[start, end)``, protected where
    ``armed``, (``refused``: the system would not protect them), and the bytes of its partial
    first and last pages."""

    address: int
    nbytes: int
    start: int
    end: int
    head: bytes
    tail: bytes
    armed: bool
    refused: bool = False
    spoiled: bool = False  # another storage's pages were protected over some of these since


@dataclass
class _Entry:
    watch: Watch
    digest: bytes


class WrittenPages:
    """The storages watched in this process and the keys of their bytes (thread-safe)."""

    def __init__(self, uffd: int, pagemap: int):
        self._uffd = uffd
        self._pagemap = pagemap
        self._libc = _libc()
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._private: list[tuple[int, int]] | None = None
        self._watching: list[Watch] = []  # watched, their keys not kept yet

    def new_checkpoint(self) -> None:
        """Called as a checkpoint starts writing, once every storage it writes is allocated:
        the process's private anonymous memory is read again (``/proc/self/maps``) at the next
        ``watch``, so that it knows every such storage's mapping."""
        with self._lock:
            self._private = None
            self._watching.clear()  # a watch never kept (its write failed) is done with

    def known_digest(self, address: int, view: memoryview) -> bytes | None:
        """The key kept for the storage at ``address`` when nothing wrote it since (see the
        module's invariant), else None; a storage found written is not protected again until
        it is found unchanged (``kept_digest``)."""
        entry = self._entry(address, len(view))
        if entry is None or not entry.watch.armed:
            return None
        if self._unwritten(entry.watch, view):
            with self._lock:  # another storage's watch takes the pages (and their marks) only
                # after it dropped this entry: still here, its pages were not taken before
                # the scan above
                if self._entries.get(address) is entry:
                    return entry.digest
        entry.watch.armed = False
        return None

    def kept_digest(self, address: int, nbytes: int) -> bytes | None:
        """The key kept at the last checkpoint for a storage found written then (not protected
        now): when its bytes have that key again, they stayed put since, and ``watch(...,
        again=True)`` protects them again."""
        entry = self._entry(address, nbytes)
        unprotected = entry is not None and not entry.watch.armed and not entry.watch.refused
        return entry.digest if unprotected else None

    def watch(self, address: int, view: memoryview, again: bool = False,
              made_here: bool = False) -> Watch:
        """Protect the whole pages of a storage seen for the first time (or ``again``), before
        its bytes are read: a write from then on is seen. A storage found written before is
        not protected again by default: its program would pay a fault per page each time.
        ``made_here``: a resume allocated this memory itself, so it is known private and
        anonymous without a look at the process's mappings. (Not its mappings of blob files:
        protecting a file's pages in a mapping drops them on a disk's file system, and the
        program's next read of each page takes a fault, 0.45 us a page measured: more than
        reading it at the next checkpoint costs.)"""
        nbytes = len(view)
        start, end = whole_pages(address, nbytes)
        seen = self._entry(address, nbytes)
        watch = Watch(address, nbytes, start, end, b"", b"", False,
                      seen is not None and seen.watch.refused)
        if (seen is None or again) and not watch.refused and end > start:
            with self._lock:  # pages protected for another storage are that storage's no more
                for other in [a for a, e in self._entries.items()
                              if e.watch.start < end and start < e.watch.end]:
                    del self._entries[other]
                for other in self._watching:
                    other.spoiled = other.spoiled or (other.start < end and start < other.end)
                self._watching.append(watch)
            if made_here or self._is_private(start, end):
                watch.armed, watch.refused = self._protect(start, end)
            else:
                watch.refused = True
        watch.head, watch.tail = bytes(view[:start - address]), bytes(view[end - address:])
        return watch

    def keep(self, watch: Watch, view: memoryview, digest: bytes) -> None:
        """Remember ``digest`` as the key of the bytes read after ``watch``; it serves only
        while nothing writes them (not at all when a partial page changed while they were
        read, or another storage's watch protected some of its pages again meanwhile: a write
        between the two would not be seen)."""
        with self._lock:
            self._watching = [w for w in self._watching if w is not watch]
            if watch.armed and (watch.spoiled or not self._edges_unchanged(watch, view)):
                watch.armed = False
            self._entries[watch.address] = _Entry(watch, digest)
            self._entries.move_to_end(watch.address)
            while len(self._entries) > MAX_WATCHED:
                self._entries.popitem(last=False)

    def _entry(self, address: int, nbytes: int) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(address)
            if entry is None or entry.watch.nbytes != nbytes:
                return None
            self._entries.move_to_end(address)
            return entry

    def _is_private(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` lies in private anonymous memory (as ``new_checkpoint``
        found it): not a file's, not shared, not a device's (pinned memory a driver mapped,
        which its device writes by DMA)."""
        with self._lock:
            if self._private is None:
                self._private = _private_anonymous_memory()
            spans = self._private
        at = bisect.bisect_right(spans, (start, float("inf"))) - 1
        return at >= 0 and spans[at][0] <= start and end <= spans[at][1]

    def _protect(self, start: int, end: int) -> tuple[bool, bool]:
        """Register and write-protect ``[start, end)``; (armed, refused): armed when every page
        is now protected, in memory and anonymous; refused when the system would not protect it
        or it is a file's or shared memory (another process may write it). A page not in memory
        cannot be told apart: shared memory not mapped here yet reads as protected and swapped
        out (a marker the protection leaves), so it is not armed now (it may be when its bytes
        were read: ``watch(..., again=True)``)."""
        span = struct.pack("QQ", start, end - start)
        register = ctypes.create_string_buffer(span + struct.pack("QQ", _UFFDIO_REGISTER_MODE_WP, 0))
        protect = ctypes.create_string_buffer(span + struct.pack("Q", _UFFDIO_WRITEPROTECT_MODE_WP))
        if (self._libc.ioctl(self._uffd, _UFFDIO_REGISTER, register) != 0
                or self._libc.ioctl(self._uffd, _UFFDIO_WRITEPROTECT, protect) != 0):
            return False, True
        found = self._categories(start, end, _CHECKED | _PAGE_IS_FILE, _PAGE_IS_PRESENT)
        if found is not None and found & _PAGE_IS_FILE:
            return False, True
        return found is not None and not found & _PAGE_IS_WRITTEN, False

    def _unwritten(self, watch: Watch, view: memoryview) -> bool:
        found = self._categories(watch.start, watch.end, _CHECKED,
                                 _PAGE_IS_PRESENT | _PAGE_IS_SWAPPED)
        return (found is not None and not found & _PAGE_IS_WRITTEN
                and self._edges_unchanged(watch, view))

    @staticmethod
    def _edges_unchanged(watch: Watch, view: memoryview) -> bool:
        head, tail = watch.start - watch.address, watch.end - watch.address
        # as bytes: a memoryview compares with bytes item by item (12 us for two partial pages)
        return view[:head].tobytes() == watch.head and view[tail:].tobytes() == watch.tail

    def _categories(self, start: int, end: int, wanted: int, needed: int) -> int | None:
        """The ``wanted`` categories found on the pages of ``[start, end)``, together; None
        unless every page is registered for protection and has one of the ``needed`` (a hole or
        a page dropped has none). Asking for ``_PAGE_IS_FILE`` costs the kernel a look at every
        page's own record (4x the time): ``watch`` asks, the checks after it do not (a page
        of anonymous memory stays so until its mapping is replaced, and the new one is not
        registered)."""
        regions = (ctypes.c_uint64 * (3 * _SCAN_REGIONS))()
        found, at = 0, start
        while at < end:
            count = _scan(self._libc, self._pagemap, at, end, regions, wanted)
            if count < 0:
                return None
            for i in range(count):
                first, last, categories = regions[3 * i:3 * i + 3]
                if (first != at or not categories & _PAGE_IS_WPALLOWED
                        or not categories & needed):
                    return None
                found |= categories
                at = last
            if count < _SCAN_REGIONS and at < end:
                return None  # the walk ended before the range did: a hole
        return found


def _private_anonymous_memory() -> list[tuple[int, int]]:
    """The spans of this process's private anonymous mappings (``/proc/self/maps``: a ``p`` in
    the permissions, no device, no inode, no path but the heap's, the stack's or a name given
    with ``PR_SET_VMA_ANON_NAME``), sorted, adjacent ones joined."""
    spans: list[tuple[int, int]] = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            path = fields[5].strip() if len(fields) > 5 else ""
            if (fields[1][3] != "p" or fields[3] != "00:00" or fields[4] != "0"
                    or not (path in ("", "[heap]", "[stack]") or path.startswith("[anon:"))):
                continue
            low, high = (int(x, 16) for x in fields[0].split("-"))
            if spans and spans[-1][1] == low:
                spans[-1] = (spans[-1][0], high)
            else:
                spans.append((low, high))
    return spans


def watchable(source: Any, kind: str, device: str) -> bool:
    """Whether a collected storage may be watched: host memory that torch or NumPy allocated
    itself (a resizable torch storage, an array that owns its data: not memory another object
    lends, such as another library's pinned buffer or a mapped file) and that torch did not pin
    for a device's DMA, which the page tables do not see. (Only torch's CUDA, once started,
    pins memory torch allocated: ``is_pinned`` is not asked before, since it may start a CUDA
    context.)"""
    if device != "cpu":
        return False
    if kind == "numpy":
        return bool(source.flags.owndata)
    if kind != "torch" or not source.resizable():
        return False
    torch = sys.modules.get("torch")
    return not (torch.cuda.is_initialized() and source.is_pinned())


_tracker: tuple[int, WrittenPages | None] | None = None
_tracker_lock = threading.Lock()


def tracker() -> WrittenPages | None:
    """This process's tracker, opened at the first call (again in a forked child, whose pages
    are not protected), or None where the system refuses (another kernel or architecture, a
    seccomp profile without ``userfaultfd``, Linux before 6.7) or ``WATCH_ENV`` is ``0``."""
    global _tracker
    with _tracker_lock:
        if _tracker is None or _tracker[0] != os.getpid():
            _tracker = (os.getpid(), _open())
        return _tracker[1]


def _scan(libc: ctypes.CDLL, pagemap: int, start: int, end: int, regions: ctypes.Array,
          wanted: int) -> int:
    """``PAGEMAP_SCAN`` of ``[start, end)``: fills ``regions`` (``page_region`` triples: start,
    end, categories) with runs of pages alike in their ``wanted`` categories; returns how many
    (-1 on an error)."""
    arg = ctypes.create_string_buffer(struct.pack(
        "12Q", 96, 0, start, end, 0, ctypes.addressof(regions), len(regions) // 3, 0, 0, 0, 0,
        wanted))
    return libc.ioctl(pagemap, _PAGEMAP_SCAN, arg)


def _libc() -> ctypes.CDLL:
    """libc, its ``ioctl`` declared (the request numbers need all 32 bits unsigned)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    return libc


def _open() -> WrittenPages | None:
    number = _USERFAULTFD_SYSCALL.get(platform.machine())
    if number is None or os.environ.get(WATCH_ENV, "").strip() == "0":
        return None
    libc = _libc()
    uffd = libc.syscall(number, os.O_CLOEXEC | _UFFD_USER_MODE_ONLY)
    if uffd < 0:
        return None
    pagemap = -1
    try:
        features = _UFFD_FEATURE_WP_ASYNC | _UFFD_FEATURE_WP_UNPOPULATED
        api = ctypes.create_string_buffer(struct.pack("QQQ", _UFFD_API, features, 0))
        if libc.ioctl(uffd, _UFFDIO_API, api) != 0:
            raise OSError(ctypes.get_errno(), "UFFDIO_API")
        pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
        pages = WrittenPages(uffd, pagemap)
        # a scan of one page in hand (not registered: reported written) checks the layout
        memory = ctypes.create_string_buffer(2 * _PAGE)
        page = whole_pages(ctypes.addressof(memory), 2 * _PAGE)[0]
        region = (ctypes.c_uint64 * 3)()
        if (_scan(libc, pagemap, page, page + _PAGE, region, _CHECKED) != 1
                or list(region[:2]) != [page, page + _PAGE] or not region[2] & _PAGE_IS_WRITTEN):
            raise OSError(ctypes.get_errno(), "PAGEMAP_SCAN")
        return pages
    except OSError:
        os.close(uffd)
        if pagemap >= 0:
            os.close(pagemap)
        return None
