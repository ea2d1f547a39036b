"""The one reader of committed manifests: parse strictly, check identity and signature.

Every caller that reads a manifest (restore, catalog, resolve, retention, gc, verify, the CLI)
comes here, so that what counts as a usable snapshot is decided in one place:

- ``read_manifest(store, id, key)`` -> ``StoredManifest``: the parsed manifest (None when it
  cannot be parsed) and, when it does not verify, ``refused`` with the reason (unsigned, another
  key, tampered, copied from another workspace or id). It never raises for a bad manifest;
  ``NotFoundInStore`` when there is none, ``StoreError`` when the store fails.
- ``load_manifest(store, id, key)`` -> ``Manifest``: the strict form, for code that goes on to
  use the snapshot; raises ``ManifestError`` (unparsable) or ``SnapshotRefusedError``. Nothing
  accepts a manifest whose signature does not verify: one signed with an earlier key of this
  workspace is loaded with that key (``signing.key_of_workspace``).
- ``scan_manifests(store, key)``: every committed manifest, oldest first, each read as above
  (ones removed meanwhile are left out).

Only verified manifests count for ``latest``, for defaults and for retention; refused ones are
listed with their reason, and gc still protects the blobs they name (it protects more, never
less). Nothing here imports or evaluates anything a manifest names.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import IntegrityError, ManifestError, NotFoundInStore, SnapshotRefusedError
from .format import Manifest
from .signing import SigningKey, verify
from .store import SnapshotStore


@dataclass(frozen=True)
class StoredManifest:
    """One committed manifest as read. ``manifest`` is None when it cannot be parsed
    (``unreadable`` says why); ``identity`` lists how it fails to name itself and this
    workspace; ``signature`` is what is wrong with its signature (None: valid)."""

    snapshot_id: str
    manifest: Manifest | None
    unreadable: str | None = None
    identity: tuple[str, ...] = ()
    signature: str | None = None

    @property
    def refused(self) -> str | None:
        """Why this snapshot does not count (None: it verified)."""
        if self.unreadable is not None:
            return f"unreadable: {self.unreadable}"
        if self.identity:
            return f"{'; '.join(self.identity)}: it was copied or moved here"
        return self.signature

    @property
    def verified(self) -> bool:
        return self.refused is None

    @property
    def name(self) -> str | None:
        return self.manifest.name if self.manifest is not None else None


def read_manifest(store: SnapshotStore, snapshot_id: str, key: SigningKey | None) -> StoredManifest:
    """Read and judge one manifest (see the module docstring); never raises for a bad one.
    ``key`` None (gc, which needs only facts) leaves every manifest unverified."""
    try:
        manifest = Manifest.from_json(store.read_manifest_bytes(snapshot_id))
    except ManifestError as exc:  # unparsable, or larger than any manifest may be
        return StoredManifest(snapshot_id, None, unreadable=str(exc))
    identity = []
    if manifest.snapshot_id != snapshot_id:
        identity.append(f"manifest {snapshot_id} names itself {manifest.snapshot_id}")
    if manifest.workspace != store.workspace:
        identity.append(f"manifest belongs to workspace {manifest.workspace}, "
                        f"found in {store.workspace}")
    signature = "signature not checked (no key)" if key is None else None
    if key is not None:
        try:
            verify(manifest, key)
        except IntegrityError as exc:
            signature = str(exc)
    return StoredManifest(snapshot_id, manifest, identity=tuple(identity), signature=signature)


def load_manifest(store: SnapshotStore, snapshot_id: str, key: SigningKey) -> Manifest:
    """The manifest of a snapshot that is about to be used; raises unless it verifies."""
    stored = read_manifest(store, snapshot_id, key)
    if stored.manifest is None:
        raise ManifestError(stored.unreadable)
    if stored.identity or stored.signature is not None:
        raise SnapshotRefusedError(snapshot_id, snapshot_id, stored.refused or "")
    return stored.manifest


def scan_manifests(store: SnapshotStore, key: SigningKey | None, *, newest_first: bool = False,
                   ids: list[str] | None = None) -> Iterator[StoredManifest]:
    """Read every committed manifest (or those of ``ids``), lazily, oldest first unless
    ``newest_first``; manifests removed while scanning are left out."""
    listed = store.list_snapshot_ids() if ids is None else ids
    for snapshot_id in (reversed(listed) if newest_first else listed):
        try:
            yield read_manifest(store, snapshot_id, key)
        except NotFoundInStore:
            continue


def newest_verified(store: SnapshotStore, key: SigningKey) -> StoredManifest | None:
    """The newest snapshot whose signature verifies (what ``latest`` means), or None."""
    return next((m for m in scan_manifests(store, key, newest_first=True) if m.verified), None)
