"""The orchestrator's shared core: its state and the kernel plumbing both flows use.

``OrchestratorBase`` holds everything the pause flow (``pause_flow.PauseFlow``), the resume flow
(``resume_flow.ResumeFlow``) and the ``Orchestrator`` itself (``orchestrator.py``) read and move:
the workspace's ``StateMachine``, one ``KernelEntry`` per kernel, the ``Operation`` in flight, the
paused record, the store and the event log. The flows are mixins on this base rather than
functions taking the orchestrator: they read and move the same state at every step, so as methods
their code says ``self.workspace.move(...)`` as the one class it is, and typing them against this
base needs no protocol.

Call order: ``Orchestrator(...)`` builds the state here, once per server; every operation task
(``_run_pause``, ``_run_resume``) ends in ``_operation_over`` whatever its outcome.

Invariants:

- ``operation`` is the one operation in flight, or ``None``: ``_operation_over`` clears it when
  its task ends.
- ``own_activity_until`` marks the end of our own kernel traffic (``OWN_ACTIVITY_GRACE`` after an
  operation): activity before it is not the user's (``events.ActivitySampler``).
- The advisor's events (``events.EventLog``) are recorded through ``events``; recording never fails
  the operation.
- A kernel call that does not answer ``ok`` raises ``KernelCallError`` naming the kernel, its
  notebook and the action; a kernel that has gone (``KERNEL_GONE``) is not an error where its
  absence is the point (listing, stopping).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from logging import Logger
from typing import Any

from tornado import web

from . import metrics
from .errors import KernelCallError
from .events import EventLog
from .kernel_client import call_kernel
from .release import ReleaseBackend
from .snapshot import SigningKey, SnapshotStore, environment_fingerprint, load_signing_key
from .states import State, StateMachine

KERNEL_GONE = (KeyError, web.HTTPError)  # jupyter_server's kernel manager raises a 404 HTTPError
OWN_ACTIVITY_GRACE = 5.0  # seconds after an operation in which kernel traffic is still ours


@dataclass
class KernelEntry:
    """What the orchestrator knows of one kernel."""

    kernel_id: str
    machine: StateMachine = field(default_factory=StateMachine)
    notebook: str | None = None
    progress: dict[str, Any] | None = None
    snapshot_id: str | None = None
    result: dict[str, Any] | None = None


@dataclass
class Operation:
    """One pause or resume in flight."""

    kind: str
    reason: str | None = None
    release: bool | None = None
    mode: str | None = None
    kernels: list[str] = field(default_factory=list)
    id: str = field(default_factory=lambda: f"op-{secrets.token_hex(3)}")
    started: float = field(default_factory=time.time)
    task: asyncio.Task | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "started": self.started, "reason": self.reason,
                "release": self.release, "mode": self.mode, "kernels": list(self.kernels)}


class OrchestratorBase:
    """The state of pause/resume for one server. ``settings`` is the ``GkeResume`` configurable."""

    def __init__(self, *, settings: Any, kernel_manager: Any, session_manager: Any,
                 backend: ReleaseBackend, log: Logger):
        self.settings = settings
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.backend = backend
        self.log = log
        self.store = SnapshotStore(settings.store_url, settings.workspace_id)
        self.events = EventLog(self.store, log)
        self.own_activity_until = 0.0
        self.workspace = StateMachine()
        self.entries: dict[str, KernelEntry] = {}
        self.operation: Operation | None = None
        self.paused: dict[str, Any] | None = None
        self.last_error: dict[str, Any] | None = None
        self._last_snapshot: dict[str, Any] | None = None
        self._last_snapshot_stale = True
        self._key: SigningKey | None = None
        self._here: dict[str, Any] | None = None
        self._started: asyncio.Task | None = None
        self._start_lock = asyncio.Lock()

    @property
    def key(self) -> SigningKey:
        if self._key is None:
            self._key = load_signing_key()
        return self._key

    @property
    def here(self) -> dict[str, Any]:
        if self._here is None:
            self._here = environment_fingerprint()
        return self._here

    def _kernel(self, kid: str) -> Any:
        try:
            return self.kernel_manager.get_kernel(kid)
        except KERNEL_GONE:
            return None

    def _entry(self, kid: str) -> KernelEntry:
        return self.entries.setdefault(kid, KernelEntry(kid))

    def _operation_over(self, op: Operation) -> None:
        if self.operation is op:
            self.operation = None
        self.own_activity_until = time.time() + OWN_ACTIVITY_GRACE

    def _move_all(self, ids: list[str], state: State, reason: str | None = None) -> None:
        for kid in ids:
            self._entry(kid).machine.move(state, reason)

    async def _notebooks(self) -> dict[str, str]:
        """kernel id -> notebook path of every session. Listing races with kernels shutting
        down (jupyter_server raises for a kernel that vanished mid-listing): try again."""
        for _ in range(3):
            try:
                sessions = await self.session_manager.list_sessions()
            except KERNEL_GONE:
                continue
            return {s["kernel"]["id"]: s["path"] for s in sessions if s.get("kernel")}
        return {}

    async def _call(self, kid: str, action: str, request: dict[str, Any],
                    timeout: float) -> dict[str, Any]:
        entry = self._entry(kid)

        def on_progress(progress: dict[str, Any]) -> None:
            entry.progress = progress

        request = {"store": self.settings.store_url, "workspace": self.store.workspace, **request}
        outcome = await call_kernel(self.kernel_manager, kid, action, request, timeout=timeout,
                                    on_progress=on_progress)
        if not outcome.get("ok"):
            raise KernelCallError(f"kernel {kid} ({entry.notebook or 'no notebook'}): {action}: "
                                  f"{outcome.get('error')}: {outcome.get('message')}")
        entry.result = outcome["result"]
        return outcome["result"]

    def _fail_note(self, operation: str, exc: BaseException, message: str | None = None) -> None:
        message = message or str(exc)
        self.last_error = {"operation": operation, "message": message, "at": time.time()}
        metrics.FAILURES.labels(operation, type(exc).__name__).inc()
        metrics.OPERATIONS.labels(operation, "failed").inc()
        metrics.log_event(self.log, operation, outcome="failed", error=type(exc).__name__,
                          message=message)
        self.log.error("gkeresume: %s", message)
