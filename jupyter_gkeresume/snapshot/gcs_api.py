"""The few gcsfs internals the GCS transfer path needs, contained here (nothing else imports them).

Why not public APIs: gcsfs's writer (``GCSFile``) copies every write into its own buffer, retries
a chunk blindly (fake-gcs-server then appends it twice) and sends no crc32c; google-resumable-media's
``ResumableUpload`` reads each chunk from a stream into new ``bytes`` (a copy), checks the crc32c only
client-side after the upload, and its ``recover()`` status query makes fake-gcs-server finalize the
object with the bytes it has (fsouza/fake-gcs-server#2354). Used here, on gcsfs's own connection pool,
credentials and error classes:

- ``fs._location``: the endpoint (``STORAGE_EMULATOR_HOST`` and ``endpoint_url`` aware) and
  ``gcsfs.core.quote``, to build the upload URL;
- ``fs.call``: one request with gcsfs's retries (session start, simple upload);
- ``fs._get_object``: an object's metadata in one GET (``fs.info`` lists the prefix beside it,
  a second request, and a Class A operation on GCS, for every blob checked);
- ``fs._set_session``, ``fs.session``, ``fs._get_headers``, ``fs._get_params``,
  ``fs.requests_timeout``, ``fs.url``: one request *without* retries (a resumable chunk, whose retry
  must first ask the session what it holds) and a ranged GET streamed into a caller's buffer;
- ``gcsfs.retry.is_retriable`` / ``validate_response``: gcsfs's own notion of a transient error.

Public gcsfs APIs serve the rest: ``fs.merge`` (compose),
``fs.rm``/``rm_file``. Tested with the oldest and newest gcsfs the floor allows (docs/gcs.md).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp.payload import Payload
from fsspec.asyn import sync

from . import checksum

#: Attempts of one request, as gcsfs retries its own (waits 1, 2, 4, 8, 16 s plus jitter).
ATTEMPTS = 6


def backoff(attempt: int) -> float:
    """gcsfs's wait before attempt ``attempt + 1`` (``attempt`` >= 1)."""
    return min(random.random() + 2 ** (attempt - 1), 32)


def is_retriable(exc: BaseException) -> bool:
    from gcsfs.retry import is_retriable as gcsfs_is_retriable

    return gcsfs_is_retriable(exc)


def upload_url(fs: Any, bucket: str) -> str:
    from gcsfs.core import quote

    return f"{fs._location}/upload/storage/v1/b/{quote(bucket)}/o"


def start_session(fs: Any, bucket: str, key: str) -> str:
    """A new resumable upload session for ``key``; returns its URI (retried by gcsfs)."""
    headers, _ = fs.call("POST", upload_url(fs, bucket), uploadType="resumable", name=key,
                         json={"name": key},
                         headers={"X-Upload-Content-Type": "application/octet-stream"})
    location = headers["Location"]
    return location[0] if isinstance(location, list) else location


def stat(fs: Any, path: str) -> tuple[int, int | None]:
    """``(size, crc32c)`` of the object from one metadata GET, retried by gcsfs (crc32c None
    when GCS reports none); ``FileNotFoundError`` when absent. Never from a cached listing."""
    fs.invalidate_cache(path)
    info = sync(fs.loop, fs._get_object, path)
    return int(info.get("size", -1)), checksum.from_base64(info.get("crc32c"))


def simple_upload(fs: Any, bucket: str, body: Sequence[memoryview], content_type: str) -> dict:
    """One multipart upload request whose body is ``body``'s buffers one after another (sent
    from them, never joined into one copy; a retry sends them again), retried by gcsfs; returns
    the stored object resource."""
    return fs.call("POST", upload_url(fs, bucket), uploadType="multipart", data=_Pieces(body),
                   json_out=True, headers={"Content-Type": content_type})


class _Pieces(Payload):
    """An aiohttp request body made of buffers, written in order; its size (Content-Length) is
    known up front. Holds no resources, so it may be written again (gcsfs's retries)."""

    _autoclose = True

    def __init__(self, pieces: Sequence[memoryview]):
        super().__init__(tuple(pieces))
        self._size = sum(len(piece) for piece in pieces)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._value).decode(encoding, errors)

    async def write(self, writer: Any) -> None:
        for piece in self._value:
            if len(piece):
                await writer.write(piece)


def request_once(fs: Any, method: str, url: str, data: Sequence[memoryview],
                 headers: dict[str, str]) -> tuple[int, Mapping[str, str], bytes]:
    """One request, no retries: ``(status, headers, body)``; errors as gcsfs raises them
    (``FileNotFoundError`` for 404, ``HttpError`` with ``code`` for other statuses >= 400)."""
    return sync(fs.loop, _request_once, fs, method, url, data, headers)


async def _request_once(fs: Any, method: str, url: str, data: Sequence[memoryview],
                        headers: dict[str, str]) -> tuple[int, Mapping[str, str], bytes]:
    from gcsfs.retry import validate_response

    await fs._set_session()
    async with fs.session.request(method, url, data=_Pieces(data), headers=fs._get_headers(headers),
                                  timeout=fs.requests_timeout) as response:
        body = await response.read()
        validate_response(response.status, body, url)
        return response.status, response.headers, body


def read_range_into(fs: Any, path: str, start: int, view: memoryview) -> int:
    """Read ``len(view)`` bytes of ``path`` from ``start`` straight into ``view``."""
    return sync(fs.loop, _read_range_into, fs, path, start, view)[0]


def read_first(fs: Any, path: str, window: int) -> tuple[bytearray, int]:
    """The first ``window`` bytes of ``path`` (fewer when it is smaller) and the object's size,
    which the ranged answer tells (``Content-Range``): one request."""
    buffer = bytearray(window)
    got, size = sync(fs.loop, _read_range_into, fs, path, 0, memoryview(buffer))
    del buffer[got:]
    return buffer, size


async def _read_range_into(fs: Any, path: str, start: int, view: memoryview) -> tuple[int, int]:
    """One streamed ranged GET. Retried like gcsfs retries its own requests (transient errors,
    same backoff), resuming after the bytes already in. Returns the bytes read and the object's
    size (from ``Content-Range``; from ``Content-Length`` when the whole object came back)."""
    from gcsfs.retry import validate_response

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
                size = _object_size(response.status, response.headers)
                async for data in response.content.iter_any():
                    n = min(len(data), len(view) - got)
                    view[got : got + n] = data[:n]
                    got += n
            return got, size
        except Exception as exc:
            attempt += 1
            if attempt >= ATTEMPTS or not is_retriable(exc):
                raise
            await asyncio.sleep(backoff(attempt))


def _object_size(status: int, headers: Mapping[str, str]) -> int:
    """The whole object's size from a GET's answer: ``Content-Range: bytes A-B/SIZE`` (206), or
    ``Content-Length`` (200: the whole object). ``OSError`` when neither tells it."""
    try:
        if status == 206:
            return int(headers["Content-Range"].rsplit("/", 1)[1])
        return int(headers["Content-Length"])
    except (KeyError, ValueError):
        raise OSError(f"the service did not tell the object's size (status {status})") from None
