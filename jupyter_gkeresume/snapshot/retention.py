"""Retention policies as pure functions: which committed snapshots to keep, and why.

Nothing here touches a store. Callers read manifests and the paused record, call ``plan``, and
delete what ``RetentionPlan.delete`` lists (``gc.apply_retention`` does exactly that, then
``gc.collect_garbage`` frees the blobs no remaining manifest references).

Rules (a snapshot is kept when any rule keeps it; with no rule set nothing is deleted):

- ``keep_last=N``: the N newest verified snapshots of each notebook (N >= 1: a policy never
  deletes a notebook's newest one; snapshots of no notebook count as one group);
- ``keep_days=D``: snapshots created less than D days before ``now``;
- named snapshots (``%checkpoint -n NAME``) are always kept: a name says "I want this one";
- snapshots named by the paused record (``records/paused.json``, ``kernels[].snapshot_id`` as
  docs/api.md defines it: what a paused workspace will resume from) are always kept;
- a refused snapshot (unsigned, another key, tampered, unreadable: see ``manifests``) is kept,
  and does not count for ``keep_last``: a policy never deletes what it cannot trust, and a
  planted manifest cannot push real snapshots out. Only naming it (``rm ID``) removes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from ..errors import InvalidInputError


@dataclass(frozen=True)
class RetentionPolicy:
    """``None`` disables a rule; both ``None`` keeps everything."""

    keep_last: int | None = None
    keep_days: float | None = None

    def __post_init__(self) -> None:
        if self.keep_last is not None and (isinstance(self.keep_last, bool) or self.keep_last < 1):
            raise InvalidInputError(f"keep_last must be at least 1, not {self.keep_last!r}")
        if self.keep_days is not None and not self.keep_days >= 0:
            raise InvalidInputError(f"keep_days must be 0 or more, not {self.keep_days!r}")

    @property
    def active(self) -> bool:
        return self.keep_last is not None or self.keep_days is not None


@dataclass(frozen=True)
class SnapshotFacts:
    """What retention needs to know about one snapshot (its id also tells when it was made)."""

    snapshot_id: str
    name: str | None = None
    refused: str | None = None  # why it does not verify; None: it does
    notebook: str | None = None  # keep_last counts per notebook

    @property
    def created(self) -> datetime:
        return created_at(self.snapshot_id)


@dataclass
class RetentionPlan:
    """``keep`` maps each kept id to its reasons; ``delete`` lists the rest, oldest first."""

    keep: dict[str, list[str]] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"keep": self.keep, "delete": self.delete}


def plan(
    snapshots: list[SnapshotFacts],
    policy: RetentionPolicy,
    *,
    now: datetime,
    protected: frozenset[str] | set[str] = frozenset(),
) -> RetentionPlan:
    """Decide for every snapshot; ``protected`` are the paused record's ids, ``now`` is aware."""
    result = RetentionPlan()
    newest_first = sorted(snapshots, key=lambda s: s.snapshot_id, reverse=True)
    cutoff = now - timedelta(days=policy.keep_days) if policy.keep_days is not None else None
    seen: dict[str | None, int] = {}
    ranks = {}
    for s in newest_first:
        if s.refused is None:
            ranks[s.snapshot_id] = seen[s.notebook] = seen.get(s.notebook, -1) + 1
    for snap in newest_first:
        rank = ranks.get(snap.snapshot_id, len(newest_first))
        reasons = []
        if not policy.active:
            reasons.append("no retention rule set")
        if policy.keep_last is not None and rank < policy.keep_last:
            reasons.append(f"one of the last {policy.keep_last}")
        if cutoff is not None and snap.created > cutoff:
            reasons.append(f"newer than {policy.keep_days:g} days")
        if snap.name:
            reasons.append(f"named {snap.name!r}")
        if snap.snapshot_id in protected:
            reasons.append("in the paused record")
        if snap.refused is not None:
            reasons.append(f"refused ({snap.refused}): never deleted by a policy")
        if reasons:
            result.keep[snap.snapshot_id] = reasons
        else:
            result.delete.append(snap.snapshot_id)
    result.delete.reverse()
    return result


def created_at(snapshot_id: str) -> datetime:
    """When a snapshot was made, from its id (``20261130T101500Z-a1b2c3``), in UTC.

    An id shaped right but not a real date (never made by this package) reads as the far future,
    so a ``keep_days`` rule keeps it rather than guessing.
    """
    try:
        moment = datetime.strptime(snapshot_id[:16], "%Y%m%dT%H%M%SZ")
    except ValueError:
        moment = datetime.max
    return moment.replace(tzinfo=timezone.utc)
