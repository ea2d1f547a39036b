"""Streaming blob transfer for object stores: chunked uploads and ranged reads, bounded memory.

``upload`` writes a blob from its parts (buffers, in order) without ever holding the whole blob:
on GCS (gcsfs) through one resumable upload session fed ``chunk_bytes`` at a time (a blob smaller
than one chunk goes as one simple upload), elsewhere through the filesystem's own writer. The
object appears under its name only when the last byte is in; on any failure the session is
cancelled, so nothing partial is ever visible. Other filesystems write a temporary name and move
it into place. ``RangedReader`` reads a blob with ranged GETs through a read-ahead window. Both
are safe to call from many threads at once: each call owns its session/reader, and gcsfs runs
every request on its own event-loop thread.

The GCS path uses a few gcsfs internals (``initiate_upload``, ``quote``, ``fs._location``,
``fs.call``, ``fs.session``, ``fs._get_headers``, ``fs._get_params``, ``fs.url``); it is tested
with gcsfs 2026.10 against fake-gcs-server.

Every HTTP request gcsfs makes is retried by gcsfs itself on 5xx, 408, 429 and dropped
connections (6 attempts, exponential backoff with jitter, about 35 s at most); what is left to
the caller (``SnapshotStore``) is restarting a whole upload whose session was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from fsspec.asyn import sync

#: GCS requires every chunk of a resumable upload except the last to be a multiple of this.
GCS_CHUNK_QUANTUM = 256 << 10
BOUNDARY = "gkeresume-part-boundary"
#: Reads are retried as gcsfs retries its requests: this many attempts in all.
READ_ATTEMPTS = 6
#: Reads smaller than this go through the reader's window (see ``RangedReader``).
READ_WINDOW = 1 << 20


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
        chunk = self.chunk_bytes
        staging: bytearray | None = None
        fill = 0
        try:
            for part in parts:
                view, pos = memoryview(part).cast("B"), 0
                while pos < len(view):
                    if fill == 0 and len(view) - pos >= chunk:
                        self._send(view[pos : pos + chunk], final=False)  # no copy
                        pos += chunk
                        continue
                    # a chunk that spans parts (or the tail): gathered in the staging buffer
                    staging = staging if staging is not None else bytearray(chunk)
                    take = min(len(view) - pos, chunk - fill)
                    staging[fill : fill + take] = view[pos : pos + take]
                    fill, pos = fill + take, pos + take
                    if fill == chunk:
                        self._send(memoryview(staging), final=False)
                        fill = 0
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


def read_range_into(fs: Any, path: str, start: int, view: memoryview) -> int:
    """Read ``len(view)`` bytes of ``path`` from ``start`` into ``view``; returns bytes read."""
    if not is_gcs(fs):
        data = fs.cat_file(path, start=start, end=start + len(view))
        view[: len(data)] = data
        return len(data)
    return sync(fs.loop, _gcs_read_into, fs, path, start, view)


async def _gcs_read_into(fs: Any, path: str, start: int, view: memoryview) -> int:
    """One streamed ranged GET on gcsfs's session and credentials. Retried like gcsfs retries
    its own requests (transient errors, same backoff), resuming after the bytes already in."""
    from gcsfs.retry import is_retriable, validate_response

    got, attempt = 0, 0
    while True:
        try:
            await fs._set_session()
            headers = fs._get_headers({"Range": f"bytes={start + got}-{start + len(view) - 1}"})
            async with fs.session.get(fs.url(path), headers=headers, params=fs._get_params({}),
                                      timeout=fs.requests_timeout) as response:
                if response.status >= 400:
                    validate_response(response.status, await response.read(), path)
                if response.status != 206 and start + got > 0:
                    raise OSError(f"the service ignored the byte range (status {response.status})")
                async for data in response.content.iter_any():
                    n = min(len(data), len(view) - got)
                    view[got : got + n] = data[:n]
                    got += n
            return got
        except Exception as exc:
            attempt += 1
            if attempt >= READ_ATTEMPTS or not is_retriable(exc):
                raise
            await asyncio.sleep(min(random.random() + 2 ** (attempt - 1), 32))
