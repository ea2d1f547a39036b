"""The commit protocol of one snapshot, in one place: blobs, then a signed manifest, verified.

Call order (one ``SnapshotWriter`` per snapshot; the kernel's capture drives it):

1. ``put_blob(digest, size, parts)`` for every blob, from any number of threads: an existing
   blob of that size is claimed (its age refreshed, so gc's grace period protects it until the
   manifest that reuses it commits), else written from ``parts()`` and made durable
   (``claim_blob``: the claim alone, False where the store lacks the blob); or
   ``put_new_blob(size, parts, algorithm)`` for a blob whose digest is not known yet (hashed
   while it is written where the store can, ``SnapshotStore.write_blob_hashing``). Blob names
   are predictable from their content, so what is found under one is never trusted by its name
   and size alone: locally our own bytes replace it, on a store that keeps a crc32c of every
   object (GCS) it is claimed only when that crc32c is the one of our bytes, else overwritten;
2. ``commit(manifest)`` once: every blob the manifest names must have been put by this writer
   with that size; the crc32c of each blob as the store keeps it (where it keeps one) goes
   into ``manifest.blob_crc32c``; the manifest is signed and created create-only (its presence
   is the commit; ``CommitConflictError`` if that id exists, and then nothing is removed: it is
   another writer's), then read back and checked by ``verify_committed``. If that check fails
   the manifest is removed again before the error leaves: a commit that cannot restore never
   stays. Once committed, the key's id is kept as one of this workspace's (``remember_key``).

``verify_committed(store, key, id, mode=...)`` is also what the server runs before it releases
a pod. ``mode`` is one of ``VERIFY_MODES``:

- ``"metadata"`` (default): the manifest read back (parses, names itself and this workspace,
  signature valid) and every blob present with its size and, where the store keeps one, the
  crc32c the signed manifest names. A local blob is durable once it and its directory were
  fsynced, an object-store blob once its upload completed, so this catches a gc that swept a
  reused blob meanwhile, a truncated or missing object, an object replaced by other bytes (on
  GCS), a manifest that does not read back; it does not re-read the bytes.
- ``"full"``: the same, then every blob read back in full and checked against its digest
  (``verify.verify_snapshot``): also catches bytes corrupted after they were written.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from ..errors import IntegrityError, InvalidInputError, ManifestError
from .checksum import extend, to_base64
from .digests import Digest
from .format import Manifest
from .manifests import load_manifest
from .signing import SigningKey, remember_key, sign
from .store import Sent, SnapshotStore
from .verify import VerifyProgress, verify_snapshot

VERIFY_MODES = ("metadata", "full")


def validate_verify_mode(mode: object) -> str:
    if mode not in VERIFY_MODES:
        raise InvalidInputError(f"verify mode must be one of {', '.join(VERIFY_MODES)}, not {mode!r}")
    return mode  # type: ignore[return-value]


class SnapshotWriter:
    """Writes one snapshot into ``store``, signed with ``key`` (see the module docstring)."""

    def __init__(self, store: SnapshotStore, key: SigningKey, *, verify: str = "metadata"):
        self.store, self.key = store, key
        self.verify = validate_verify_mode(verify)
        self._put: dict[str, int] = {}
        self._crc32c: dict[str, int] = {}  # digest -> crc32c of our bytes as the store keeps it
        self._lock = threading.Lock()
        self.committed: str | None = None

    def put_blob(self, digest: str, size: int, parts: Callable[[], Iterable[object]], *,
                 sent: Sent | None = None, crc32c: int | None = None) -> bool:
        """Claim the blob if the store has it with ``size`` bytes (and our crc32c, where the
        store keeps one: ``crc32c`` when the caller computed it already, else computed over
        ``parts()`` when needed), else write ``parts()`` (the buffers, in order, whose content
        has ``digest``; ``sent`` is told the bytes of each chunk as it is written). True when it
        was newly written."""
        if self.claim_blob(digest, size, parts, crc32c=crc32c):
            return False
        self._record(digest, size, self.store.write_blob(digest, parts(), sent=sent))
        return True

    def claim_blob(self, digest: str, size: int, parts: Callable[[], Iterable[object]], *,
                   crc32c: int | None = None) -> bool:
        """``put_blob`` without the write: True when the store has the blob (it is claimed, and
        counts as put), else False and nothing is done."""
        self._refuse_after_commit()
        ours = _OwnChecksum(parts, crc32c)
        if not self.store.claim_blob(digest, size, ours):
            return False
        self._record(digest, size, ours.value)
        return True

    def put_new_blob(self, size: int, parts: Sequence[object], algorithm: Digest, *,
                     sent: Sent | None = None) -> tuple[str, bool]:
        """Write (or claim, as ``put_blob`` does) the blob made of ``parts`` (``size`` bytes in
        all), named by ``algorithm``; returns its digest and whether it was newly written.
        Locally in one pass (hashed while written, ``SnapshotStore.write_blob_hashing``);
        elsewhere the digest is computed first, so that a blob the store has is not uploaded."""
        if not self.store.hashes_while_writing:
            digest = algorithm.of(parts, size)
            return digest, self.put_blob(digest, size, lambda: parts, sent=sent)
        self._refuse_after_commit()
        digest, new = self.store.write_blob_hashing(parts, algorithm, size, sent=sent)
        self._record(digest, size, None)
        return digest, new

    def _record(self, digest: str, size: int, crc32c: int | None) -> None:
        with self._lock:
            self._put[digest] = size
            if crc32c is not None:
                self._crc32c[digest] = crc32c

    def _refuse_after_commit(self) -> None:
        if self.committed is not None:
            raise InvalidInputError(f"snapshot {self.committed} is already committed")

    def commit(self, manifest: Manifest, *, progress: VerifyProgress | None = None) -> Manifest:
        """Sign, commit create-only, verify (``self.verify``); returns the manifest read back."""
        with self._lock:
            unput = {d: s for d, s in manifest.blobs.items() if self._put.get(d) != s}
        if unput:
            digest, size = next(iter(sorted(unput.items())))
            raise ManifestError(f"manifest {manifest.snapshot_id} names blob {digest[:12]} "
                                f"({size} bytes) that was not written or claimed for it")
        if manifest.workspace != self.store.workspace:
            raise ManifestError(f"manifest of workspace {manifest.workspace} cannot be committed "
                                f"to {self.store.workspace}")
        with self._lock:
            manifest.blob_crc32c = {d: self._crc32c[d] for d in manifest.blobs if d in self._crc32c}
        sign(manifest, self.key)
        self.store.commit_manifest(manifest.snapshot_id, manifest.to_json())
        self.committed = manifest.snapshot_id
        try:
            committed = verify_committed(self.store, self.key, manifest.snapshot_id,
                                         mode=self.verify, progress=progress)
        except BaseException:
            self.store.delete_manifest(manifest.snapshot_id)
            raise
        remember_key(self.store.workspace, self.key)  # it may verify these after a key change
        return committed


def verify_committed(store: SnapshotStore, key: SigningKey, snapshot_id: str, *,
                     mode: str = "metadata", progress: VerifyProgress | None = None) -> Manifest:
    """Check a committed snapshot before anything relies on it (``mode``: see the module
    docstring); raises ``IntegrityError`` listing every problem, else returns its manifest."""
    validate_verify_mode(mode)
    manifest = load_manifest(store, snapshot_id, key)
    if mode == "full":
        problems = verify_snapshot(store, snapshot_id, key, progress=progress).problems
    else:
        problems = _metadata_problems(store, manifest, progress)
    if problems:
        raise IntegrityError(f"snapshot {snapshot_id} failed verification: {'; '.join(problems)}")
    return manifest


def _metadata_problems(store: SnapshotStore, manifest: Manifest,
                       progress: VerifyProgress | None) -> list[str]:
    """Every blob present with the size the manifest says, and the crc32c it signed where the
    store keeps one (asked in parallel of an object store; a local ``stat`` takes microseconds,
    less than handing it to a thread)."""
    items = sorted(manifest.blobs.items())
    if store.backend.local:
        stats = [store.blob_stat(digest) for digest, _ in items]
    else:
        with ThreadPoolExecutor(max(1, min(store.concurrency, len(items)))) as pool:
            stats = list(pool.map(lambda item: store.blob_stat(item[0]), items))
    problems = []
    for (digest, size), stat in zip(items, stats, strict=True):
        signed = manifest.blob_crc32c.get(digest)
        if stat is None:
            problems.append(f"blob {digest[:12]} is missing")
        elif stat[0] != size:
            problems.append(f"blob {digest[:12]} holds {stat[0]} bytes, the manifest says {size}")
        elif None not in (stat[1], signed) and stat[1] != signed:
            problems.append(f"blob {digest[:12]} holds other bytes than the manifest signed "
                            f"(crc32c {to_base64(stat[1])}, signed {to_base64(signed)})")
    if progress is not None:
        progress(manifest.total_bytes, manifest.total_bytes)
    return problems


class _OwnChecksum:
    """The crc32c of the bytes a writer would write, computed at most once and only when a
    store asks (``SnapshotStore.claim_blob``); ``value`` is None until then."""

    def __init__(self, parts: Callable[[], Iterable[object]], known: int | None):
        self.parts, self.value = parts, known

    def __call__(self) -> int:
        if self.value is None:
            crc = 0
            for part in self.parts():
                crc = extend(crc, memoryview(part).cast("B"))
            self.value = crc
        return self.value
