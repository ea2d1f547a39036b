"""Where a store's bytes live: a local directory or any fsspec filesystem (GCS through gcsfs).

``SnapshotStore`` picks one backend when it is built (``open_backend``) and calls only the
methods of ``Backend``; the one exception is hash-while-write, which needs a rename and so
exists only locally (``LocalBackend.write_named_by_content``). Paths are the backend's own (OS paths for a
local directory, ``bucket/key`` for an object store).

Every backend method raises the builtin ``FileNotFoundError`` for a missing object and
``FileExistsError`` when a create-only write finds one; the store turns them into its own errors
(``NotFoundInStore``, ``CommitConflictError``) at this boundary, so they never leak further.

- ``LocalBackend``: files 0600, directories 0700 (whatever the umask), written under a temporary
  name, fsynced, renamed (create-only: hard-linked, which fails when the name exists); every
  directory it creates is fsynced into its parent. A blob whose name is its digest can be
  written before that name is known: hashed as it is written, then linked under it. A store
  directory owned by another user or writable by group or others is refused when it is opened.
- ``FsspecBackend``: blobs stream up through ``transfer.upload_object`` (no renames on object stores:
  a partial upload is never visible), restarted on transient failures when their parts can be
  read again; create-only writes are ``ifGenerationMatch=0`` simple uploads; listings are never
  served from fsspec's cache (another pod may have changed the bucket). ``transfer`` (gcsfs's
  internals, aiohttp) is imported when the first one is built: a local store never loads it.
"""

from __future__ import annotations

import os
import random
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, BinaryIO, Protocol, TypeVar

from ..errors import StoreError
from .transfer_types import UploadInterrupted

WRITE_CHUNK = 16 << 20
#: The chunk a one-thread hash of a blob written as it is hashed sees just before it is written:
#: small enough to stay in a core's cache from the hash to the copy, so each byte is read from
#: memory once (a 16 MiB chunk is read twice). A hash that spreads over the cores (BLAKE3 of a
#: big blob) is fed ``WRITE_CHUNK``: in 1 MiB pieces its threads cost more than they save
#: (docs/benchmarks.md, issue 31).
OBSERVED_CHUNK = 1 << 20
RETRY_BASE_DELAY = 0.5
RETRY_MAX_DELAY = 8.0
FILE_MODE = 0o600
DIR_MODE = 0o700
T = TypeVar("T")
#: Told the byte count of each chunk as it is written (progress); see ``Backend.write``.
Sent = Callable[[int], None]


class Backend(Protocol):
    """The operations a store needs; ``find`` returns ``{path: (size, mtime or None)}``."""

    local: bool

    def size(self, path: str) -> int: ...
    def stat(self, path: str) -> tuple[int, int | None]:
        """``(size, crc32c)`` from one metadata request; crc32c None where the store keeps none."""
    def read(self, path: str, limit: int | None = None) -> bytes:
        """The object's bytes; with ``limit``, at most its first ``limit`` bytes."""
    def open_read(self, path: str, keep_cache: bool = False) -> Any: ...  # yields (file, size)
    def write(self, path: str, parts: Iterable[object], sent: Sent | None = None) -> int | None:
        """Write ``parts`` (buffers, in order) as ``path``, durably; ``sent`` sees each chunk's
        size as it is written (where the backend cannot tell, the whole size once written).
        Returns the crc32c the store keeps of it (checked against the bytes sent), or None."""
    def put(self, path: str, data: bytes) -> None: ...
    def create(self, path: str, data: bytes) -> None: ...
    def touch(self, path: str) -> None: ...
    def delete(self, path: str) -> None: ...
    def find(self, folder: str) -> dict[str, tuple[int, float | None]]: ...
    def names(self, folder: str) -> list[str]: ...


def open_backend(fs: Any, root: str, *, chunk_bytes: int, retries: int) -> Backend:
    """The backend for an fsspec filesystem; ``root`` is the workspace folder."""
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        return LocalBackend(root)
    return FsspecBackend(fs, chunk_bytes=chunk_bytes, retries=retries)


# -- local directory -------------------------------------------------------------------------
def local_root(url: str) -> str | None:
    """The folder of a local path or ``file://`` URL as fsspec's ``LocalFileSystem`` names it
    (absolute: ``~`` expanded, a relative path under the working directory; not normalized, so
    ``..`` stays the OS's to resolve, through symbolic links), or None for any other fsspec URL
    (``gs://``, ``memory://``, chained ``a::b``)."""
    path = url.removeprefix("file://")
    if "://" in path or "::" in path or path.startswith("data:") or not path:
        return None
    path = os.path.expanduser(path)
    if not os.path.isabs(path):
        path = os.path.join(os.getcwd(), "" if path == "." else path.removeprefix("./"))
    return path.rstrip("/") or "/"


#: Local files at least this big leave the page cache once written (``_write_temporary``).
UNCACHED_BYTES = 1 << 20


class LocalBackend:
    """A directory on this machine (or an NFS home): private modes, durable renames."""

    local = True

    def __init__(self, root: str):
        for folder in (os.path.dirname(root), root):
            check_private_directory(folder)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def stat(self, path: str) -> tuple[int, int | None]:
        return os.stat(path).st_size, None

    def read(self, path: str, limit: int | None = None) -> bytes:
        with open(path, "rb") as f:
            return f.read(-1 if limit is None else limit)

    @contextmanager
    def open_read(self, path: str, keep_cache: bool = False) -> Iterator[tuple[BinaryIO, int]]:
        """The file and its size; once the caller is done with it, its cached pages are dropped
        (``posix_fadvise(DONTNEED)``): a blob is read once, into the reader's own memory, so a
        second copy in the page cache only costs memory. Measured on a 5 GB resume (2 vCPUs, 24
        GiB): 4.2-8.0 s with 3.6-6.4 s of system time without it, 3.2-3.5 s and 2.2 s with it
        (docs/benchmarks.md). ``keep_cache``: the caller maps the file, so its cached pages
        are the caller's memory; they are left alone (dropping them is futile and cost about
        1 CPU s on that resume)."""
        with open(path, "rb") as f:
            try:
                yield f, os.fstat(f.fileno()).st_size
            finally:
                if not keep_cache and hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)

    def write(self, path: str, parts: Iterable[object], sent: Sent | None = None) -> None:
        self._write(path, parts, create_only=False,
                    observe=None if sent is None else lambda chunk: sent(len(chunk)))

    def put(self, path: str, data: bytes) -> None:
        self._write(path, [data], create_only=False)

    def create(self, path: str, data: bytes) -> None:
        self._write(path, [data], create_only=True)

    def touch(self, path: str) -> None:
        os.utime(path)

    def delete(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def find(self, folder: str) -> dict[str, tuple[int, float | None]]:
        found: dict[str, tuple[int, float | None]] = {}
        for parent, _, files in os.walk(folder):
            for name in files:
                path = os.path.join(parent, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue  # removed while we walked
                found[path] = (st.st_size, st.st_mtime)
        return found

    def names(self, folder: str) -> list[str]:
        try:
            return os.listdir(folder)
        except FileNotFoundError:
            return []

    def write_named_by_content(self, folder: str, parts: Iterable[object],
                               observe: Callable[[memoryview], object],
                               path_for: Callable[[], str], chunk: int = WRITE_CHUNK) -> bool:
        """Write ``parts`` to a new temporary file in ``folder`` (``observe`` sees every chunk,
        of ``chunk`` bytes at most, just before it is written: a hasher's ``update``), fsync it,
        then link it as ``path_for()``,
        called once every byte is written (the name depends on them). True when the path was
        new; False when it held a file already: ours replaces it all the same (never keep a
        file found under a predictable name: it may hold other bytes of the same size), and
        a new file is young, so gc's grace period protects it."""
        make_private_dirs(folder)
        tmp = f"{folder}/.tmp-{uuid.uuid4().hex}"
        try:
            self._write_temporary(tmp, parts, observe, chunk)
            path = path_for()
            make_private_dirs(os.path.dirname(path))
            new = _link_or_replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        fsync_path(os.path.dirname(path))
        return new

    def _write(self, path: str, parts: Iterable[object], *, create_only: bool,
               observe: Callable[[memoryview], object] | None = None) -> None:
        folder = os.path.dirname(path)
        make_private_dirs(folder)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            self._write_temporary(tmp, parts, observe)
            if create_only:
                os.link(tmp, path)  # FileExistsError when another writer won
            else:
                os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        fsync_path(folder)

    @staticmethod
    def _write_temporary(tmp: str, parts: Iterable[object],
                         observe: Callable[[memoryview], object] | None = None,
                         chunk: int = WRITE_CHUNK) -> None:
        """Create ``tmp`` (private, never an existing file), write ``parts`` and fsync it. The
        cached pages of a file of ``UNCACHED_BYTES`` or more are dropped once it is durable (a
        blob is written once and read, if ever, by a later resume): the next blob's writes
        reuse that memory instead of making the system reclaim some. Measured on a 2 vCPU VM,
        3.2 GB in 128 MiB files, 4 writers (``benchmarks/write_cache.py``): 1.5 s and 1.2 CPU s
        against 3.0 s and 4.2 CPU s keeping them. A no-op on tmpfs, whose pages are the file."""
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            write_parts(f, parts, observe, chunk)
            f.flush()
            os.fsync(f.fileno())
            if f.tell() >= UNCACHED_BYTES and hasattr(os, "posix_fadvise"):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def _link_or_replace(tmp: str, path: str) -> bool:
    """Link ``tmp`` as ``path``: True. When ``path`` exists, ``tmp`` replaces it: False."""
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        os.replace(tmp, path)
        return False


def check_private_directory(folder: str) -> None:
    """Refuse an existing store directory that another user owns or that group or others can
    write (they could plant or swap snapshots); a missing one is created private later."""
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"store path {folder} is not a directory")
    if st.st_uid != os.geteuid():
        raise StoreError(f"store directory {folder} belongs to another user (uid {st.st_uid}): "
                         "use a directory of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StoreError(f"store directory {folder} is writable by group or others "
                         f"(mode {stat.S_IMODE(st.st_mode):o}): run `chmod go-w {folder}`")


def make_private_dirs(folder: str) -> None:
    """Create ``folder`` and its missing parents with mode 0700, each fsynced into its parent
    so that it survives a crash of the machine."""
    missing = []
    while not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for path in reversed(missing):
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            continue  # another writer made it first
        os.chmod(path, DIR_MODE)  # the umask may have taken bits; never add any beyond 0700
        fsync_path(os.path.dirname(path))


def fsync_path(path: str) -> None:
    """fsync a file or a directory by its path (a directory's fsync makes its names durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_parts(f: BinaryIO, parts: Iterable[object],
                observe: Callable[[memoryview], object] | None = None,
                chunk: int = WRITE_CHUNK) -> None:
    """Write ``parts`` (buffers, in order) in chunks of at most ``chunk`` bytes (and of
    ``WRITE_CHUNK``); ``observe`` sees every chunk just before it is written."""
    step = min(chunk, WRITE_CHUNK)
    for part in parts:
        view = memoryview(part).cast("B")
        for start in range(0, len(view), step):
            chunk = view[start : start + step]
            if observe is not None:
                observe(chunk)
            f.write(chunk)


# -- fsspec (GCS, memory, ...) ---------------------------------------------------------------
class FsspecBackend:
    """Any fsspec filesystem; the GCS path streams through resumable sessions (``transfer``)."""

    local = False

    def __init__(self, fs: Any, *, chunk_bytes: int, retries: int):
        from . import transfer  # the GCS stack: only object stores need it (issue 31)

        self.fs, self.chunk_bytes, self.retries = fs, chunk_bytes, retries
        self.transfer = transfer

    def size(self, path: str) -> int:
        return self.stat(path)[0]  # never a cached listing: gc may have removed it

    def stat(self, path: str) -> tuple[int, int | None]:
        return self.transfer.stored_checksum(self.fs, path)

    def read(self, path: str, limit: int | None = None) -> bytes:
        if limit is None:
            return self.fs.cat_file(path)
        return self.fs.cat_file(path, start=0, end=limit)  # one ranged GET on GCS

    @contextmanager
    def open_read(self, path: str, keep_cache: bool = False) -> Iterator[tuple[BinaryIO, int]]:
        # The first window's answer tells the blob's size: no metadata request.
        window = self.transfer.READ_WINDOW
        first, size = self.transfer.read_first(self.fs, path, window)
        with self.transfer.RangedReader(self.fs, path, size, window, first) as f:
            yield f, size

    def write(self, path: str, parts: Iterable[object], sent: Sent | None = None) -> int | None:
        attempts = 1 + self.retries if isinstance(parts, Sequence) else 1
        try:
            stored = retrying(lambda: self.transfer.upload_object(self.fs, path, parts,
                                                                  self.chunk_bytes),
                              attempts)
        except FileNotFoundError:
            raise StoreError(f"no such bucket for {path.split('/', 1)[0]}") from None
        if sent is not None:
            sent(stored.size)
        return stored.crc32c

    def put(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, data, mode="overwrite")

    def create(self, path: str, data: bytes) -> None:
        """On a lost reply gcsfs retries, and the retry may meet its own object: equal bytes
        there mean the write was ours."""
        try:
            self.fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            self.fs.invalidate_cache(path)
            if self.fs.cat_file(path) != data:
                raise
        self.fs.invalidate_cache(path)

    def touch(self, path: str) -> None:
        self.fs.setxattrs(path, gkeresume_touched=f"{time.time():.3f}")

    def delete(self, path: str) -> None:
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            pass

    def find(self, folder: str) -> dict[str, tuple[int, float | None]]:
        self.fs.invalidate_cache(folder)
        try:
            entries = self.fs.find(folder, detail=True)
        except FileNotFoundError:
            return {}
        return {path: (int(info.get("size") or 0), object_mtime(info))
                for path, info in entries.items()}

    def names(self, folder: str) -> list[str]:
        self.fs.invalidate_cache(folder)
        try:
            return [n.rsplit("/", 1)[-1] for n in self.fs.ls(folder, detail=False)]
        except FileNotFoundError:
            return []


def retrying(action: Callable[[], T], attempts: int) -> T:
    """Run ``action``; on a transient failure wait (exponential backoff, full jitter) and run it
    again, ``attempts`` times in all. Permanent failures leave at once."""
    for attempt in range(attempts):
        try:
            return action()
        except Exception as exc:
            if attempt == attempts - 1 or not is_transient(exc):
                raise
        time.sleep(random.uniform(0, min(RETRY_MAX_DELAY, RETRY_BASE_DELAY * 2**attempt)))
    raise AssertionError("unreachable")


def is_transient(exc: BaseException) -> bool:
    """Worth restarting a whole upload: its session was lost or cut short, or it timed out.
    (Single requests that failed on 5xx, 408, 429 or a dropped connection were already retried
    by gcsfs, about 35 s in all: trying those again here would only make users wait longer.)"""
    return isinstance(exc, (UploadInterrupted, TimeoutError))


def object_mtime(info: dict[str, Any]) -> float | None:
    """Last write or ``touch`` of an object, from fsspec's ``info``."""
    touched = (info.get("metadata") or {}).get("gkeresume_touched")
    if touched:
        try:
            return max(float(touched), _modified(info) or 0.0)
        except ValueError:
            pass
    return _modified(info)


def _modified(info: dict[str, Any]) -> float | None:
    for key in ("mtime", "updated", "LastModified"):
        value = info.get(key)
        if isinstance(value, (int, float)):
            return float(value)
        if value is not None and hasattr(value, "timestamp"):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                return None
    return None
