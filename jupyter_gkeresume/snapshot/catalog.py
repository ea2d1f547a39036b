"""Finding, loading and listing committed snapshots, with their signatures checked.

``load_manifest`` is the only way restore code obtains a manifest: it parses strictly and verifies
the signature (unless the caller explicitly trusts that one snapshot). ``resolve`` turns what a
user typed (an id, a name, ``latest``) into an id, or raises ``SnapshotNotFoundError`` listing the
ids that exist.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..errors import GkeResumeError, ManifestError, SnapshotNotFoundError
from .compat import Verdict, check_compatible
from .cost import monthly_cost
from .format import SNAPSHOT_ID_RE, Manifest, validate_snapshot_name
from .signing import SigningKey, verify
from .store import SnapshotStore


def new_snapshot_id(now: datetime | None = None) -> str:
    """A fresh id; ids sort by creation time to the millisecond: the suffix is the millisecond
    in 3 hex digits, then 3 random ones (a clash is a clean CommitConflictError, never a loss)."""
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{now.microsecond // 1000:03x}{secrets.token_hex(2)[:3]}"


def load_manifest(
    store: SnapshotStore, snapshot_id: str, key: SigningKey, *, trust_unsigned: bool = False
) -> Manifest:
    """Read, parse and verify one manifest. ``trust_unsigned`` skips only the signature check."""
    manifest = Manifest.from_json(store.read_manifest_bytes(snapshot_id))
    if manifest.snapshot_id != snapshot_id or manifest.workspace != store.workspace:
        raise ManifestError(
            f"manifest {snapshot_id} names itself {manifest.snapshot_id} of workspace "
            f"{manifest.workspace}: it was copied or moved here"
        )
    if not trust_unsigned:
        verify(manifest, key)
    return manifest


def resolve(store: SnapshotStore, reference: str | None, key: SigningKey) -> str:
    """The snapshot id for ``reference``: an id, a name (newest with it), or ``latest``/None."""
    ids = store.list_snapshot_ids()
    ref = (reference or "latest").strip()
    if ref == "latest":
        if not ids:
            raise SnapshotNotFoundError("latest", [])
        return ids[-1]
    if SNAPSHOT_ID_RE.match(ref):
        if ref not in ids:
            raise SnapshotNotFoundError(ref, ids)
        return ref
    validate_snapshot_name(ref)
    for snapshot_id in reversed(ids):
        try:
            if load_manifest(store, snapshot_id, key).name == ref:
                return snapshot_id
        except GkeResumeError:
            continue
    raise SnapshotNotFoundError(ref, ids)


@dataclass
class SnapshotSummary:
    """One row of ``%snapshots`` / ``GET snapshots`` / ``jupyter gkeresume list``."""

    snapshot_id: str
    name: str | None = None
    created: str | None = None
    notebook: str | None = None
    bytes: int = 0
    objects: int = 0
    skipped: int = 0
    verdict: Verdict | None = None
    error: str | None = None
    saved: list[str] = field(default_factory=list)

    @property
    def monthly_cost_usd(self) -> float:
        """Estimated $/month to keep this snapshot were it stored alone (``cost``)."""
        return monthly_cost(self.bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.snapshot_id, "name": self.name, "created": self.created,
            "notebook": self.notebook, "bytes": self.bytes, "objects": self.objects,
            "skipped": self.skipped, "verdict": self.verdict.to_dict() if self.verdict else None,
            "error": self.error, "monthly_cost_usd": self.monthly_cost_usd,
            "saved": list(self.saved),
        }


def summarize(manifest: Manifest, here: dict[str, Any]) -> SnapshotSummary:
    saved = len(manifest.saved_names)
    return SnapshotSummary(
        manifest.snapshot_id, manifest.name, manifest.created, manifest.notebook,
        manifest.total_bytes, saved, len(manifest.objects) - saved,
        check_compatible(manifest, here), saved=manifest.saved_names,
    )


def list_snapshots(store: SnapshotStore, key: SigningKey, here: dict[str, Any]) -> list[SnapshotSummary]:
    """Every committed snapshot, newest first; unreadable or unsigned ones carry ``error``."""
    rows = []
    for snapshot_id in reversed(store.list_snapshot_ids()):
        try:
            rows.append(summarize(load_manifest(store, snapshot_id, key), here))
        except GkeResumeError as exc:
            rows.append(SnapshotSummary(snapshot_id, error=str(exc)))
    return rows
