"""Read a snapshot's blobs ahead into the page cache while a resume starts its kernels.

A resume through the server first starts a kernel (process start, ``import torch``: seconds),
and only then does the kernel read the blobs. ``read_ahead`` runs in a worker thread as soon as
the resume starts and asks the OS to read each blob file of the snapshots into the page cache
(``posix_fadvise(WILLNEED)`` starts the reads without waiting for them and allocates nothing in
this process), so the kernel's reads later find the bytes in memory.

Invariants: it never raises (a read-ahead that fails only loses the overlap; the kernel reads
and verifies every blob anyway); it reads ahead at most ``budget`` bytes (by default half of the
memory available when it starts), so it does not evict the pages the kernel is about to use;
it does nothing for a store that is not a local directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from logging import Logger

from .errors import GkeResumeError
from .snapshot import SigningKey, SnapshotStore, load_manifest


def free_memory_budget() -> int:
    """Half of the memory available now: Linux's ``MemAvailable`` (free plus the page cache it
    can reclaim), else the free pages; 0 where the OS says neither."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError):
        return 0


def blob_files(store: SnapshotStore, key: SigningKey, snapshot_ids: list[str],
               log: Logger) -> list[tuple[str, int]]:
    """``(path, size)`` of every blob of the snapshots, largest first, each once. A snapshot
    whose manifest cannot be read is left out (the resume itself reports that)."""
    sizes: dict[str, int] = {}
    for snapshot_id in snapshot_ids:
        try:
            sizes.update(load_manifest(store, snapshot_id, key).blobs)
        except GkeResumeError as exc:
            log.debug("gkeresume: no read-ahead for %s: %s", snapshot_id, exc)
    return sorted(((store.blob_path(d), n) for d, n in sizes.items()), key=lambda pn: -pn[1])


def read_ahead(store: SnapshotStore, key: Callable[[], SigningKey], snapshot_ids: list[str],
               log: Logger, *, budget: int | None = None) -> list[str]:
    """Queue the reads of the blobs of ``snapshot_ids``; returns the paths it asked for.

    Blocking (reads the manifests): run it in a worker thread. A no-op for a store that is not
    a local directory: an object store's bytes are not in any page cache here, and fetching them
    ahead would mean holding a copy in memory that the kernel then reads again."""
    if not store.backend.local or not hasattr(os, "posix_fadvise"):
        return []
    try:
        files = blob_files(store, key(), snapshot_ids, log)
    except Exception as exc:  # never fails the resume: the kernel reads everything anyway
        log.debug("gkeresume: no read-ahead: %s", exc)
        return []
    left = free_memory_budget() if budget is None else budget
    asked: list[str] = []
    for path, size in files:
        if size > left:
            continue  # a smaller one may still fit
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue  # a missing blob: the kernel's read says so, with its name
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            continue
        finally:
            os.close(fd)
        left -= size
        asked.append(path)
    return asked
