"""Idle-policy advisor: replay a workspace's recorded events under candidate idle thresholds.

Events live in the store record ``records/events.json``::

    {"version": 1, "events": [
      {"at": 1764500000.0, "kind": "activity"},                      user ran or edited a cell
      {"at": 1764503600.0, "kind": "pause", "seconds": 41.5, "gpus": 1, "bytes": 5368709120},
      {"at": 1764510000.0, "kind": "resume", "seconds": 33.0, "bytes": 5368709120}
    ]}

``at`` is seconds since the epoch (when the event started); ``seconds`` the measured duration (a
pause: request -> record written; a resume: request -> ready); ``gpus`` the GPUs the pod held;
``bytes`` what the operation saved or restored (absent in older records: 0), from which
``rates.expected_seconds`` learns this store's rate. The server appends with ``record_events``
(activity at most once a minute is plenty); the record keeps the newest ``MAX_EVENTS``.

``advise(events, thresholds)`` treats activity and resume requests as what the user did, and asks
for each threshold T: a workspace idle for longer than T is paused at T (taking the measured median
pause time, GPU still held), the GPU is free until the user comes back, who then waits the median
resume time. It reports GPU-hours held and released, pauses, and total user wait; ``plot`` draws
that as a PNG (needs matplotlib).
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from .errors import InvalidInputError, ManifestError
from .snapshot.store import SnapshotStore

EVENT_KINDS = ("activity", "pause", "resume")
MAX_EVENTS = 50_000
DEFAULT_PAUSE_SECONDS = 60.0
DEFAULT_RESUME_SECONDS = 120.0
DEFAULT_THRESHOLDS_MINUTES = (5, 10, 15, 30, 60, 120)


@dataclass(frozen=True)
class Event:
    at: float
    kind: str
    seconds: float = 0.0
    gpus: int = 1
    bytes: int = 0


@dataclass
class PolicyOutcome:
    """One candidate threshold (``None``: never pause)."""

    threshold_minutes: float | None
    gpu_hours_held: float
    gpu_hours_released: float
    pauses: int
    user_wait_minutes: float


@dataclass
class Advice:
    pause_seconds: float
    resume_seconds: float
    measured: bool  # False: no pause/resume recorded yet, the defaults were assumed
    gpus: int
    hours_observed: float
    outcomes: list[PolicyOutcome] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def parse_events(raw: bytes | None) -> list[Event]:
    """The events of a record (oldest first); raises ``ManifestError`` naming what is wrong."""
    if raw is None:
        return []
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ManifestError("the events record is not valid JSON") from None
    items = data.get("events") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ManifestError("the events record has no 'events' list")
    events = []
    for i, item in enumerate(items):
        if not (isinstance(item, dict) and item.get("kind") in EVENT_KINDS
                and _number(item.get("at")) and _number(item.get("seconds", 0))
                and isinstance(item.get("gpus", 1), int) and item.get("gpus", 1) >= 1
                and isinstance(item.get("bytes", 0), int) and _number(item.get("bytes", 0))):
            raise ManifestError(f"the events record: event #{i} is malformed")
        events.append(Event(float(item["at"]), item["kind"], float(item.get("seconds", 0)),
                            item.get("gpus", 1), item.get("bytes", 0)))
    return sorted(events, key=lambda e: e.at)


def read_events(store: SnapshotStore) -> list[Event]:
    return parse_events(store.read_record("events"))


def record_events(store: SnapshotStore, new: Iterable[Event]) -> None:
    """Append events to the record (read, append, write: one server per workspace writes it)."""
    events = read_events(store) + list(new)
    for e in events:
        if e.kind not in EVENT_KINDS:
            raise InvalidInputError(f"unknown event kind {e.kind!r} (one of {EVENT_KINDS})")
    events = sorted(events, key=lambda e: e.at)[-MAX_EVENTS:]
    body = {"version": 1, "events": [_event_dict(e) for e in events]}
    store.write_record("events", json.dumps(body, separators=(",", ":")).encode())


def advise(
    events: Sequence[Event],
    thresholds_minutes: Iterable[float] = DEFAULT_THRESHOLDS_MINUTES,
    *,
    gpus: int | None = None,
) -> Advice:
    """Simulate each threshold over ``events`` (see the module docstring); the first outcome is
    the "never pause" baseline."""
    if not events:
        raise InvalidInputError("no events recorded for this workspace yet: nothing to advise on")
    pauses = [e.seconds for e in events if e.kind == "pause" and e.seconds > 0]
    resumes = [e.seconds for e in events if e.kind == "resume" and e.seconds > 0]
    advice = Advice(
        pause_seconds=statistics.median(pauses) if pauses else DEFAULT_PAUSE_SECONDS,
        resume_seconds=statistics.median(resumes) if resumes else DEFAULT_RESUME_SECONDS,
        measured=bool(pauses and resumes),
        gpus=gpus or max((e.gpus for e in events if e.kind == "pause"), default=1),
        hours_observed=(events[-1].at - events[0].at) / 3600,
    )
    user = [e.at for e in events if e.kind in ("activity", "resume")] or [events[0].at]
    advice.outcomes.append(_simulate(advice, user, events[0].at, events[-1].at, None))
    for minutes in sorted(set(thresholds_minutes)):
        if not minutes > 0:
            raise InvalidInputError(f"idle thresholds must be positive minutes, not {minutes!r}")
        advice.outcomes.append(_simulate(advice, user, events[0].at, events[-1].at, minutes))
    return advice


def _simulate(advice: Advice, user: list[float], start: float, end: float,
              minutes: float | None) -> PolicyOutcome:
    released = wait = 0.0
    pauses = 0
    if minutes is not None:
        idle, pause = minutes * 60, advice.pause_seconds
        gaps = [(b - a, True) for a, b in itertools.pairwise(user)] + [(end - user[-1], False)]
        for gap, came_back in gaps:
            if gap <= idle:
                continue
            pauses += 1
            released += max(0.0, gap - idle - pause)
            if came_back:  # the user waits for the resume, and for a pause still running
                wait += advice.resume_seconds + max(0.0, idle + pause - gap)
    span = end - start
    return PolicyOutcome(
        threshold_minutes=minutes,
        gpu_hours_held=round((span - released) * advice.gpus / 3600, 3),
        gpu_hours_released=round(released * advice.gpus / 3600, 3),
        pauses=pauses,
        user_wait_minutes=round(wait / 60, 2),
    )


def plot(advice: Advice, path: str) -> None:
    """Write a PNG: GPU-hours held/released (bars) and user wait (line) per threshold."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise InvalidInputError("the plot needs matplotlib: pip install matplotlib") from None
    rows = advice.outcomes
    labels = ["never" if r.threshold_minutes is None else f"{r.threshold_minutes:g} min"
              for r in rows]
    x = range(len(rows))
    fig = Figure(figsize=(8, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.bar([i - 0.2 for i in x], [r.gpu_hours_held for r in rows], 0.4, label="GPU-hours held")
    ax.bar([i + 0.2 for i in x], [r.gpu_hours_released for r in rows], 0.4,
           label="GPU-hours released")
    ax.set_xticks(list(x), labels)
    ax.set_xlabel("idle threshold")
    ax.set_ylabel("GPU-hours")
    wait_axis = ax.twinx()
    wait_axis.plot(list(x), [r.user_wait_minutes for r in rows], "o-", color="black",
                   label="user wait (min)")
    wait_axis.set_ylabel("total user wait (minutes)")
    source = "measured" if advice.measured else "assumed"
    ax.set_title(f"{advice.hours_observed:.1f} h observed, pause {advice.pause_seconds:.0f} s / "
                 f"resume {advice.resume_seconds:.0f} s ({source})")
    handles = ax.get_legend_handles_labels()
    extra = wait_axis.get_legend_handles_labels()
    ax.legend(handles[0] + extra[0], handles[1] + extra[1], loc="upper right")
    fig.tight_layout()
    fig.savefig(path, format="png")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def _event_dict(e: Event) -> dict[str, object]:
    out: dict[str, object] = {"at": e.at, "kind": e.kind}
    if e.seconds:
        out["seconds"] = e.seconds
    if e.gpus != 1:
        out["gpus"] = e.gpus
    if e.bytes:
        out["bytes"] = e.bytes
    return out
