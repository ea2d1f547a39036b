"""Streaming blob transfer for object stores: chunked uploads and ranged reads, bounded memory.

The store and the verifier call only this module:

- ``upload(fs, path, parts, chunk_bytes) -> int`` (bytes written) or ``upload_object(...) ->
  StoredObject`` (size and crc32c as stored, already compared with ours) write a blob from its
  parts (buffers, in order) without ever holding the whole blob. On GCS: a blob up to one chunk
  is one simple upload, a bigger one streams through one resumable session (``gcs_upload``), a
  list or tuple above ``CompositePolicy.threshold`` goes up as parallel parts composed
  server-side (``composite``); every upload carries its crc32c. The object appears under its
  name only when complete. Other filesystems write a temporary name and move it into place.
- ``stored_checksum(fs, path) -> (size, crc32c | None)``: one metadata request, no read of the
  bytes (metadata verification).
- ``read_first``: a blob's first window and its size (on GCS one request);
  ``RangedReader`` / ``read_range_into``: ranged GETs streamed into the caller's buffers.

All are safe to call from many threads at once: each call owns its session/reader, and gcsfs runs
every request on its own event-loop thread. Faults: gcsfs retries single requests (5xx, 408, 429,
dropped connections; about 35 s at most); a resumable chunk is retried the same way but resumes
from the offset the session reports; what is left to the caller (``SnapshotStore``) is
restarting an upload that raised ``UploadInterrupted`` (session lost, or bytes that did not
match). gcsfs internals are contained in ``gcs_api``.
"""

from __future__ import annotations

import contextlib
import io
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from . import checksum, gcs_api
from .composite import CompositePolicy, upload_composite
from .gcs_upload import GCS_CHUNK_QUANTUM, GcsUpload
from .transfer_types import ChecksumMismatch, StoredObject, UploadInterrupted

__all__ = [
    "GCS_CHUNK_QUANTUM", "READ_WINDOW", "ChecksumMismatch", "CompositePolicy", "RangedReader",
    "StoredObject", "UploadInterrupted", "is_gcs", "read_first", "read_range_into", "stored_checksum",
    "upload", "upload_object",
]

#: Reads smaller than this go through the reader's window (see ``RangedReader``).
READ_WINDOW = 1 << 20


def is_gcs(fs: Any) -> bool:
    """True for a gcsfs filesystem (the resumable-upload path applies)."""
    return type(fs).__module__.startswith("gcsfs")


def upload(fs: Any, path: str, parts: Iterable[object], chunk_bytes: int, *,
           composite: CompositePolicy | None = None) -> int:
    """Write ``parts`` to ``path`` (created or replaced whole); returns the bytes written."""
    return upload_object(fs, path, parts, chunk_bytes, composite=composite).size


def upload_object(fs: Any, path: str, parts: Iterable[object], chunk_bytes: int, *,
                  composite: CompositePolicy | None = None) -> StoredObject:
    """``upload``, returning the object as stored (on GCS its crc32c, checked against ours).
    ``composite``: when to split a list or tuple of parts (default ``CompositePolicy.from_env()``)."""
    if is_gcs(fs):
        if isinstance(parts, Sequence):
            views = [memoryview(p).cast("B") for p in parts]
            policy = composite or CompositePolicy.from_env()
            if policy.applies(sum(len(v) for v in views)):
                return upload_composite(fs, path, views, chunk_bytes, policy)
            parts = views
        return GcsUpload(fs, path, chunk_bytes).run(parts)
    # Other filesystems: their own writer on a temporary name, moved into place when complete
    # (on object stores a server-side copy, which creates the final object at once).
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    written = 0
    try:
        with fs.open(tmp, "wb", block_size=chunk_bytes) as f:
            for view in iter_views(parts, chunk_bytes):
                f.write(view)
                written += len(view)
        fs.mv(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm_file(tmp)
        raise
    return StoredObject(written, None)


def stored_checksum(fs: Any, path: str) -> tuple[int, int | None]:
    """``(size, crc32c)`` of the stored object from one metadata request (never a cached listing);
    crc32c is None where the store keeps none. ``FileNotFoundError`` when absent."""
    if is_gcs(fs):
        return gcs_api.stat(fs, path)
    fs.invalidate_cache(path)
    info = fs.info(path)
    return int(info.get("size") or 0), checksum.from_base64(info.get("crc32c"))


def iter_views(parts: Iterable[object], step: int):
    """Byte views of the parts, in order, none longer than ``step`` (no copies)."""
    for part in parts:
        view = memoryview(part).cast("B")
        for start in range(0, len(view), step):
            yield view[start : start + step]


class RangedReader(io.RawIOBase):
    """Read-only, seekable file over an immutable object, read with ranged GETs.

    Small reads (a blob's header) are served from a ``window`` fetched in one request; reads
    of at least ``window`` bytes stream straight into the caller's buffer (``read_range_into``):
    the bytes are copied once, from the socket into their destination. Memory: one window."""

    def __init__(self, fs: Any, path: str, size: int, window: int, first: bytes = b""):
        super().__init__()
        self.fs, self.path, self.size, self.window = fs, path, size, window
        self.pos = 0
        self.cached_at, self.cached = 0, first  # ``first``: bytes from offset 0, if fetched

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self.size - self.pos)
        if want <= 0:
            return 0
        start = self.pos - self.cached_at
        if not 0 <= start < len(self.cached):
            if want >= self.window:
                got = read_range_into(self.fs, self.path, self.pos, view[:want])
                self.pos += got
                return got
            end = min(self.size, self.pos + self.window)
            self.cached = self.fs.cat_file(self.path, start=self.pos, end=end)
            self.cached_at, start = self.pos, 0
            if not self.cached:
                return 0
        got = min(want, len(self.cached) - start)
        view[:got] = memoryview(self.cached)[start : start + got]
        self.pos += got
        return got


def read_first(fs: Any, path: str, window: int) -> tuple[bytes | bytearray, int]:
    """The first ``window`` bytes of ``path`` (fewer when it is smaller) and its size: on GCS
    from one ranged GET (its answer tells the size), elsewhere a metadata request when the
    object fills the window."""
    if is_gcs(fs):
        return gcs_api.read_first(fs, path, window)
    first = fs.cat_file(path, start=0, end=window)
    return first, len(first) if len(first) < window else stored_checksum(fs, path)[0]


def read_range_into(fs: Any, path: str, start: int, view: memoryview) -> int:
    """Read ``len(view)`` bytes of ``path`` from ``start`` into ``view``; returns bytes read."""
    if not is_gcs(fs):
        data = fs.cat_file(path, start=start, end=start + len(view))
        view[: len(data)] = data
        return len(data)
    return gcs_api.read_range_into(fs, path, start, view)
