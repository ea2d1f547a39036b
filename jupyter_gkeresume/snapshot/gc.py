"""Deleting snapshots by a retention plan, and freeing blobs that no manifest references.

Call order: ``retention_plan`` then ``apply_retention`` (optional: deletes the manifests a
``RetentionPlan`` drops; only verified snapshots count, refused ones are never planned for
deletion), then ``collect_garbage`` (mark and sweep, then finished lease chains). Both take
``dry_run``: then nothing is deleted and the report says what would go and how many bytes that
frees.

Mark and sweep, in this order, so that a checkpoint running at the same time never loses a blob:

1. list the blobs (with sizes and modification times);
2. mark every blob named by any committed manifest (signed or not: gc protects more, never less);
   a manifest that cannot be parsed (corrupt, cut short, planted) is reported (``unreadable``)
   and skipped, and every blob it might name stays: each digest spelled anywhere in its first
   ``MAX_MANIFEST_BYTES`` (no manifest this product writes is longer) is marked, so one bad
   manifest neither stops the collection of the rest nor costs its own blobs;
3. candidates: unmarked blobs older than ``grace_seconds``. A checkpoint in flight writes its
   blobs before its manifest, so its new blobs are younger than the grace period;
4. list the manifests again and mark those committed meanwhile (a checkpoint that reused an old
   blob and committed during steps 1-3 keeps it);
5. list the blobs again and drop candidates whose modification time moved into the grace period
   (a writer that reuses an existing blob refreshes it first, see docs/lifecycle.md);
6. delete the candidates, then the temporary files of writers that died mid-write
   (``*.tmp-*``) once they are older than the grace period;
7. delete the records of lease chains nobody holds, last written before the grace period
   (``lease.finished_chains``).

The grace period must exceed the longest checkpoint. What remains racy is a writer that decides to
reuse a blob during step 6 without refreshing it: the documented writer contract closes that.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ..paused_record import PausedRecords
from .digests import ALGORITHMS
from .lease import finished_chains
from .manifests import scan_manifests
from .retention import RetentionPlan, RetentionPolicy, SnapshotFacts, plan
from .signing import SigningKey
from .store import BlobInfo, SnapshotStore

DEFAULT_GRACE_SECONDS = 6 * 3600

#: ``progress(phase, done, total)``; phases: listing, marking, sweeping.
GcProgress = Callable[[str, int, int], None]


@dataclass
class GcReport:
    """What gc deleted (or, in a dry run, would delete) and what it left alone."""

    dry_run: bool
    snapshots_deleted: list[str] = field(default_factory=list)
    blobs_total: int = 0
    blobs_referenced: int = 0
    swept: dict[str, int] = field(default_factory=dict)
    young: dict[str, int] = field(default_factory=dict)
    partial_writes: dict[str, int] = field(default_factory=dict)
    leases: list[str] = field(default_factory=list)  # keys of the lease chains removed
    unreadable: dict[str, str] = field(default_factory=dict)  # skipped manifests: id -> why

    @property
    def bytes_freed(self) -> int:
        return sum(self.swept.values()) + sum(self.partial_writes.values())

    def to_dict(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run, "snapshots_deleted": self.snapshots_deleted,
            "blobs_total": self.blobs_total, "blobs_referenced": self.blobs_referenced,
            "swept": self.swept, "young": self.young, "partial_writes": self.partial_writes,
            "leases": self.leases, "unreadable": self.unreadable,
            "bytes_freed": self.bytes_freed,
        }


def retention_plan(
    store: SnapshotStore, policy: RetentionPolicy, key: SigningKey, *, now: datetime | None = None
) -> RetentionPlan:
    """The plan for this store's snapshots and paused record (reads only); snapshots that do not
    verify with ``key`` are kept and do not count (see ``retention``), and a paused record that
    does not verify protects nothing."""
    facts = [SnapshotFacts(m.snapshot_id, m.name if m.verified else None, m.refused,
                           m.manifest.notebook if m.verified and m.manifest else None)
             for m in scan_manifests(store, key)]
    protected = PausedRecords(store, lambda: key).protected_ids()
    return plan(facts, policy, now=now or datetime.now(timezone.utc), protected=protected)


def apply_retention(store: SnapshotStore, retention: RetentionPlan, *, dry_run: bool) -> list[str]:
    """Delete the manifests ``retention`` drops (none in a dry run); returns their ids."""
    if not dry_run:
        for snapshot_id in retention.delete:
            store.delete_manifest(snapshot_id)  # one removed meanwhile: the plan is fulfilled
    return list(retention.delete)


def collect_garbage(
    store: SnapshotStore,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    dry_run: bool = False,
    ignore: frozenset[str] | set[str] = frozenset(),
    now: float | None = None,
    progress: GcProgress | None = None,
) -> GcReport:
    """Mark and sweep (see the module docstring). ``ignore``: manifest ids to treat as deleted
    (a dry run of ``apply_retention`` passes the ids it would delete)."""
    report = GcReport(dry_run=dry_run)
    notify = progress or (lambda phase, done, total: None)
    notify("listing", 0, 0)
    blobs = store.list_blobs()
    report.blobs_total = len(blobs)
    marked_ids = [i for i in store.list_snapshot_ids() if i not in ignore]
    referenced = _mark(store, marked_ids, notify, report)
    report.blobs_referenced = len({b.digest for b in blobs} & referenced)
    clock = time.time() if now is None else now
    candidates = {}
    for blob in blobs:
        if blob.digest in referenced:
            continue
        if _young(blob, clock, grace_seconds):
            report.young[blob.digest] = blob.size
        else:
            candidates[blob.digest] = blob.size
    seen = set(marked_ids) | set(ignore)
    late_ids = [i for i in store.list_snapshot_ids() if i not in seen]
    for digest in _mark(store, late_ids, notify, report) & candidates.keys():
        del candidates[digest]
    if candidates:
        for blob in store.list_blobs():
            if blob.digest in candidates and _young(blob, clock, grace_seconds):
                report.young[blob.digest] = candidates.pop(blob.digest)
    for done, (digest, size) in enumerate(sorted(candidates.items()), 1):
        if not dry_run:
            store.delete_blob(digest)
        report.swept[digest] = size
        notify("sweeping", done, len(candidates))
    for path, size, mtime in store.list_partial_writes():
        if mtime is not None and clock - mtime >= grace_seconds:
            if not dry_run:
                store.delete_partial_write(path)
            report.partial_writes[path] = size
    for lease_key, names in finished_chains(store, now=clock, grace_seconds=grace_seconds).items():
        if not dry_run:
            for name in names:  # oldest first: see ``lease``
                store.delete_record(name)
        report.leases.append(lease_key)
    return report


def _mark(store: SnapshotStore, snapshot_ids: list[str], notify: GcProgress,
          report: GcReport) -> set[str]:
    """Blobs named by these manifests, signed or not (gc protects more, never less); for one
    that cannot be parsed, every digest its bytes spell (it goes into ``report.unreadable``)."""
    referenced: set[str] = set()
    for done, stored in enumerate(scan_manifests(store, None, ids=snapshot_ids), 1):
        if stored.manifest is None:
            report.unreadable[stored.snapshot_id] = (
                f"{stored.unreadable}; skipped, the blobs it may name are kept: remove it with "
                f"`jupyter gkeresume rm {stored.snapshot_id}` or restore it")
            referenced |= digests_spelled(store.read_manifest_head(stored.snapshot_id))
        else:
            referenced.update(stored.manifest.blobs)
        notify("marking", done, len(snapshot_ids))
    return referenced


_HEX64 = re.compile(rb"[0-9a-f]{64}")


def digests_spelled(raw: bytes) -> set[str]:
    """Every digest, of any algorithm, whose hex digits appear in ``raw`` (on the safe side:
    also where only the digits are there, without the algorithm's prefix)."""
    runs = {m.group().decode() for m in _HEX64.finditer(raw.lower())}
    return {a.prefix + run for run in runs for a in ALGORITHMS}


def _young(blob: BlobInfo, now: float, grace_seconds: float) -> bool:
    """Within the grace period, or of unknown age (then never deleted)."""
    return blob.mtime is None or now - blob.mtime < grace_seconds
