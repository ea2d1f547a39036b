"""One blob to GCS, checked end to end: a simple upload for a blob up to one chunk, else one
resumable session fed chunk by chunk from the caller's buffers.

Every upload carries its crc32c (the simple upload's metadata, the resumable session's final
request as ``X-Goog-Hash``), so real GCS refuses corrupted bytes; and the object GCS reports
back must have our size and crc32c, else it is removed and ``ChecksumMismatch`` /
``UploadInterrupted`` raised (fake-gcs-server checks neither, so this comparison is what catches
corruption there).

A chunk that failed on a transient error is not sent again blindly: the session is asked what
it holds (an empty request with ``Content-Range: bytes */*``, answered ``308`` with ``Range``)
and only the rest is sent, so an interrupted upload resumes from the service's offset.
Streamed parts (an iterator, e.g. a GPU ring) get the same retries: the chunk in flight is
either a view into the part in hand (the iterator is not advanced until that chunk is
acknowledged) or the one staging buffer, so it can always be sent again; memory stays one chunk.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import checksum, gcs_api
from .transfer_types import ChecksumMismatch, StoredObject, UploadInterrupted

#: GCS requires every chunk of a resumable upload except the last to be a multiple of this.
GCS_CHUNK_QUANTUM = 256 << 10
BOUNDARY = "gkeresume-part-boundary"


class GcsUpload:
    """Upload one object; call ``run(parts)`` once."""

    def __init__(self, fs: Any, path: str, chunk_bytes: int):
        if chunk_bytes <= 0 or chunk_bytes % GCS_CHUNK_QUANTUM:
            raise ValueError(f"chunk size {chunk_bytes} is not a multiple of 256 KiB")
        self.fs = fs
        self.bucket, self.key, _ = fs.split_path(path)
        self.chunk_bytes = chunk_bytes
        self.location: str | None = None
        self.offset = 0  # bytes the service holds (acknowledged)
        self.crc = 0  # over every byte handed to the service so far

    def run(self, parts: Iterable[object]) -> StoredObject:
        """``parts``: buffers in order. A list or tuple of at most one chunk in all goes as one
        simple upload, a longer one as chunks gathered from views into it (no copy; the last
        chunk finishes the object); an iterator's chunks are views into the part in hand or the
        staging buffer, finished by a final request. Returns what the service stored (already
        compared with ours)."""
        try:
            if isinstance(parts, Sequence):
                views = [memoryview(p).cast("B") for p in parts]
                size = sum(len(v) for v in views)
                if size <= self.chunk_bytes:
                    return self._simple(views)
                return self._run_views(views, size)
            return self._run_stream(parts)
        except BaseException:
            self._cancel()
            raise

    def _run_views(self, views: list[memoryview], size: int) -> StoredObject:
        """Chunks of ``size`` bytes (more than one chunk) as views into ``views``, the last final."""
        stored = None
        for start in range(0, size, self.chunk_bytes):
            end = min(size, start + self.chunk_bytes)
            stored = self._send(slice_views(views, start, end), final=end == size)
        assert stored is not None
        return stored

    def _run_stream(self, parts: Iterable[object]) -> StoredObject:
        """Chunks from parts read once, in order (the total is unknown until the end: a final
        request, possibly empty, finishes the object; no chunk at all: a simple upload)."""
        chunk = self.chunk_bytes
        staging: bytearray | None = None
        fill = 0
        for part in parts:
            view, pos = memoryview(part).cast("B"), 0
            while pos < len(view):
                if fill == 0 and len(view) - pos >= chunk:
                    self._send([view[pos : pos + chunk]], final=False)  # no copy
                    pos += chunk
                    continue
                # a chunk that spans parts (or the tail): gathered in the staging buffer
                staging = staging if staging is not None else bytearray(chunk)
                take = min(len(view) - pos, chunk - fill)
                staging[fill : fill + take] = view[pos : pos + take]
                fill, pos = fill + take, pos + take
                if fill == chunk:
                    self._send([memoryview(staging)], final=False)
                    fill = 0
        rest = memoryview(staging)[:fill] if staging is not None else memoryview(b"")
        if self.location is None:
            return self._simple([rest])
        stored = self._send([rest], final=True)
        assert stored is not None
        return stored

    def _simple(self, views: list[memoryview]) -> StoredObject:
        """One multipart request (metadata with the crc32c + bytes), sent from ``views`` as they
        are (no copy into one body)."""
        for view in views:
            self.crc = checksum.extend(self.crc, view)
        meta = {"name": self.key, "crc32c": checksum.to_base64(self.crc)}
        head = (f"--{BOUNDARY}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
                f"{json.dumps(meta)}\r\n--{BOUNDARY}\r\n"
                f"Content-Type: application/octet-stream\r\n\r\n").encode()
        tail = f"\r\n--{BOUNDARY}--".encode()
        self.offset = sum(len(v) for v in views)
        try:
            stored = gcs_api.simple_upload(self.fs, self.bucket,
                                           [memoryview(head), *views, memoryview(tail)],
                                           f'multipart/related; boundary="{BOUNDARY}"')
        except Exception as exc:
            _raise_if_checksum_refused(exc)
            raise
        return self._check(stored, self.offset)

    def _send(self, pieces: list[memoryview], *, final: bool) -> StoredObject | None:
        """Hand the service ``pieces`` (the next chunk, in order); on the final one, returns the
        stored object.

        Transient failures: wait, ask the session what it holds, send only the rest (gcsfs's
        attempts and waits). A session the service forgot (404) raises ``UploadInterrupted``."""
        if self.location is None:
            self.location = gcs_api.start_session(self.fs, self.bucket, self.key)
        for piece in pieces:
            self.crc = checksum.extend(self.crc, piece)
        start, end = self.offset, self.offset + sum(len(p) for p in pieces)
        total = end if final else None
        attempt, ask = 0, False
        while True:
            try:
                data = [] if ask else slice_views(pieces, self.offset - start, end - start)
                status, headers, body = self._request(data, total)
                if status in (200, 201):
                    return self._check(json.loads(body), total)
                held = _persisted_end(headers)
                if not start <= held <= end:
                    raise UploadInterrupted(f"the session holds {held} bytes, not {start} to {end}")
                if not ask and data and held <= self.offset:
                    raise UploadInterrupted("the upload session did not keep the chunk it was sent")
                self.offset, ask = held, False
                if held == end and not final:
                    return None
            except FileNotFoundError:
                raise UploadInterrupted("the upload session vanished") from None
            except UploadInterrupted:
                raise
            except Exception as exc:
                _raise_if_checksum_refused(exc)
                attempt += 1
                if attempt >= gcs_api.ATTEMPTS or not gcs_api.is_retriable(exc):
                    raise
                time.sleep(gcs_api.backoff(attempt))
                ask = True

    def _request(self, data: list[memoryview], total: int | None) -> tuple[int, Mapping[str, str], bytes]:
        """One chunk from ``self.offset`` (or, with no data, the status query / finalization)."""
        length = sum(len(piece) for piece in data)
        span = f"{self.offset}-{self.offset + length - 1}" if length else "*"
        headers = {"Content-Range": f"bytes {span}/{'*' if total is None else total}",
                   "Content-Type": "application/octet-stream"}
        if total is not None:
            headers["X-Goog-Hash"] = f"crc32c={checksum.to_base64(self.crc)}"
        assert self.location is not None
        # POST, as gcsfs sends chunks: aiohttp silently resends an idempotent request (PUT) once
        # when a kept-alive connection drops, which is exactly the blind resend to avoid here.
        return gcs_api.request_once(self.fs, "POST", self.location, data, headers)

    def _check(self, stored: Any, expected_size: int | None) -> StoredObject:
        """The finished object must hold exactly our bytes. Else (a service that appended a
        resent chunk twice, finished early, or stored corrupted bytes) it is removed and the
        upload fails; the store restarts it when it can."""
        self.location = None
        resource = stored if isinstance(stored, dict) else {}
        size = int(resource.get("size", -1))
        crc = checksum.from_base64(resource.get("crc32c"))
        if size == expected_size and crc == self.crc:
            return StoredObject(size, crc)
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(f"{self.bucket}/{self.key}")
        if size != expected_size:
            raise UploadInterrupted(f"the service stored {size} of {expected_size} bytes")
        raise ChecksumMismatch(f"the stored crc32c {resource.get('crc32c')} is not ours "
                               f"({checksum.to_base64(self.crc)}): bytes corrupted on the way")

    def _cancel(self) -> None:
        """Abandon the session so that nothing of it ever becomes visible (best effort:
        GCS drops an unfinished session by itself after a week)."""
        if self.location is not None:
            with contextlib.suppress(Exception):  # the original failure is what counts
                gcs_api.request_once(self.fs, "DELETE", self.location, [], {})
            self.location = None


def slice_views(views: list[memoryview], start: int, end: int) -> list[memoryview]:
    """The bytes ``start:end`` of the concatenated ``views``, as views into them (no copy)."""
    out, at = [], 0
    for view in views:
        lo, hi = max(start, at), min(end, at + len(view))
        if lo < hi:
            out.append(view[lo - at : hi - at])
        at += len(view)
    return out


def _persisted_end(headers: Mapping[str, str]) -> int:
    """From a 308 answer's ``Range: bytes=0-N``: N + 1, the bytes the service holds (0 without)."""
    value = headers.get("Range")
    return int(value.rsplit("-", 1)[1]) + 1 if value else 0


def _raise_if_checksum_refused(exc: BaseException) -> None:
    """GCS answers 400 "Provided CRC32C ... doesn't match calculated CRC32C" when bytes were
    corrupted on the way: worth a restart, unlike other 400s."""
    if getattr(exc, "code", None) == 400 and "crc32c" in str(getattr(exc, "message", exc)).lower():
        raise ChecksumMismatch("GCS refused the upload: its crc32c does not match the bytes") from None
