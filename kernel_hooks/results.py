"""Result objects of the kernel_hooks API: what the magics print and what the server receives.

Each has ``to_dict()`` (plain JSON data) so the server can carry it over the wire unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Skipped:
    """An object that was not captured or not restored, and why. ``inside``: a part of the
    saved object ``name`` (of kind ``type``) that comes back as a placeholder; ``name`` is the
    user's name for what holds it."""

    name: str
    type: str
    reason: str
    inside: bool = False


@dataclass
class CheckpointResult:
    snapshot_id: str
    name: str | None
    bytes_total: int
    bytes_new: int
    bytes_reused: int
    seconds: float
    saved: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    hash_seed: str | None = None  # the kernel's PYTHONHASHSEED, as its manifest says
    modules: list[str] = field(default_factory=list)
    """The names in ``saved`` bound to modules: imported again on resume, not the user's data
    (what the reports list apart)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ResumeResult:
    """``state``: the interpreter-state entries restored (the others are in ``warnings``)."""

    snapshot_id: str
    restored: list[str] = field(default_factory=list)
    not_restored: list[Skipped] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    verdict: dict[str, Any] = field(default_factory=dict)
    bytes_read: int = 0
    seconds: float = 0.0
    packages: list[str] = field(default_factory=list)  # one line per package put back (or not)
    paths: list[str] = field(default_factory=list)  # one line per extra path put back (or not)
    state: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)  # the names in ``restored`` bound to modules

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ReplayResult:
    """What ``api.replay`` re-ran (execution counts), which names came back, which could not be
    planned (name -> why), and the cell failure that stopped it, if any."""

    cells: list[int] = field(default_factory=list)
    back: list[str] = field(default_factory=list)
    unresolved: dict[str, str] = field(default_factory=dict)
    failed: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Progress:
    """One progress report: ``phase`` is one of hashing, writing, committing, verifying,
    installing, reading, restoring, done."""

    phase: str
    done_bytes: int
    total_bytes: int
    seconds: float

    @property
    def rate(self) -> float:
        """Bytes per second so far."""
        return self.done_bytes / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate": self.rate}
