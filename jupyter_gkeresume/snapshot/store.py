"""The snapshot store: one workspace's blobs, manifests and small records in an fsspec location.

Layout under ``{url}/{workspace}/``::

    blobs/{digest[:2]}/{digest}.safetensors   content-addressed, immutable, shared by snapshots
    snapshots/{snapshot_id}.json              manifests; presence of one is the commit
    records/{name}.json                       small mutable records (paused record, leases, ...)

Commit protocol (the order callers must follow): write every blob (``write_blob``) until each is
durable, then ``commit_manifest`` once. Locally a blob is written to a temporary name, fsynced and
renamed; the manifest is linked into place so that a second writer of the same id fails. On object
stores there are no renames: blobs are written under their final, content-addressed names (a
partial upload is never visible on GCS) and the manifest is created with a create-only
precondition (``ifGenerationMatch=0``). Either way a crash at any point leaves no manifest that
names a missing blob, and every earlier snapshot intact.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ..errors import CommitConflictError, InvalidInputError, StoreError
from .format import DIGEST_RE, SNAPSHOT_ID_RE, validate_digest, validate_snapshot_id

RECORD_NAMES = ("paused", "events")
WRITE_CHUNK = 16 << 20


@dataclass(frozen=True)
class BlobInfo:
    """A blob as the store lists it (for gc)."""

    digest: str
    size: int
    mtime: float | None


class SnapshotStore:
    """Blobs, manifests and records of one workspace; ``url`` is any fsspec URL or local path."""

    def __init__(self, url: str, workspace: str, storage_options: dict[str, Any] | None = None):
        from ..workspace import validate_workspace_id

        self.url = url
        self.workspace = validate_workspace_id(workspace)
        try:
            self.fs, base = fsspec.core.url_to_fs(url, **(storage_options or {}))
        except (ImportError, ValueError) as exc:
            raise InvalidInputError(f"cannot open store {_safe_url(url)}: {exc}") from None
        self.local = isinstance(self.fs, LocalFileSystem)
        self.root = f"{base.rstrip('/')}/{self.workspace}"

    def __repr__(self) -> str:
        return f"SnapshotStore({_safe_url(self.url)!r}, {self.workspace!r})"

    # -- paths -----------------------------------------------------------------------------
    def blob_path(self, digest: str) -> str:
        validate_digest(digest)
        return f"{self.root}/blobs/{digest[:2]}/{digest}.safetensors"

    def manifest_path(self, snapshot_id: str) -> str:
        return f"{self.root}/snapshots/{validate_snapshot_id(snapshot_id)}.json"

    def record_path(self, name: str) -> str:
        if name not in RECORD_NAMES and not name.startswith("lease-"):
            raise InvalidInputError(f"unknown record {name!r}")
        return f"{self.root}/records/{name}.json"

    # -- blobs -----------------------------------------------------------------------------
    def has_blob(self, digest: str, size: int | None = None) -> bool:
        """True when the blob exists (and has ``size`` bytes, when given)."""
        with self._errors("check blob"):
            try:
                info = self.fs.info(self.blob_path(digest))
            except FileNotFoundError:
                return False
        return size is None or info.get("size") == size

    def write_blob(self, digest: str, parts: Iterable[object]) -> None:
        """Write a blob from its parts (buffers, in order) and make it durable.

        The caller computed ``digest`` over exactly these parts; writing the same digest twice is
        harmless. Nothing is visible under the final name until it is complete.
        """
        path = self.blob_path(digest)
        with self._errors("write blob"):
            if self.local:
                self._write_local_atomic(path, parts, create_only=False)
            else:
                with self.fs.open(path, "wb") as f:
                    _write_parts(f, parts)

    @contextmanager
    def open_blob(self, digest: str):
        """A binary file for reading the blob; yields ``(file, size)``."""
        path = self.blob_path(digest)
        with self._errors("read blob"):
            size = self.fs.info(path)["size"]
            with self.fs.open(path, "rb") as f:
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
            if DIGEST_RE.match(name):
                out.append(BlobInfo(name, int(info.get("size") or 0), _mtime(info)))
        return out

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
                if self.local:
                    self._write_local_atomic(path, [data], create_only=True)
                else:
                    self.fs.pipe_file(path, data, mode="create")
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
            if self.local:
                self._write_local_atomic(path, [data], create_only=create_only)
            else:
                self.fs.pipe_file(path, data, mode="create" if create_only else "overwrite")

    def delete_record(self, name: str) -> None:
        with self._errors("delete record"):
            try:
                self.fs.rm_file(self.record_path(name))
            except FileNotFoundError:
                pass

    # -- helpers -----------------------------------------------------------------------------
    def _write_local_atomic(self, path: str, parts: Iterable[object], *, create_only: bool) -> None:
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as f:
                _write_parts(f, parts)
                f.flush()
                os.fsync(f.fileno())
            if create_only:
                os.link(tmp, path)  # fails with FileExistsError when another writer won
            else:
                os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

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
        except (OSError, RuntimeError, ValueError, TimeoutError) as exc:
            raise StoreError(f"{action} failed in {self}: {type(exc).__name__}: {exc}") from exc


def _write_parts(f: BinaryIO, parts: Iterable[object]) -> None:
    for part in parts:
        view = memoryview(part).cast("B")
        for start in range(0, len(view), WRITE_CHUNK):
            f.write(view[start : start + WRITE_CHUNK])


def _mtime(info: dict[str, Any]) -> float | None:
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
