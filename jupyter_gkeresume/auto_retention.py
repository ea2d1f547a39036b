"""Retention that runs by itself: after every pause and checkpoint the server runs.

``AutoRetention.schedule()`` (called by the orchestrator when a pause's task has ended) starts
one background task, never on the request path: under the orchestrator's lock and only while no
operation is in flight, it applies ``c.GkeResume.keep_last`` / ``keep_days`` (per notebook;
named snapshots, those the paused record names and refused ones are always kept: see
``snapshot.retention``), then, outside the lock, ``collect_garbage`` within its grace period
(blobs younger than ``grace_seconds`` stay). A failure is logged and kept in ``report``; it never
fails the pause. A schedule while a run is in flight runs once more after it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from logging import Logger
from typing import Any

from .printable import printable
from .snapshot import SigningKey, SnapshotStore
from .snapshot.gc import apply_retention, collect_garbage, retention_plan
from .snapshot.retention import RetentionPolicy
from .state import WorkspaceState


class AutoRetention:
    """The automatic retention of one server (inactive when ``policy`` is)."""

    def __init__(self, store: SnapshotStore, key: Callable[[], SigningKey], policy: RetentionPolicy,
                 *, grace_seconds: float, lock: asyncio.Lock, state: WorkspaceState, log: Logger):
        self.store = store
        self.key = key
        self.policy = policy
        self.grace_seconds = grace_seconds
        self.lock = lock
        self.state = state
        self.log = log
        self.report: dict[str, Any] | None = None  # the last run: deleted ids, bytes freed, error
        self._task: asyncio.Task | None = None
        self._again = False

    def schedule(self) -> None:
        if not self.policy.active:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            self._again = False
            await self._once()
            if not self._again:
                return

    async def _once(self) -> None:
        deleted: list[str] = []
        try:
            async with self.lock:
                if self.state.operation is not None:  # the next pause schedules it again
                    return
                deleted = await asyncio.to_thread(self._apply)
            gc = await asyncio.to_thread(collect_garbage, self.store,
                                         grace_seconds=self.grace_seconds)
            self.report = {"at": time.time(), "deleted": deleted,
                           "bytes_freed": gc.bytes_freed, "error": None,
                           "unreadable": gc.unreadable}
            self.log.info("gkeresume: retention deleted %d snapshot(s), gc freed %d bytes",
                          len(deleted), gc.bytes_freed)
            for snapshot_id, why in gc.unreadable.items():
                self.log.warning("gkeresume: gc skipped snapshot %s: %s", snapshot_id,
                                 printable(why))
        except Exception as exc:  # never fails the pause: said in the log and in status
            self.report = {"at": time.time(), "deleted": deleted, "bytes_freed": 0,
                           "error": f"{type(exc).__name__}: {exc}"}
            self.log.warning("gkeresume: automatic retention failed: %s", printable(exc))

    def _apply(self) -> list[str]:
        plan = retention_plan(self.store, self.policy, self.key())
        return apply_retention(self.store, plan, dry_run=False)
