"""The snapshot store: one workspace's blobs, manifests and small records in an fsspec location.

Layout under ``{url}/{workspace}/``::

    blobs/{hex[:2]}/{digest}.safetensors      content-addressed, immutable, shared by snapshots
                                              (digest: sha256 hex, or b3-{hex} for BLAKE3)
    snapshots/{snapshot_id}.json              manifests; presence of one is the commit
    records/{name}.json                       small mutable records (paused record, leases, ...)

Commit protocol (the order callers must follow): write every blob (``write_blob``) until each is
durable, then ``commit_manifest`` once. Locally a blob is written to a temporary name, fsynced and
renamed; the manifest is linked into place so that a second writer of the same id fails. On object
stores there are no renames: blobs are written under their final, content-addressed names (a
partial upload is never visible on GCS) and the manifest is created with a create-only
precondition (``ifGenerationMatch=0``, a simple upload). Either way a crash at any point leaves no
manifest that names a missing blob, and every earlier snapshot intact.

Object stores (``transfer``): a blob up to ``chunk_bytes`` goes up in one request, a bigger one
streams up in ``chunk_bytes`` pieces through one resumable session (never the whole blob in
memory); reads are ranged requests streamed into the caller's buffers. gcsfs retries every
request on transient errors (5xx, 408, 429, dropped connections); on top of that a blob upload
that still failed on a transient error is restarted, up to ``retries`` times with exponential
backoff and full jitter, when its parts can be read again (a list or tuple). A create-only write
whose reply was lost and whose retry then finds the object: the object is read back, and if it
holds our bytes the write succeeded. Every method is safe to call from many threads at once;
``concurrency`` is how many the callers should use (``GKERESUME_CONCURRENCY``). Errors leave as
``StoreError`` with a message that names the store without credentials.
"""

from __future__ import annotations

import os
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ..errors import CommitConflictError, InvalidInputError, StoreError
from .digests import Digest, hex_part, is_digest
from .format import SNAPSHOT_ID_RE, validate_snapshot_id
from .transfer import READ_WINDOW, RangedReader, UploadInterrupted, upload

RECORD_NAMES = ("paused", "events")
LEASE_RECORD_RE = re.compile(r"^lease-[a-z0-9][a-z0-9._-]{0,150}$")
WRITE_CHUNK = 16 << 20
DEFAULT_CHUNK_BYTES = 32 << 20
DEFAULT_CONCURRENCY = {"local": 4, "remote": 8}
MAX_CONCURRENCY = 256
DEFAULT_RETRIES = 3
RETRY_BASE_DELAY = 0.5
RETRY_MAX_DELAY = 8.0
T = TypeVar("T")


@dataclass(frozen=True)
class BlobInfo:
    """A blob as the store lists it (for gc)."""

    digest: str
    size: int
    mtime: float | None


class SnapshotStore:
    """Blobs, manifests and records of one workspace; ``url`` is any fsspec URL or local path."""

    def __init__(
        self,
        url: str,
        workspace: str,
        storage_options: dict[str, Any] | None = None,
        *,
        concurrency: int | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        retries: int = DEFAULT_RETRIES,
    ):
        from ..workspace import validate_workspace_id

        self.url = url
        self.workspace = validate_workspace_id(workspace)
        try:
            self.fs, base = fsspec.core.url_to_fs(url, **(storage_options or {}))
        except (ImportError, ValueError) as exc:
            raise InvalidInputError(f"cannot open store {_safe_url(url)}: {exc}") from None
        self.local = isinstance(self.fs, LocalFileSystem)
        self.root = f"{base.rstrip('/')}/{self.workspace}"
        self.concurrency = resolve_concurrency(concurrency, local=self.local)
        if chunk_bytes <= 0 or chunk_bytes % (256 << 10):
            raise InvalidInputError(f"chunk_bytes must be a multiple of 256 KiB: {chunk_bytes}")
        self.chunk_bytes = chunk_bytes
        if not 0 <= retries <= 10:
            raise InvalidInputError(f"retries must be between 0 and 10: {retries}")
        self.retries = retries

    def __repr__(self) -> str:
        return f"SnapshotStore({_safe_url(self.url)!r}, {self.workspace!r})"

    # -- paths -----------------------------------------------------------------------------
    def blob_path(self, digest: str) -> str:
        return f"{self.root}/blobs/{hex_part(digest)[:2]}/{digest}.safetensors"

    def manifest_path(self, snapshot_id: str) -> str:
        return f"{self.root}/snapshots/{validate_snapshot_id(snapshot_id)}.json"

    def record_path(self, name: str) -> str:
        if name not in RECORD_NAMES and not (LEASE_RECORD_RE.match(name) and ".." not in name):
            raise InvalidInputError(f"unknown record {name!r}")
        return f"{self.root}/records/{name}.json"

    # -- blobs -----------------------------------------------------------------------------
    def has_blob(self, digest: str, size: int | None = None) -> bool:
        """True when the blob exists (and has ``size`` bytes, when given)."""
        path = self.blob_path(digest)
        with self._errors("check blob"):
            self._invalidate(path)  # never trust a cached listing: a gc may have removed it
            try:
                info = self.fs.info(path)
            except FileNotFoundError:
                return False
        return size is None or info.get("size") == size

    def claim_blob(self, digest: str, size: int) -> bool:
        """Reuse an existing blob: True when it exists with ``size`` bytes, after refreshing its
        age, so that gc's grace period protects it until the manifest that reuses it commits.

        Call order for a writer: ``claim_blob`` (or ``write_blob``) for every blob, then
        ``commit_manifest``, then check every blob is still there (a gc that swept in between
        makes the checkpoint fail cleanly instead of committing a hole)."""
        if not self.has_blob(digest, size):
            return False
        path = self.blob_path(digest)
        with self._errors("refresh blob"):
            try:
                if self.local:
                    os.utime(path)
                else:
                    self.fs.setxattrs(path, gkeresume_touched=f"{time.time():.3f}")
            except FileNotFoundError:
                return False
        return True

    def write_blob(self, digest: str, parts: Iterable[object]) -> None:
        """Write a blob from its parts (buffers, in order) and make it durable.

        The caller computed ``digest`` over exactly these parts; writing the same digest twice is
        harmless. Nothing is visible under the final name until it is complete. Only a list or
        tuple of parts lets a failed upload be restarted (an iterator can be read once).
        """
        path = self.blob_path(digest)
        with self._errors("write blob"):
            if self.local:
                self._write_local_atomic(path, parts, create_only=False)
            else:
                attempts = 1 + self.retries if isinstance(parts, Sequence) else 1
                try:
                    self._retrying(lambda: upload(self.fs, path, parts, self.chunk_bytes), attempts)
                except FileNotFoundError:
                    raise StoreError(f"write blob failed in {self}: no such bucket") from None

    def write_blob_hashing(self, parts: Iterable[object], algorithm: Digest, size: int) -> tuple[str, bool]:
        """Write a blob whose digest is not known yet and make it durable; returns its digest
        and whether the store gained it (False: a blob of that digest was there already).

        Locally this is one pass: the parts (``size`` bytes in all) are hashed while they are
        written to a temporary file, which is fsynced and linked under its digest; when that
        name exists already its blob is kept (and refreshed for gc, as ``claim_blob`` does) and
        the temporary file dropped. Object stores have no rename: there the digest is computed
        first and an existing blob claimed (``parts`` must then be a list or tuple)."""
        if not self.local:
            parts = list(parts)
            digest = algorithm.of(parts, size)
            if self.claim_blob(digest, size):
                return digest, False
            self.write_blob(digest, parts)
            return digest, True
        folder = f"{self.root}/blobs"
        hasher = algorithm.new(size)
        with self._errors("write blob"):
            os.makedirs(folder, exist_ok=True)
            tmp = f"{folder}/.tmp-{uuid.uuid4().hex}"
            try:
                _write_durably(tmp, parts, hasher.update)
                digest = algorithm.finish(hasher)
                path = self.blob_path(digest)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                new = _link_or_refresh(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            _fsync_dir(os.path.dirname(path))
        return digest, new

    @contextmanager
    def open_blob(self, digest: str):
        """A binary file for reading the blob; yields ``(file, size)``. On object stores big
        reads stream straight into the caller's buffer (``RangedReader``): read big pieces."""
        path = self.blob_path(digest)
        with self._errors("read blob"):
            if self.local:
                size = self.fs.info(path)["size"]
                with self.fs.open(path, "rb") as f:
                    yield f, size
            else:
                # The first window tells the size of a blob smaller than it: no metadata request.
                first = self.fs.cat_file(path, start=0, end=READ_WINDOW)
                size = len(first) if len(first) < READ_WINDOW else self.fs.info(path)["size"]
                with RangedReader(self.fs, path, size, READ_WINDOW, first) as f:
                    yield f, size

    def list_blobs(self) -> list[BlobInfo]:
        """Every blob in the workspace with size and modification time (for gc)."""
        out = []
        with self._errors("list blobs"):
            self._invalidate(f"{self.root}/blobs")
            try:
                entries = self.fs.find(f"{self.root}/blobs", detail=True)
            except FileNotFoundError:
                return []
        for path, info in entries.items():
            name = path.rsplit("/", 1)[-1].removesuffix(".safetensors")
            if is_digest(name):
                out.append(BlobInfo(name, int(info.get("size") or 0), _mtime(info)))
        return out

    def list_partial_writes(self) -> list[tuple[str, int, float | None]]:
        """Temporary files (``*.tmp-*``) left by writers that died mid-write, as
        ``(path, size, mtime)``; a live writer's are young, so gc's grace period spares them."""
        with self._errors("list partial writes"):
            self._invalidate(self.root)
            try:
                entries = self.fs.find(self.root, detail=True)
            except FileNotFoundError:
                return []
        return [(path, int(info.get("size") or 0), _mtime(info))
                for path, info in entries.items() if ".tmp-" in path.rsplit("/", 1)[-1]]

    def delete_partial_write(self, path: str) -> None:
        """Remove one file listed by ``list_partial_writes`` (nothing else is accepted)."""
        if not path.startswith(f"{self.root}/") or ".tmp-" not in path.rsplit("/", 1)[-1]:
            raise InvalidInputError(f"not a partial write of this workspace: {path}")
        with self._errors("delete partial write"):
            try:
                self.fs.rm_file(path)
            except FileNotFoundError:
                pass

    def delete_blob(self, digest: str) -> None:
        with self._errors("delete blob"):
            try:
                self.fs.rm_file(self.blob_path(digest))
            except FileNotFoundError:
                pass

    # -- manifests ---------------------------------------------------------------------------
    def commit_manifest(self, snapshot_id: str, data: bytes) -> None:
        """Create the manifest; its presence is the commit. Raises ``CommitConflictError``
        if that id was already committed (by this or another writer)."""
        path = self.manifest_path(snapshot_id)
        with self._errors("commit manifest"):
            try:
                self._create(path, data)
            except FileExistsError:
                raise CommitConflictError(f"snapshot {snapshot_id} is already committed") from None

    def read_manifest_bytes(self, snapshot_id: str) -> bytes:
        with self._errors("read manifest"):
            return self.fs.cat_file(self.manifest_path(snapshot_id))

    def list_snapshot_ids(self) -> list[str]:
        """Ids of committed manifests, oldest first (ids sort by creation time)."""
        folder = f"{self.root}/snapshots"
        with self._errors("list snapshots"):
            self._invalidate(folder)
            try:
                names = self.fs.ls(folder, detail=False)
            except FileNotFoundError:
                return []
        ids = [n.rsplit("/", 1)[-1].removesuffix(".json") for n in names if n.endswith(".json")]
        return sorted(i for i in ids if SNAPSHOT_ID_RE.match(i))

    def delete_manifest(self, snapshot_id: str) -> None:
        with self._errors("delete snapshot"):
            self.fs.rm_file(self.manifest_path(snapshot_id))

    # -- records -----------------------------------------------------------------------------
    def read_record(self, name: str) -> bytes | None:
        """The record's bytes, or None when it does not exist."""
        with self._errors("read record"):
            try:
                return self.fs.cat_file(self.record_path(name))
            except FileNotFoundError:
                return None

    def write_record(self, name: str, data: bytes, *, create_only: bool = False) -> None:
        """Write a record; ``create_only`` raises ``FileExistsError`` if it already exists."""
        path = self.record_path(name)
        with self._errors("write record"):
            if create_only:
                self._create(path, data)
            elif self.local:
                self._write_local_atomic(path, [data], create_only=False)
            else:
                self.fs.pipe_file(path, data, mode="overwrite")

    def delete_record(self, name: str) -> None:
        with self._errors("delete record"):
            try:
                self.fs.rm_file(self.record_path(name))
            except FileNotFoundError:
                pass

    # -- helpers -----------------------------------------------------------------------------
    def _create(self, path: str, data: bytes) -> None:
        """Create-only write of a small object; ``FileExistsError`` when it already exists.

        On object stores gcsfs retries a request whose answer was lost; if the first attempt had
        landed, the retry meets its own object. Equal bytes there mean the write was ours."""
        if self.local:
            self._write_local_atomic(path, [data], create_only=True)
            return
        try:
            self.fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            self._invalidate(path)
            if self.fs.cat_file(path) != data:
                raise
        self._invalidate(path)

    def _retrying(self, action: Callable[[], T], attempts: int) -> T:
        """Run ``action``; on a transient failure wait (exponential backoff, full jitter) and run
        it again, ``attempts`` times in all. Permanent failures leave at once."""
        for attempt in range(attempts):
            try:
                return action()
            except Exception as exc:
                if attempt == attempts - 1 or not is_transient(exc):
                    raise
            time.sleep(random.uniform(0, min(RETRY_MAX_DELAY, RETRY_BASE_DELAY * 2**attempt)))
        raise AssertionError("unreachable")

    def _write_local_atomic(self, path: str, parts: Iterable[object], *, create_only: bool) -> None:
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            _write_durably(tmp, parts)
            if create_only:
                os.link(tmp, path)  # fails with FileExistsError when another writer won
            else:
                os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        _fsync_dir(folder)

    def _invalidate(self, path: str) -> None:
        if not self.local:
            self.fs.invalidate_cache(path)

    @contextmanager
    def _errors(self, action: str):
        """Turn storage failures into ``StoreError`` with a message safe to show and log."""
        try:
            yield
        except (FileNotFoundError, FileExistsError, InvalidInputError, StoreError):
            raise
        except (OSError, RuntimeError, ValueError, TimeoutError, *_transport_errors()) as exc:
            raise StoreError(f"{action} failed in {self}: {describe(exc)}") from None


def resolve_concurrency(explicit: int | None = None, *, local: bool,
                        env: dict[str, str] | None = None) -> int:
    """Parallel transfers callers should run: ``explicit``, else ``GKERESUME_CONCURRENCY``, else
    4 for a local directory and 8 for an object store."""
    env = os.environ if env is None else env
    value: object = explicit
    if value is None and env.get("GKERESUME_CONCURRENCY"):
        value = env["GKERESUME_CONCURRENCY"].strip()
    if value is None:
        return DEFAULT_CONCURRENCY["local" if local else "remote"]
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        number = 0
    if not 1 <= number <= MAX_CONCURRENCY:
        raise InvalidInputError(
            f"concurrency (GKERESUME_CONCURRENCY) must be 1..{MAX_CONCURRENCY}, not {value!r}"
        )
    return number


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Exception types of the object-store clients that are not ``OSError`` (imported lazily:
    gcsfs is optional)."""
    found: list[type[BaseException]] = []
    try:
        from gcsfs.retry import HttpError

        found.append(HttpError)
    except ImportError:
        pass
    try:
        from aiohttp import ClientError

        found.append(ClientError)
    except ImportError:
        pass
    try:
        from google.auth.exceptions import GoogleAuthError

        found.append(GoogleAuthError)
    except ImportError:
        pass
    return tuple(found)


def is_transient(exc: BaseException) -> bool:
    """Worth restarting a whole upload: its session was lost or cut short, or it timed out.
    (Single requests that failed on 5xx, 408, 429 or a dropped connection were already retried
    by gcsfs, about 35 s in all: trying those again here would only make users wait longer.)"""
    return isinstance(exc, (UploadInterrupted, TimeoutError))


_SECRET_PATTERNS = (
    (re.compile(r"(https?://[^\s?#]+)\?[^\s#'\"]*"), r"\1?..."),  # query strings: upload ids, keys
    (re.compile(r"(?i)(bearer\s+)[\w.~+/-]+=*"), r"\1***"),
    (re.compile(r"(?i)((?:access_token|refresh_token|token|key|signature)[\"']?\s*[:=]\s*[\"']?)"
                r"[^\s\"'&,}]+"), r"\1***"),
    (re.compile(r"://[^/\s@]+@"), "://***@"),
)


def describe(exc: BaseException) -> str:
    """``Type: message`` for an exception, with anything that could be a credential masked."""
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text[:500]


def _write_durably(path: str, parts: Iterable[object],
                   observe: Callable[[memoryview], object] | None = None) -> None:
    """Write ``parts`` (buffers, in order) to a new file ``path`` and fsync it; ``observe``
    sees every chunk just before it is written (a hasher's ``update``)."""
    with open(path, "wb") as f:
        for part in parts:
            view = memoryview(part).cast("B")
            for start in range(0, len(view), WRITE_CHUNK):
                chunk = view[start : start + WRITE_CHUNK]
                if observe is not None:
                    observe(chunk)
                f.write(chunk)
        f.flush()
        os.fsync(f.fileno())


def _link_or_refresh(tmp: str, path: str) -> bool:
    """Link ``tmp`` as ``path``: True; or, when ``path`` exists (equal bytes, by its name),
    refresh its age so gc's grace period protects it: False."""
    while True:
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            try:
                os.utime(path)
                return False
            except FileNotFoundError:
                continue  # removed by gc in between: link ours


def _fsync_dir(folder: str) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _mtime(info: dict[str, Any]) -> float | None:
    """Last write or ``claim_blob`` refresh of an object, from fsspec's ``info``."""
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
            from datetime import datetime

            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                return None
    return None


def _safe_url(url: str) -> str:
    """The URL without any userinfo (credentials never reach messages or logs)."""
    if "://" in url and "@" in url.split("://", 1)[1].split("/", 1)[0]:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
