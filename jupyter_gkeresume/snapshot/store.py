"""The snapshot store: one workspace's blobs, manifests and small records.

Layout under ``{url}/{workspace}/``::

    blobs/{hex[:2]}/{digest}.safetensors      content-addressed, immutable, shared by snapshots
                                              (digest: sha256 hex, or b3-{hex} for BLAKE3)
    snapshots/{snapshot_id}.json              manifests; presence of one is the commit
    records/{name}.json                       small records (paused record, events, leases)

The bytes live in a backend chosen once from the URL (``backends``: a local directory, or any
fsspec filesystem such as GCS); this class names things and checks names, the backend moves
bytes. The commit protocol itself (claim or write every blob, then sign and commit the manifest
create-only, read it back, remove it on failure) is ``writer.SnapshotWriter``; this class only
offers its steps. Reads of manifests go through ``manifests`` (signature checked there).

Errors: a missing object is ``NotFoundInStore``, a create-only write that finds its object is
``CommitConflictError``, a 401 (the pod has no credentials: gcsfs fell back to anonymous access)
``NoCredentialsError`` with the fix, everything else ``StoreError`` with a message that names the
store without credentials (``store_failure``). Every method is safe to call from many threads at
once; ``concurrency`` is how many the callers should use (``GKERESUME_CONCURRENCY``).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar

from ..credentials import mask
from ..errors import (
    CommitConflictError,
    GkeResumeError,
    InvalidInputError,
    ManifestError,
    NoCredentialsError,
    NotFoundInStore,
    StoreError,
)
from .backends import OBSERVED_CHUNK, WRITE_CHUNK, LocalBackend, Sent, local_root, open_backend
from .digests import BLAKE3, PARALLEL_HASH_BYTES, Digest, hex_part, is_digest
from .format import SNAPSHOT_ID_RE, validate_snapshot_id

T = TypeVar("T")
RECORD_NAMES = ("paused", "events", "settings")
LEASE_RECORD_RE = re.compile(r"\Alease-[a-z0-9][a-z0-9._-]{0,150}\Z")
DEFAULT_CHUNK_BYTES = 32 << 20
DEFAULT_CONCURRENCY = {"local": 4, "remote": 8}
MAX_CONCURRENCY = 256
DEFAULT_RETRIES = 3
_WORKLOAD_IDENTITY = (
    "On GKE the pod's Google credentials come from the metadata server (169.254.169.254) through "
    "Workload Identity: bind the pod's Kubernetes service account to a principal that may use "
    "the bucket (deploy/gcs), and let the pod reach the metadata server")
_REACH_METADATA = {
    "jupyterhub": " (Zero to JupyterHub: singleuser.cloudMetadata.blockWithIptables: false and, "
    "with Dataplane V2 or on Autopilot, singleuser.networkPolicy.egressAllowRules."
    "cloudMetadataServer: true).",
    "kubeflow-v1": " (Kubeflow Notebooks v1: the namespace's default-editor account is the one "
    "bound; no NetworkPolicy or Istio egress rule may block that address).",
    "kubeflow-v2": " (Kubeflow Notebooks v2: the pod runs as ws-{workspace name}, bound like the "
    "namespace's other accounts by deploy/gcs/grant-namespace.sh; no NetworkPolicy or Istio "
    "egress rule may block that address).",
}


def no_credentials_advice(platform: str | None = None, *, point_to_doctor: bool = True) -> str:
    """What to do when the store answered 401, for ``platform`` (``platform.detect().name``;
    None: detect it): that platform's settings only. ``point_to_doctor``: end by naming the
    command that checks it (not in the doctor's own output)."""
    if platform is None:
        from ..platform import detect

        platform = detect().name
    reach = _REACH_METADATA.get(platform)
    advice = (f"{_WORKLOAD_IDENTITY}{reach}" if reach else  # not known: every platform's way
              f"{_WORKLOAD_IDENTITY}{_REACH_METADATA['jupyterhub'][:-2]}; Kubeflow: no "
              "NetworkPolicy blocking it). Elsewhere: GOOGLE_APPLICATION_CREDENTIALS.")
    return advice + (" `jupyter gkeresume doctor` checks it." if point_to_doctor else "")


#: Manifests larger than this are refused unread beyond it (a planted one must not cost a
#: listing its size in memory); ``commit_manifest`` refuses to write one, so none of ours is.
MAX_MANIFEST_BYTES = 16 << 20


@dataclass(frozen=True)
class BlobInfo:
    """A blob as the store lists it (for gc)."""

    digest: str
    size: int
    mtime: float | None


class SnapshotStore:
    """Blobs, manifests and records of one workspace; ``url`` is any fsspec URL or local path.

    ``fs`` is the fsspec filesystem behind it (for tools and tests); the store itself only
    talks to ``backend``. A local path (or ``file://`` URL) opens its backend without fsspec,
    whose import reads every installed distribution's entry points (20 ms of a pause's first
    checkpoint); ``fs`` imports it when first asked."""

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
        base = None if storage_options else local_root(url)
        self._fs = None
        if base is None:
            import fsspec

            try:
                self._fs, base = fsspec.core.url_to_fs(url, **(storage_options or {}))
            except (ImportError, ValueError) as exc:
                raise InvalidInputError(f"cannot open store {_safe_url(url)}: {exc}") from None
        self.root = f"{base.rstrip('/')}/{self.workspace}"
        if chunk_bytes <= 0 or chunk_bytes % (256 << 10):
            raise InvalidInputError(f"chunk_bytes must be a multiple of 256 KiB: {chunk_bytes}")
        if not 0 <= retries <= 10:
            raise InvalidInputError(f"retries must be between 0 and 10: {retries}")
        self.chunk_bytes, self.retries = chunk_bytes, retries
        with self._errors("open store"):
            self.backend = (LocalBackend(self.root) if self._fs is None else
                            open_backend(self._fs, self.root, chunk_bytes=chunk_bytes,
                                         retries=retries))
        self.concurrency = resolve_concurrency(concurrency, local=self.backend.local)

    def __repr__(self) -> str:
        return f"SnapshotStore({_safe_url(self.url)!r}, {self.workspace!r})"

    @property
    def fs(self) -> Any:
        """The fsspec filesystem behind the store (a local one is made when first asked)."""
        if self._fs is None:
            from fsspec.implementations.local import LocalFileSystem

            self._fs = LocalFileSystem()
        return self._fs

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
    def blob_size(self, digest: str) -> int | None:
        """The stored size of a blob, or None when it is not there."""
        return self._unless_missing("check blob", lambda: self.backend.size(self.blob_path(digest)))

    def blob_stat(self, digest: str) -> tuple[int, int | None] | None:
        """``(size, crc32c)`` of a blob from one metadata request (crc32c None where the store
        keeps none: a local directory), or None when it is not there."""
        return self._unless_missing("check blob", lambda: self.backend.stat(self.blob_path(digest)))

    def has_blob(self, digest: str, size: int | None = None) -> bool:
        """True when the blob exists (and has ``size`` bytes, when given)."""
        stored = self.blob_size(digest)
        return stored is not None and (size is None or stored == size)

    def claim_blob(self, digest: str, size: int, crc32c: Callable[[], int] | None = None) -> bool:
        """Reuse an existing blob: True when it exists with ``size`` bytes and, where the store
        keeps a crc32c of every object (GCS) and ``crc32c`` is given, with the crc32c that
        ``crc32c()`` computes over the caller's own bytes (asked only then). A blob planted under
        a predictable name with other bytes is so not reused: the caller writes its own over it.
        Its age is refreshed, so that gc's grace period protects it until the manifest that
        reuses it commits. (``writer.SnapshotWriter`` is the caller; see its call order.)"""
        stat = self.blob_stat(digest)
        if stat is None or stat[0] != size:
            return False
        if stat[1] is not None and crc32c is not None and stat[1] != crc32c():
            return False
        try:
            with self._errors("refresh blob"):
                self.backend.touch(self.blob_path(digest))
        except NotFoundInStore:
            return False
        return True

    def write_blob(self, digest: str, parts: Iterable[object], *,
                   sent: Sent | None = None) -> int | None:
        """Write a blob from its parts (buffers, in order) and make it durable; returns the
        crc32c the store keeps of it (already checked against the bytes sent), None where it
        keeps none. An object already under that name is replaced.

        The caller computed ``digest`` over exactly these parts; writing the same digest twice is
        harmless. Nothing is visible under the final name until it is complete. Only a list or
        tuple of parts lets a failed upload be restarted (an iterator can be read once).
        ``sent`` (for progress) is told the bytes of each chunk as it is written locally, of the
        whole blob once its upload completed on an object store.
        """
        with self._errors("write blob"):
            return self.backend.write(self.blob_path(digest), parts, sent)

    def write_blob_hashing(self, parts: Iterable[object], algorithm: Digest, size: int, *,
                           sent: Sent | None = None) -> tuple[str, bool]:
        """Write a blob whose digest is not known yet and make it durable, in one pass (local
        stores only: ``hashes_while_writing``); returns its digest and whether the name was new.

        The parts (``size`` bytes in all) are hashed while they are written to a temporary file,
        which is fsynced and linked under its digest; a file that was there under that name is
        replaced by ours (a name is predictable from the content, so whatever was there may hold
        other bytes of the same size). ``sent``: as for ``write_blob``."""
        if not self.hashes_while_writing:
            raise InvalidInputError(f"{self} cannot hash a blob while writing it: "
                                    "compute its digest first")
        hasher = algorithm.new(size)
        step = self.hashing_chunk(algorithm, size)

        def observe(chunk: memoryview) -> None:
            hasher.update(chunk)
            if sent is not None:
                sent(len(chunk))

        with self._errors("write blob"):
            new = self.backend.write_named_by_content(
                f"{self.root}/blobs", parts, observe,
                lambda: self.blob_path(algorithm.finish(hasher)), step,
            )
        return algorithm.finish(hasher), new

    @staticmethod
    def hashing_chunk(algorithm: Digest, size: int) -> int:
        """The chunk ``write_blob_hashing`` hashes and writes a blob of ``size`` bytes in: 1 MiB
        when one thread hashes it (each chunk is still in the CPU's cache when it is copied: one
        pass), 16 MiB when BLAKE3 hashes it with every core (``digests.PARALLEL_HASH_BYTES``: its
        threads cost more than they save on smaller pieces)."""
        threaded = algorithm is BLAKE3 and size >= PARALLEL_HASH_BYTES
        return WRITE_CHUNK if threaded else OBSERVED_CHUNK

    @property
    def hashes_while_writing(self) -> bool:
        """Whether ``write_blob_hashing`` works here (a local directory: it needs a rename)."""
        return isinstance(self.backend, LocalBackend)

    @contextmanager
    def open_blob(self, digest: str, *, keep_cache: bool = False) -> Iterator[tuple[BinaryIO, int]]:
        """A binary file for reading the blob; yields ``(file, size)``. On object stores big
        reads stream straight into the caller's buffer (``RangedReader``): read big pieces. On
        a local directory the file's cached pages are dropped after, unless ``keep_cache``
        (the caller maps the file)."""
        path = self.blob_path(digest)
        with self._errors(f"read blob {digest[:12]}"), \
                self.backend.open_read(path, keep_cache) as opened:
            yield opened

    def list_blobs(self) -> list[BlobInfo]:
        """Every blob in the workspace with size and modification time (for gc)."""
        with self._errors("list blobs"):
            entries = self.backend.find(f"{self.root}/blobs")
        out = []
        for path, (size, mtime) in entries.items():
            name = path.rsplit("/", 1)[-1].removesuffix(".safetensors")
            if is_digest(name):
                out.append(BlobInfo(name, size, mtime))
        return out

    def list_partial_writes(self) -> list[tuple[str, int, float | None]]:
        """Temporary files (``*.tmp-*``) left by writers that died mid-write, as
        ``(path, size, mtime)``; a live writer's are young, so gc's grace period spares them."""
        with self._errors("list partial writes"):
            entries = self.backend.find(self.root)
        return [(path, size, mtime) for path, (size, mtime) in entries.items()
                if ".tmp-" in path.rsplit("/", 1)[-1]]

    def delete_partial_write(self, path: str) -> None:
        """Remove one file listed by ``list_partial_writes`` (nothing else is accepted)."""
        if not path.startswith(f"{self.root}/") or ".tmp-" not in path.rsplit("/", 1)[-1]:
            raise InvalidInputError(f"not a partial write of this workspace: {path}")
        with self._errors("delete partial write"):
            self.backend.delete(path)

    def delete_blob(self, digest: str) -> None:
        with self._errors("delete blob"):
            self.backend.delete(self.blob_path(digest))

    # -- manifests ---------------------------------------------------------------------------
    def commit_manifest(self, snapshot_id: str, data: bytes) -> None:
        """Create the manifest; its presence is the commit. Raises ``CommitConflictError``
        if that id was already committed (by this or another writer)."""
        path = self.manifest_path(snapshot_id)
        if len(data) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"snapshot {snapshot_id}: its manifest is {len(data)} bytes, more "
                                f"than the {MAX_MANIFEST_BYTES} a manifest may hold")
        try:
            with self._errors("commit manifest"):
                self.backend.create(path, data)
        except CommitConflictError:
            raise CommitConflictError(f"snapshot {snapshot_id} is already committed") from None

    def read_manifest_bytes(self, snapshot_id: str) -> bytes:
        """The manifest's bytes; ``NotFoundInStore`` when it is not committed (or was removed),
        ``ManifestError`` when it holds more than ``MAX_MANIFEST_BYTES`` (read no further).
        Parse and check them with ``manifests.read_manifest``, never by hand."""
        path = self.manifest_path(snapshot_id)
        try:
            with self._errors("read manifest"):
                data = self.backend.read(path, MAX_MANIFEST_BYTES + 1)
        except NotFoundInStore:
            raise NotFoundInStore(f"snapshot {snapshot_id} is not in {self}") from None
        if len(data) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"manifest {path} is larger than {MAX_MANIFEST_BYTES} bytes: not "
                                f"one this product wrote; remove it with `jupyter gkeresume rm "
                                f"{snapshot_id}`")
        return data

    def read_manifest_head(self, snapshot_id: str) -> bytes:
        """At most ``MAX_MANIFEST_BYTES`` of a manifest's bytes, whatever its size (b"" when it
        is gone): what gc reads of one that cannot be parsed."""
        data = self._unless_missing(
            "read manifest", lambda: self.backend.read(self.manifest_path(snapshot_id),
                                                       MAX_MANIFEST_BYTES))
        return data or b""

    def list_snapshot_ids(self) -> list[str]:
        """Ids of committed manifests, oldest first (ids sort by creation time)."""
        with self._errors("list snapshots"):
            names = self.backend.names(f"{self.root}/snapshots")
        ids = [n.removesuffix(".json") for n in names if n.endswith(".json")]
        return sorted(i for i in ids if SNAPSHOT_ID_RE.match(i))

    def delete_manifest(self, snapshot_id: str) -> None:
        """Remove a manifest; removing one that is already gone is not an error."""
        with self._errors("delete snapshot"):
            self.backend.delete(self.manifest_path(snapshot_id))

    # -- records -----------------------------------------------------------------------------
    def read_record(self, name: str) -> bytes | None:
        """The record's bytes, or None when it does not exist."""
        return self._unless_missing("read record", lambda: self.backend.read(self.record_path(name)))

    def write_record(self, name: str, data: bytes, *, create_only: bool = False) -> None:
        """Write a record; ``create_only`` raises ``CommitConflictError`` if it already exists."""
        path = self.record_path(name)
        with self._errors("write record"):
            if create_only:
                self.backend.create(path, data)
            else:
                self.backend.put(path, data)

    def probe_write(self) -> None:
        """Prove that this workspace's folder takes the commit's kind of write (create-only):
        a test object ``records/probe-{random}.json`` is created, then removed (the doctor)."""
        path = f"{self.root}/records/probe-{uuid.uuid4().hex}.json"
        with self._errors("write a create-only test object"):
            self.backend.create(path, b'{"probe": true}')
        with self._errors("remove the test object"):
            self.backend.delete(path)

    def check_reachable(self, timeout: float) -> None:
        """One listing of the workspace with a deadline, so an unreachable object store fails
        in ``timeout`` seconds (gcsfs alone retries a refused connection for about 35 s, a
        black-holed one for minutes) with one clear line; nothing for a local store or
        ``timeout <= 0``. Callers: the CLI before any command, the doctor before its probe."""
        if self.backend.local or timeout <= 0:
            return
        from fsspec.exceptions import FSTimeoutError

        try:
            self.fs.ls(self.root, timeout=timeout)  # fsspec's sync wrappers take a deadline
        except FileNotFoundError:
            pass  # reachable; the workspace has no snapshots yet
        except FSTimeoutError:
            raise StoreError(f"the store {_safe_url(self.url)} did not answer within "
                             f"{timeout:g} s: unreachable, or no network (if it is only slow: "
                             "--CommandApp.store_timeout=SECONDS)") from None
        except (OSError, ValueError, *_transport_errors()) as exc:
            raise store_failure(str(self), exc) from None

    def list_records(self, prefix: str) -> dict[str, float | None]:
        """Names (without ``.json``) of the records starting with ``prefix``, with their
        modification times (for gc of lease chains)."""
        with self._errors("list records"):
            entries = self.backend.find(f"{self.root}/records")
        out = {}
        for path, (_, mtime) in entries.items():
            name = path.rsplit("/", 1)[-1]
            if name.startswith(prefix) and name.endswith(".json"):
                out[name.removesuffix(".json")] = mtime
        return out

    def delete_record(self, name: str) -> None:
        with self._errors("delete record"):
            self.backend.delete(self.record_path(name))

    # -- helpers -----------------------------------------------------------------------------
    def _unless_missing(self, action: str, call: Callable[[], T]) -> T | None:
        """``call()`` at the backend boundary, or None when what it reads is not there."""
        try:
            with self._errors(action):
                return call()
        except NotFoundInStore:
            return None

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """The backend boundary: builtin and client errors become the store's own errors, with
        a message safe to show and log."""
        try:
            yield
        except GkeResumeError:
            raise
        except FileNotFoundError:
            raise NotFoundInStore(f"{action}: not found in {self}") from None
        except FileExistsError:
            raise CommitConflictError(f"{action}: already exists in {self}") from None
        except (OSError, RuntimeError, ValueError, TimeoutError, *_transport_errors()) as exc:
            raise store_failure(f"{action} failed in {self}", exc) from None


def store_failure(what: str, exc: BaseException) -> StoreError:
    """The store's error for a client's failure ``exc`` while doing ``what``: an answer 401
    (unauthenticated; gcsfs raises ``HttpError`` with ``code``) means the pod has no credentials
    and gets the fix; anything else is a ``StoreError`` with ``describe(exc)``."""
    if getattr(exc, "code", None) == 401:
        return NoCredentialsError(f"no credentials: {what}: the store answered 401 "
                                  f"Unauthorized ({describe(exc)}). {no_credentials_advice()}")
    return StoreError(f"{what}: {describe(exc)}")


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


def describe(exc: BaseException) -> str:
    """``Type: message`` for an exception, with anything that could be a credential masked."""
    return mask(f"{type(exc).__name__}: {exc}".strip().rstrip(":"))[:500]


def _safe_url(url: str) -> str:
    """The URL without any userinfo (credentials never reach messages or logs)."""
    return mask(url)
