"""Idle pause: after ``idle_timeout`` seconds without activity, pause with release.

Activity is jupyter_server's own ``last_activity()`` (API requests, kernel messages, terminals);
the status endpoint that the lab polls does not count. A check runs every
``min(60, idle_timeout / 4)`` seconds and starts a pause (reason ``idle``) when the workspace is
``running`` or ``ready``, no operation is in flight, at least one kernel runs, and no kernel is
busy (unless ``idle_pause_busy``: then the checkpoint queues behind the running cell).
Our timeout must be shorter than any culler's (jupyter_server ``cull_idle_timeout``, the
JupyterHub idle culler, Kubeflow's culler): see docs/server.md.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from logging import Logger

from tornado.ioloop import PeriodicCallback

from .errors import GkeResumeError
from .states import State

IDLE_STATES = (State.RUNNING, State.READY)


class IdleWatcher:
    """Periodic idle check for one orchestrator; ``start`` once the event loop runs."""

    def __init__(self, orchestrator, last_activity: Callable[[], datetime], *, timeout: float,
                 pause_busy: bool, log: Logger):
        self.orchestrator = orchestrator
        self.last_activity = last_activity
        self.timeout = timeout
        self.pause_busy = pause_busy
        self.log = log
        self._callback: PeriodicCallback | None = None

    def start(self) -> None:
        interval = min(60.0, self.timeout / 4)
        self._callback = PeriodicCallback(self.check, interval * 1000)
        self._callback.start()

    def stop(self) -> None:
        if self._callback:
            self._callback.stop()

    def idle_seconds(self) -> float:
        return (datetime.now(timezone.utc) - self.last_activity()).total_seconds()

    async def check(self) -> bool:
        """Start an idle pause if due; True when one was started."""
        orch = self.orchestrator
        if orch.state.operation or orch.state.state not in IDLE_STATES:
            return False
        kids = orch.gateway.live_ids()
        if not kids or self.idle_seconds() < self.timeout:
            return False
        if orch.gateway.busy(kids) and not self.pause_busy:
            return False
        self.log.info("gkeresume: idle for %.0f s: pausing", self.idle_seconds())
        try:
            await orch.start_pause(reason="idle",
                                   when_busy="queue" if self.pause_busy else "refuse")
        except GkeResumeError as exc:
            self.log.warning("gkeresume: idle pause not started: %s", exc)
            return False
        return True
