"""Files as the entries of one blob: what ``packages`` and ``extra_paths`` share.

``mapped(stack, path)`` is a file's bytes for ``BlobWriter.write_views`` (mapped, not read into
memory first).

A resume writes them back in two steps, so that nothing is replaced before every byte verified:

1. ``stage_blob(store, digest, placements)`` streams blob ``digest`` (one read chunk in memory,
   whatever its size) into one temporary file per entry, each in the directory of the
   ``Placement`` it is for; it returns the ``Staged`` files only once the whole blob matched its
   digest and held one entry per placement. Any failure (digest, a full disk, a link in the way)
   removes what it wrote and raises: the files in place are untouched.
2. ``Staged.commit()`` renames each temporary over its target (``os.replace``: a reader sees the
   old file or the new one, never half); ``Staged.discard()`` removes them instead.

Invariants of every write: below a placement's ``root`` (the directory the caller trusts: a
configured extra path, a site-packages) no symbolic link is followed: each directory is opened
one component at a time with ``O_NOFOLLOW`` (a missing one is made), the temporary is created
``O_EXCL | O_NOFOLLOW``, and a link already at the target is replaced, not written through. A
snapshot stores no links, so none is its own. Only permission bits come back (``mode & 0o777``:
never setuid, setgid or sticky); ``mode=None`` gives a new file's default.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from jupyter_gkeresume.errors import GkeResumeError, IntegrityError
from jupyter_gkeresume.snapshot.blobfile import read_verified

if TYPE_CHECKING:  # the store is imported by the first checkpoint, not at load (issue 31)
    from jupyter_gkeresume.snapshot import SnapshotStore

PERMISSION_BITS = 0o777


class UnsafePathError(GkeResumeError):
    """A file cannot be written where it goes without following a link (or leaving its root)."""


def mapped(stack: ExitStack, path: str | os.PathLike) -> object:
    """The bytes of the file at ``path``, mapped until ``stack`` closes."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return stack.enter_context(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


@dataclass(frozen=True)
class Placement:
    """Where one entry goes: ``relative`` (normalized, no ``..``) under ``root``; ``mode``: its
    permission bits (None: a new file's default)."""

    root: str
    relative: str
    mode: int | None = None

    @property
    def target(self) -> str:
        return os.path.join(self.root, self.relative)


@dataclass
class Staged:
    """Temporary files written and verified, not yet in place: ``(placement, temporary name)``;
    ``nbytes``: what they hold."""

    files: list[tuple[Placement, str]] = field(default_factory=list)
    nbytes: int = 0

    def commit(self, last: Callable[[Placement], bool] | None = None) -> None:
        """Rename each temporary over its target, in order; those for which ``last`` is true
        after the others."""
        if last is not None:
            self.files.sort(key=lambda staged: last(staged[0]))
        while self.files:
            placement, temporary = self.files[0]
            with _parent(placement) as (directory, name):
                os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
            self.files.pop(0)

    def discard(self) -> None:
        """Remove the temporaries not yet renamed (best effort)."""
        for placement, temporary in self.files:
            with contextlib.suppress(OSError, GkeResumeError), _parent(
                    placement, make=False) as (directory, _):
                os.unlink(temporary, dir_fd=directory)
        self.files = []


def stage_blob(store: SnapshotStore, digest: str, placements: list[Placement]) -> Staged:
    """Stream blob ``digest`` into temporaries beside ``placements`` (see the module
    docstring); ``IntegrityError`` when it does not match its digest or holds another number
    of entries, ``UnsafePathError`` for a link in the way, ``OSError`` from the disk."""
    staged = Staged()
    current: list[BinaryIO] = []

    def close_current() -> None:
        while current:
            current.pop().close()  # a full disk may only show here: it raises

    def entry(index: int, nbytes: int):
        close_current()
        if index >= len(placements):
            raise IntegrityError(f"blob {digest[:12]} holds more than the {len(placements)} "
                                 "files its manifest lists")
        placement = placements[index]
        with _parent(placement) as (directory, name):
            temporary = f".{name}.gkeresume-{secrets.token_hex(6)}"
            created = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                              | os.O_CLOEXEC, 0o600 if placement.mode is not None else 0o666,
                              dir_fd=directory)
        staged.files.append((placement, temporary))
        f = os.fdopen(created, "wb")
        current.append(f)
        if placement.mode is not None:
            os.fchmod(created, placement.mode & PERMISSION_BITS)
        return f.write

    try:
        with store.open_blob(digest) as (f, size):
            layout = read_verified(f, digest, size, entry)
        close_current()
        if len(layout.entry_sizes) != len(placements):
            raise IntegrityError(f"blob {digest[:12]} holds {len(layout.entry_sizes)} files, its "
                                 f"manifest lists {len(placements)}")
        staged.nbytes = sum(layout.entry_sizes)
    except BaseException:
        with contextlib.suppress(OSError):
            close_current()
        staged.discard()
        raise
    return staged


@contextlib.contextmanager
def _parent(placement: Placement, *, make: bool = True) -> Iterator[tuple[int, str]]:
    """``(descriptor of the directory that holds the placement's file, the file's name)``,
    walked from ``root`` without following a link below it (``make``: missing directories, the
    root included, are made)."""
    parts = placement.relative.split(os.sep)
    if any(p in ("", ".", "..") for p in parts):
        raise UnsafePathError(f"{placement.relative!r} is not a path inside {placement.root}")
    if make:  # the root itself is the caller's (a fresh pod may not have it yet)
        os.makedirs(placement.root, exist_ok=True)
    directory = os.open(placement.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            below = _open_below(directory, part, make, placement)
            os.close(directory)
            directory = below
        yield directory, parts[-1]
    finally:
        os.close(directory)


def _open_below(directory: int, part: str, make: bool, placement: Placement) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(2):  # made by someone else meanwhile: open it the second time
        try:
            return os.open(part, flags, dir_fd=directory)
        except FileNotFoundError:
            if not make:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=directory)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnsafePathError(
                    f"{placement.target}: {part!r} on the way is a symbolic link or not a "
                    "directory: not followed") from None
            raise
    return os.open(part, flags, dir_fd=directory)
