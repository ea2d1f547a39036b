"""The server's side of the idle-policy advisor: it records what happened in the store's events
record (format and replay in ``advisor.py``).

- ``EventLog.record`` appends events, one write at a time (``advisor.record_events`` reads,
  appends and writes the whole record). It never raises: a store that cannot be written is
  logged and the pause or resume goes on.
- ``ActivitySampler`` records user activity at most once per ``ACTIVITY_INTERVAL``: jupyter_server's
  ``last_activity()`` when it moved since the last record. The kernel traffic of our own pauses
  and resumes also moves it, so activity while an operation is in flight, or before the
  workspace state's ``own_activity_until``, is not the user's and is skipped.

``EventLog.estimate`` is how long the next pause or resume should take (``rates.expected_seconds``
over this workspace's recorded ones); a first resume learns from the pauses, which moved the same
bytes through the same store.

Call order: the orchestrator owns an ``EventLog``; the extension starts an ``ActivitySampler``
(on the orchestrator's ``WorkspaceState`` and ``EventLog``) once the event loop runs and stops it
on shutdown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from logging import Logger
from typing import TYPE_CHECKING

from tornado.ioloop import PeriodicCallback

from .advisor import Event, read_events, record_events
from .printable import printable
from .rates import expected_seconds
from .snapshot.store import SnapshotStore

if TYPE_CHECKING:
    from .state import WorkspaceState

ACTIVITY_INTERVAL = 60.0  # seconds: the advisor's thresholds are minutes
ESTIMATE_RETRY_SECONDS = 60.0  # an unreadable events record is read again after this


class EventLog:
    """Appends advisor events to one workspace's events record."""

    def __init__(self, store: SnapshotStore, log: Logger):
        self.store = store
        self.log = log
        self._lock = asyncio.Lock()
        self._samples: dict[str, list[tuple[int, float]]] | None = None  # kind -> (bytes, s)
        self._retry_at = 0.0  # after a failed read, not before this (monotonic)

    async def record(self, *events: Event) -> bool:
        """Append ``events``; False (and a warning logged) when the record could not be written."""
        async with self._lock:
            try:
                await asyncio.to_thread(record_events, self.store, events)
            except Exception as exc:  # the advisor's data must never fail a pause or resume
                kinds = ", ".join(e.kind for e in events)
                self.log.warning("gkeresume: could not record the %s event(s): %s", kinds, exc)
                return False
            if self._samples is not None:
                _add_samples(self._samples, events)
        return True

    async def estimate(self, kind: str, nbytes: int = 0) -> float | None:
        """The expected duration of a ``pause`` or ``resume`` of ``nbytes`` (0: not known) from
        this workspace's recorded ones (``rates.expected_seconds``); a resume with none recorded
        yet learns from the pauses. ``None`` before the first, or when the record cannot be
        read. The record is read once; later events are added as they are recorded."""
        async with self._lock:
            if self._samples is None:
                if time.monotonic() < self._retry_at:
                    return None
                try:
                    events = await asyncio.to_thread(read_events, self.store)
                except Exception as exc:  # an estimate is a nicety: never an error
                    self.log.warning("gkeresume: could not read the events record: %s",
                                     printable(exc))
                    self._retry_at = time.monotonic() + ESTIMATE_RETRY_SECONDS  # status polls
                    return None
                self._samples = {}
                _add_samples(self._samples, events)
        samples = self._samples.get(kind) or (self._samples.get("pause", []) if kind == "resume"
                                              else [])
        return expected_seconds(samples, nbytes)


def _add_samples(samples: dict[str, list[tuple[int, float]]], events: Iterable[Event]) -> None:
    for event in events:
        if event.kind in ("pause", "resume") and event.seconds > 0:
            samples.setdefault(event.kind, []).append((event.bytes, event.seconds))


class ActivitySampler:
    """Periodically records jupyter_server's last activity of a workspace into ``events``."""

    def __init__(self, state: WorkspaceState, events: EventLog,
                 last_activity: Callable[[], datetime]):
        self.state = state
        self.events = events
        self.last_activity = last_activity
        self.recorded = 0.0  # the ``at`` of the last activity event written
        self._callback: PeriodicCallback | None = None

    def start(self) -> None:
        self._callback = PeriodicCallback(self.sample, ACTIVITY_INTERVAL * 1000)
        self._callback.start()

    def stop(self) -> None:
        if self._callback:
            self._callback.stop()

    async def sample(self) -> bool:
        """Record the last activity if it is the user's and new; True when one was written."""
        if self.state.operation is not None:
            return False
        at = self.last_activity().timestamp()
        if at <= max(self.recorded, self.state.own_activity_until):
            return False
        if not await self.events.record(Event(at, "activity")):
            return False  # tried again at the next tick
        self.recorded = at
        return True
