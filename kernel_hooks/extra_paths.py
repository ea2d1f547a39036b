"""Directories outside the home volume, stored with each snapshot and put back at resume.

The server's ``c.GkeResume.extra_paths`` reaches its kernels as ``GKERESUME_EXTRA_PATHS``
(absolute directories joined by ``os.pathsep``), its ``extra_paths_max_bytes`` as
``GKERESUME_EXTRA_PATHS_MAX_BYTES``.

Call order:

1. ``capture_paths(write_blob)`` in ``take_checkpoint``: each configured directory becomes one
   blob, entry ``i`` the bytes of its ``i``-th regular file (walked in sorted order, symbolic
   links not followed), written by the snapshot's ``BlobWriter`` (content-addressed: an
   unchanged directory is claimed, not written again). A directory that would take the
   snapshot's total over the limit is not stored at all (never half of it), nor one that is
   missing or unreadable; each is named, as are the entries that are not regular files.
2. ``restore_paths(store, records)`` in ``take_resume`` after the packages and before anything
   is unpickled (an object may open its file as it loads): each directory that this kernel's
   server also names in ``extra_paths`` gets its files back, each blob streamed into temporary
   files and its digest verified before any file is replaced (``blob_files``: no symbolic link
   below the directory is followed, setuid/setgid bits are dropped, a directory that cannot be
   written entirely keeps every file as it was); files there that the snapshot does not hold
   are left alone. A directory
   the server here does not name is not written to: its line says so.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jupyter_gkeresume.errors import GkeResumeError
from jupyter_gkeresume.snapshot.format import PathRecord
from jupyter_gkeresume.units import human_bytes

from .blob_files import Placement, mapped, stage_blob
from .results import Skipped

if TYPE_CHECKING:
    from jupyter_gkeresume.snapshot import SnapshotStore

PATHS_ENV = "GKERESUME_EXTRA_PATHS"
LIMIT_ENV = "GKERESUME_EXTRA_PATHS_MAX_BYTES"
DEFAULT_LIMIT = 1 << 30
KIND = "extra path"


class ExtraPathError(GkeResumeError):
    """A stored directory cannot be put back as its manifest says."""


@dataclass
class Captured:
    """What ``capture_paths`` stored, and what it did not (``skipped``: named in the report)."""

    records: list[PathRecord] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)  # blob -> bytes, for the manifest
    skipped: list[Skipped] = field(default_factory=list)
    new_bytes: int = 0  # of blobs written now (the others were in the store)


def configured() -> list[str]:
    """The directories this kernel's server stores with snapshots (absolute, normalized)."""
    raw = os.environ.get(PATHS_ENV, "")
    return list(dict.fromkeys(os.path.normpath(p) for p in raw.split(os.pathsep)
                              if os.path.isabs(p)))


def limit() -> int:
    """The most bytes of files the directories may add to one snapshot."""
    try:
        return int(os.environ.get(LIMIT_ENV, DEFAULT_LIMIT))
    except ValueError:
        return DEFAULT_LIMIT


def capture_paths(write_blob: Callable[[list[tuple[str, object]]], tuple[str, int, bool]],
                  ) -> Captured:
    """Store the configured directories (see the module docstring); ``write_blob`` is
    ``BlobWriter.write_more``."""
    out, room = Captured(), limit()
    for directory in configured():
        try:
            files, size, others = _files(directory)
        except OSError as exc:
            out.skipped.append(Skipped(directory, KIND, f"not stored: {exc.strerror or exc}"))
            continue
        if size > room:
            out.skipped.append(Skipped(directory, KIND, (
                f"not stored: its files hold {human_bytes(size)}, over the "
                f"{human_bytes(room)} left of the limit (c.GkeResume.extra_paths_max_bytes)")))
            continue
        try:
            with ExitStack() as stack:
                contents = [mapped(stack, os.path.join(directory, f)) for f, _ in files]
                digest, blob_size, new = write_blob([("uint8", c) for c in contents])
        except OSError as exc:  # a file went away or cannot be read while storing
            out.skipped.append(Skipped(directory, KIND, f"not stored: {exc}"))
            continue
        room -= size
        out.records.append(PathRecord(directory, digest, [f for f, _ in files],
                                      [m for _, m in files]))
        out.sizes[digest] = blob_size
        out.new_bytes += blob_size if new else 0
        if others:
            out.skipped.append(Skipped(directory, KIND, (
                f"stored without what is not a regular file: {', '.join(others[:5])}"
                + (f" and {len(others) - 5} more" if len(others) > 5 else ""))))
    return out


def _files(directory: str) -> tuple[list[tuple[str, int]], int, list[str]]:
    """``(relative path, mode)`` of each regular file under ``directory`` in sorted order, their
    bytes, and the other entries (symbolic links, sockets, ...) by relative path."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(0, "not a directory here")
    files, others, size = [], [], 0

    def failed(exc: OSError) -> None:
        raise exc

    for root, dirs, names in os.walk(directory, onerror=failed):
        dirs.sort()
        for name in sorted(names) + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                files.append((relative, stat.S_IMODE(info.st_mode)))
                size += info.st_size
            else:
                others.append(relative)
    return files, size, others


#: What the line of a path that did not come back says (the resume's verdict looks for it).
NOT_PUT_BACK = "not put back"


def restore_paths(store: SnapshotStore, records: list[PathRecord]) -> list[str]:
    """Put back the directories of ``records`` (see the module docstring); one line each."""
    here, lines = configured(), []
    for record in records:
        if record.path not in here:
            lines.append(f"{record.path}: {NOT_PUT_BACK}: this server's c.GkeResume.extra_paths "
                         "does not name it")
            continue
        try:
            lines.append(_restore_one(store, record))
        except (GkeResumeError, OSError) as exc:  # the others still come back
            lines.append(f"{record.path}: {NOT_PUT_BACK}: {exc}")
    return lines


def _restore_one(store: SnapshotStore, record: PathRecord) -> str:
    """Every file of ``record`` streamed in beside its place, verified, then renamed into place
    (``blob_files``): no link below the directory is followed, no setuid/setgid bit comes back,
    and one that cannot be written leaves every file of the directory as it was."""
    relatives = [os.path.normpath(f) for f in record.files]
    if any(os.path.isabs(r) or r == ".." or r.startswith(f"..{os.sep}") for r in relatives):
        raise ExtraPathError("a file would land outside it")
    staged = stage_blob(store, record.blob, [
        Placement(record.path, relative, mode)
        for relative, mode in zip(relatives, record.modes, strict=True)])
    try:
        staged.commit()
    finally:
        staged.discard()
    return f"{record.path}: {len(relatives)} files put back ({human_bytes(staged.nbytes)})"
