"""Idle pause: after ``idle_timeout`` seconds in which no person did anything, pause with release.

What counts (``ACTIVITY_KINDS``, which ``jupyter gkeresume doctor`` reports) is what a person
does, recorded by ``UserActivity``: a kernel started (a notebook opened), a cell executed in
any kernel (from its ``execute_input`` on IOPub to its end, its output included:
``cell_watch.RunningCells``), traffic on a terminal (jupyter_server_terminals'
``terminal_last_activity``: what is typed and what it prints), and a file or notebook created,
saved, uploaded, renamed, copied or deleted (jupyter_server's contents events; a read is not),
and a person's input in a lab tab (keys, pointer, scrolling: the lab's ``activity.ts`` reports
it, ``POST /gkeresume/api/activity``, at most every ``report_every`` seconds).
Never: requests of any client (jupyter_server moves its own ``last_activity()`` on every
authenticated API request, and an open JupyterLab tab polls kernels, sessions, contents and
terminals every few seconds; Kubeflow's culler GETs ``/api/kernels`` every minute), nor our own
kernel calls (silent executes publish no ``execute_input``; the end of our own operations
restarts the clock, ``own_activity_until``).

A check runs every ``min(60, idle_timeout / 4)`` seconds and starts a pause (reason ``idle``)
when the workspace is ``running`` or ``ready``, no operation is in flight, and no kernel is busy
(unless ``idle_pause_busy``: then the checkpoint queues behind the running cell). With no kernel
at all (a tab open, nothing running; or ``paused``, a fresh pod nobody resumed) there is nothing
to checkpoint: the pod is released as it is (``Orchestrator.release_without_kernels``; not with
the ``none`` backend, which frees nothing then). Our timeout must be shorter than any culler's (jupyter_server
``cull_idle_timeout``, the JupyterHub idle culler, Kubeflow's culler): see docs/server.md.

Call order: the orchestrator builds a ``UserActivity``, passes ``touch("cell")`` to its cell
watch and touches ``"kernel"`` as each kernel starts; the extension calls ``watch_server`` with
the server, and starts an ``IdleWatcher`` on ``UserActivity.last`` once the event loop runs.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from logging import Logger
from typing import Any

from tornado.ioloop import PeriodicCallback

from .errors import GkeResumeError
from .states import State

IDLE_STATES = (State.RUNNING, State.READY)
RELEASE_STATES = (*IDLE_STATES, State.PAUSED)
"""Where a workspace without kernels is released once idle: also ``paused`` (a fresh pod whose
paused record nobody resumed: the record stays in the store for the next one)."""
ACTIVITY_KINDS = ("kernel", "cell", "terminal", "document", "input")
"""What a person does that keeps a workspace from its idle pause (see above); nothing else."""


def input_report_every(timeout: float) -> float:
    """How often a lab reports a person's steady input (seconds): often enough that it never
    leaves a gap of an idle ``timeout`` (a third of it), at most once a minute (also with no
    idle pause: ``timeout`` 0)."""
    return min(60.0, timeout / 3) if timeout > 0 else 60.0


class UserActivity:
    """When a person last did something in this server, by kind (``ACTIVITY_KINDS``)."""

    def __init__(self) -> None:
        self._started = datetime.now(timezone.utc)  # the clock starts with the server
        self._seen: dict[str, datetime] = {}
        self._terminals: Callable[[], datetime | None] = lambda: None

    def touch(self, kind: str) -> None:
        """A person's ``kind`` of activity (``"kernel"``, ``"cell"``, ``"document"``,
        ``"input"``) happened now."""
        self._seen[kind] = datetime.now(timezone.utc)

    def watch_server(self, serverapp: Any) -> None:
        """Follow the server's documents (a listener on its contents events) and terminals
        (the time jupyter_server_terminals records of each terminal message, either way)."""
        contents = serverapp.contents_manager
        contents.event_logger.add_listener(schema_id=contents.event_schema_id,
                                           listener=self._on_contents)
        settings = serverapp.web_app.settings
        self._terminals = lambda: settings.get("terminal_last_activity")

    async def _on_contents(self, *, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        """jupyter_events calls it with these keywords, once per contents event."""
        if data.get("action") != "get":
            self.touch("document")

    def seen(self) -> dict[str, datetime]:
        """The last time of each kind seen since the server started."""
        terminal = self._terminals()
        return {**self._seen, **({"terminal": terminal} if terminal is not None else {})}

    def last(self) -> datetime:
        return max([self._started, *self.seen().values()])


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
        self._release_failed_at = 0.0  # a failed release without kernels waits a timeout again

    def start(self) -> None:
        interval = min(60.0, self.timeout / 4)
        self._callback = PeriodicCallback(self.check, interval * 1000)
        self._callback.start()

    def stop(self) -> None:
        if self._callback:
            self._callback.stop()

    def _since(self) -> float:
        return max(self.last_activity().timestamp(), self.orchestrator.state.own_activity_until,
                   self._release_failed_at)

    def idle_seconds(self) -> float:
        """Seconds since a person's last activity, or since our last operation ended (a
        resume, a checkpoint) or a release without kernels failed, whichever came later."""
        return datetime.now(timezone.utc).timestamp() - self._since()

    def note(self) -> dict[str, Any]:
        """What an idle pause records (the paused record's ``idle``): nobody was active
        ``since`` (UTC, ISO 8601), for ``seconds``, with this ``timeout``."""
        since = datetime.fromtimestamp(self._since(), timezone.utc)
        return {"since": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "seconds": round(self.idle_seconds(), 1), "timeout": self.timeout}

    async def _release_without_kernels(self) -> bool:
        """Idle with no kernel: nothing to save, the pod goes back as it is; the watcher stops
        once it did (the server stops soon). A failed release is logged and waits for another
        whole timeout."""
        # said first: a backend that stops this server (the Hub) may end it mid-call
        self.log.info("gkeresume: idle for %.0f s with no kernel: releasing the pod",
                      self.idle_seconds())
        try:
            released = await self.orchestrator.release_without_kernels("idle")
        except GkeResumeError as exc:
            self.log.warning("gkeresume: idle release (no kernel) failed: %s", exc)
            self._release_failed_at = datetime.now(timezone.utc).timestamp()
            return False
        if released:
            self.stop()
        return released

    async def check(self) -> bool:
        """Start an idle pause if due (with no kernel: release the pod at once); True when one
        was started or the pod released."""
        orch = self.orchestrator
        if orch.state.operation or self.idle_seconds() < self.timeout:
            return False
        kids = orch.gateway.live_ids()
        if not kids and orch.state.state in RELEASE_STATES:
            return await self._release_without_kernels()
        if not kids or orch.state.state not in IDLE_STATES:
            return False
        if orch.gateway.busy(kids) and not self.pause_busy:
            return False
        self.log.info("gkeresume: idle for %.0f s: pausing", self.idle_seconds())
        try:
            await orch.start_pause(reason="idle", idle=self.note(),
                                   when_busy="queue" if self.pause_busy else "refuse")
        except GkeResumeError as exc:
            self.log.warning("gkeresume: idle pause not started: %s", exc)
            return False
        return True
