"""Streaming blob transfer for object stores: chunked uploads and ranged reads, bounded memory.

``upload`` writes a blob from its parts (buffers, in order) without ever holding the whole blob:
on GCS (gcsfs) through one resumable upload session fed ``chunk_bytes`` at a time (a blob smaller
than one chunk goes as one simple upload), elsewhere through the filesystem's own writer. The
object appears under its name only when the last byte is in; on any failure the session is
cancelled, so nothing partial is ever visible. Other filesystems write a temporary name and move
it into place. ``RangedReader`` reads a blob with ranged GETs of
exactly the sizes its consumer asks for. Both are safe to call from many threads at once: each
call owns its session/reader, and gcsfs runs every request on its own event-loop thread.

Every HTTP request gcsfs makes is retried by gcsfs itself on 5xx, 408, 429 and dropped
connections (6 attempts, exponential backoff with jitter, about 35 s at most); what is left to
the caller (``SnapshotStore``) is restarting a whole upload whose session was lost.
"""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from fsspec.asyn import sync

#: GCS requires every chunk of a resumable upload except the last to be a multiple of this.
GCS_CHUNK_QUANTUM = 256 << 10
BOUNDARY = "gkeresume-part-boundary"


class UploadInterrupted(OSError):
    """An upload session was lost or kept other bytes than sent: the whole upload can restart."""


def is_gcs(fs: Any) -> bool:
    """True for a gcsfs filesystem (the resumable-upload path applies)."""
    return type(fs).__module__.startswith("gcsfs")


def upload(fs: Any, path: str, parts: Iterable[object], chunk_bytes: int) -> int:
    """Write ``parts`` to ``path`` (created or replaced whole); returns the bytes written."""
    if is_gcs(fs):
        return _GcsUpload(fs, path, chunk_bytes).run(parts)
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
    return written


def iter_views(parts: Iterable[object], step: int):
    """Byte views of the parts, in order, none longer than ``step`` (no copies)."""
    for part in parts:
        view = memoryview(part).cast("B")
        for start in range(0, len(view), step):
            yield view[start : start + step]


class _GcsUpload:
    """One resumable upload session (created on the first full chunk)."""

    def __init__(self, fs: Any, path: str, chunk_bytes: int):
        if chunk_bytes % GCS_CHUNK_QUANTUM:
            raise ValueError(f"chunk size {chunk_bytes} is not a multiple of 256 KiB")
        self.fs = fs
        self.bucket, self.key, _ = fs.split_path(path)
        self.chunk_bytes = chunk_bytes
        self.location: str | None = None
        self.offset = 0

    def run(self, parts: Iterable[object]) -> int:
        if isinstance(parts, Sequence):
            views = [memoryview(p).cast("B") for p in parts]
            if sum(len(v) for v in views) <= self.chunk_bytes:
                self._simple(views)
                return self.offset
            parts = views
        staging: bytearray | None = None
        fill = 0
        try:
            for view in iter_views(parts, self.chunk_bytes):
                if fill == 0 and len(view) == self.chunk_bytes:
                    self._send(view, final=False)  # a whole chunk straight from the caller
                    continue
                if staging is None:
                    staging = bytearray(self.chunk_bytes)
                take = min(len(view), self.chunk_bytes - fill)
                staging[fill : fill + take] = view[:take]
                fill += take
                if fill == self.chunk_bytes:
                    self._send(memoryview(staging), final=False)
                    staging[: len(view) - take] = view[take:]
                    fill = len(view) - take
            rest = memoryview(staging)[:fill] if staging is not None else memoryview(b"")
            if self.location is None:
                self._simple([rest])
            else:
                self._send(rest, final=True)
        except BaseException:
            self._cancel()
            raise
        return self.offset

    def _simple(self, views: list[memoryview]) -> None:
        """One multipart request (metadata + bytes), its body built with a single copy."""
        from gcsfs.core import quote

        head = (f"--{BOUNDARY}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
                f"{json.dumps({'name': self.key})}\r\n--{BOUNDARY}\r\n"
                f"Content-Type: application/octet-stream\r\n\r\n").encode()
        tail = f"\r\n--{BOUNDARY}--".encode()
        body = bytearray(len(head) + sum(len(v) for v in views) + len(tail))
        at = 0
        for piece in (head, *views, tail):
            body[at : at + len(piece)] = piece
            at += len(piece)
        stored = self.fs.call(
            "POST", f"{self.fs._location}/upload/storage/v1/b/{quote(self.bucket)}/o",
            uploadType="multipart", data=memoryview(body), json_out=True,
            headers={"Content-Type": f'multipart/related; boundary="{BOUNDARY}"'},
        )
        self.offset = len(body) - len(head) - len(tail)
        self._check(stored)

    def _send(self, view: memoryview, *, final: bool) -> None:
        if self.location is None:
            from gcsfs.core import initiate_upload

            self.location = sync(self.fs.loop, initiate_upload, self.fs, self.bucket, self.key)
        end = self.offset + len(view)
        while True:
            total = str(end) if final else "*"
            span = f"{self.offset}-{end - 1}" if end > self.offset else "*"
            try:
                headers, body = self.fs.call(
                    "POST", self.location, data=view,
                    headers={"Content-Range": f"bytes {span}/{total}",
                             "Content-Type": "application/octet-stream"},
                )
            except FileNotFoundError:
                raise UploadInterrupted("the upload session vanished") from None
            if final:
                self.offset = end
                self._check(json.loads(body))
                return
            persisted = _persisted_end(headers)
            if persisted is None or persisted <= self.offset:
                raise UploadInterrupted("the upload session did not keep the chunk it was sent")
            if persisted >= end:
                self.offset = end
                return
            # The service kept fewer bytes than sent (a cut request): send the rest.
            view = view[persisted - self.offset :]
            self.offset = persisted

    def _check(self, stored: Any) -> None:
        """The finished object must hold exactly the bytes sent. A service that appended a resent
        chunk twice would otherwise leave a corrupt blob under its content-addressed name: it is
        removed and the upload fails (the store restarts it when it can)."""
        if _stored_size(stored) != self.offset:
            self.location = None
            self.fs.rm_file(f"{self.bucket}/{self.key}")
            stored_size = _stored_size(stored)
            raise UploadInterrupted(f"the service stored {stored_size} of {self.offset} bytes")

    def _cancel(self) -> None:
        """Abandon the session so that nothing of it ever becomes visible (best effort:
        GCS drops an unfinished session by itself after a week)."""
        if self.location is not None:
            with contextlib.suppress(Exception):  # the original failure is what counts
                self.fs.call("DELETE", self.location)
            self.location = None


def _stored_size(stored: Any) -> int:
    return int(stored.get("size", -1)) if isinstance(stored, dict) else -1


def _persisted_end(headers: Any) -> int | None:
    """From a 308 answer's ``Range: bytes=0-N``: N + 1, the bytes the service holds."""
    value = headers.get("Range") if headers is not None else None
    if not value:
        return None
    return int(value.rsplit("-", 1)[1]) + 1


class RangedReader(io.RawIOBase):
    """Read-only, seekable file over an immutable object, read with ranged GETs.

    A read that the current window cannot serve fetches ``[pos, pos + max(asked, window))`` in
    one request: a blob's small header reads and the first data reads after it cost one
    request, not three. Memory: one window per open reader."""

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
            end = min(self.size, self.pos + max(want, self.window))
            self.cached = self.fs.cat_file(self.path, start=self.pos, end=end)
            self.cached_at, start = self.pos, 0
            if not self.cached:
                return 0
        got = min(want, len(self.cached) - start)
        view[:got] = memoryview(self.cached)[start : start + got]
        self.pos += got
        return got
