"""Finding and listing committed snapshots (manifests are read by ``manifests``).

``resolve`` turns what a user typed (an id, a name, ``latest``) into an id. Only snapshots whose
signature verifies count for ``latest`` and for names: a planted or foreign manifest never
becomes the default. A name that only refused snapshots carry (or ``latest`` when no snapshot
verifies) raises ``SnapshotRefusedError`` (it exists, and why it was refused); nothing by that
reference raises ``SnapshotNotFoundError`` listing the ids that exist. An explicit id is returned
as is: the caller then loads it, which refuses it with the reason unless it verifies (with an
earlier key of the workspace, when the user names one).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..errors import SnapshotNotFoundError, SnapshotRefusedError
from .compat import (
    Verdict,
    check_compatible,
    modules_to_check,
    package_problem,
    packages_to_install,
)
from .cost import monthly_cost
from .format import SNAPSHOT_ID_RE, Manifest, validate_snapshot_name
from .importable import ModuleLookup
from .manifests import newest_verified, scan_manifests
from .signing import SigningKey
from .store import SnapshotStore


def new_snapshot_id(now: datetime | None = None) -> str:
    """A fresh id; ids sort by creation time to the millisecond: the suffix is the millisecond
    in 3 hex digits, then 3 random ones (a clash is a clean CommitConflictError, never a loss)."""
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{now.microsecond // 1000:03x}{secrets.token_hex(2)[:3]}"


def resolve(store: SnapshotStore, reference: str | None, key: SigningKey) -> str:
    """The snapshot id for ``reference``: an id, a name (newest verified one with it), or
    ``latest``/None (the newest verified snapshot)."""
    ref = (reference or "latest").strip()
    if ref == "latest":
        newest = newest_verified(store, key)
        if newest is not None:
            return newest.snapshot_id
        refused = next(scan_manifests(store, key, newest_first=True), None)
        if refused is not None:
            raise SnapshotRefusedError("latest", refused.snapshot_id, refused.refused or "")
        raise SnapshotNotFoundError("latest", store.list_snapshot_ids())
    if SNAPSHOT_ID_RE.match(ref):
        ids = store.list_snapshot_ids()
        if ref not in ids:
            raise SnapshotNotFoundError(ref, ids)
        return ref
    validate_snapshot_name(ref)
    refused = None
    for stored in scan_manifests(store, key, newest_first=True):
        if stored.name != ref:
            continue
        if stored.verified:
            return stored.snapshot_id
        refused = refused or stored
    if refused is not None:
        raise SnapshotRefusedError(ref, refused.snapshot_id, refused.refused or "")
    raise SnapshotNotFoundError(ref, store.list_snapshot_ids())


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
    reason: str | None = None
    packages: list[str] = field(default_factory=list)  # "name version" a resume here installs

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
            "saved": list(self.saved), "reason": self.reason, "packages": list(self.packages),
        }


def summarize(manifest: Manifest, here: dict[str, Any],
              modules: ModuleLookup | None = None) -> SnapshotSummary:
    saved = len(manifest.saved_names)
    return SnapshotSummary(
        manifest.snapshot_id, manifest.name, manifest.created, manifest.notebook,
        manifest.total_bytes, saved, len(manifest.objects) - saved,
        check_compatible(manifest, here, modules), saved=manifest.saved_names, reason=manifest.reason,
        packages=[f"{p.name} {p.version}" for p in packages_to_install(manifest.packages)
                  if package_problem(p) is None],
    )


def list_snapshots(store: SnapshotStore, key: SigningKey, here: dict[str, Any]) -> list[SnapshotSummary]:
    """Every committed snapshot, newest first; refused or unreadable ones carry ``error`` (the
    reason) and nothing else: what an unverified manifest claims is not shown as fact."""
    scanned = list(scan_manifests(store, key, newest_first=True))
    modules = ModuleLookup()
    modules.prefetch(name for stored in scanned if stored.verified and stored.manifest
                     for name in modules_to_check(stored.manifest))
    rows = []
    for stored in scanned:
        if stored.verified and stored.manifest is not None:
            rows.append(summarize(stored.manifest, here, modules))
        else:
            rows.append(SnapshotSummary(stored.snapshot_id, error=stored.refused))
    return rows
