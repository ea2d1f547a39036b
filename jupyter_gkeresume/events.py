"""The server's side of the idle-policy advisor: it records what happened in the store's events
record (format and replay in ``advisor.py``).

- ``EventLog.record`` appends events, one write at a time (``advisor.record_events`` reads,
  appends and writes the whole record). It never raises: a store that cannot be written is
  logged and the pause or resume goes on.
- ``ActivitySampler`` records user activity at most once per ``ACTIVITY_INTERVAL``: jupyter_server's
  ``last_activity()`` when it moved since the last record. The kernel traffic of our own pauses
  and resumes also moves it, so activity while an operation is in flight, or before the
  workspace state's ``own_activity_until``, is not the user's and is skipped.

Call order: the orchestrator owns an ``EventLog``; the extension starts an ``ActivitySampler``
(on the orchestrator's ``WorkspaceState`` and ``EventLog``) once the event loop runs and stops it
on shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from logging import Logger
from typing import TYPE_CHECKING

from tornado.ioloop import PeriodicCallback

from .advisor import Event, record_events
from .snapshot.store import SnapshotStore

if TYPE_CHECKING:
    from .state import WorkspaceState

ACTIVITY_INTERVAL = 60.0  # seconds: the advisor's thresholds are minutes


class EventLog:
    """Appends advisor events to one workspace's events record."""

    def __init__(self, store: SnapshotStore, log: Logger):
        self.store = store
        self.log = log
        self._lock = asyncio.Lock()

    async def record(self, *events: Event) -> bool:
        """Append ``events``; False (and a warning logged) when the record could not be written."""
        async with self._lock:
            try:
                await asyncio.to_thread(record_events, self.store, events)
            except Exception as exc:  # the advisor's data must never fail a pause or resume
                kinds = ", ".join(e.kind for e in events)
                self.log.warning("gkeresume: could not record the %s event(s): %s", kinds, exc)
                return False
        return True


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
