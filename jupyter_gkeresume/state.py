"""``WorkspaceState``: the one object that changes the workspace's and its kernels' state.

It holds the workspace's ``StateMachine``, one ``KernelEntry`` per kernel, the ``Operation`` in
flight, the paused record and the last error. Operations (``pause``, ``resume``) and the
orchestrator change them only through its methods; the idle watcher, the activity sampler, the
handlers and the metrics read them through its properties.

Call order: ``begin(op, ...)`` checks every transition first and then moves the workspace and the
operation's kernels (nothing moves when one transition is refused); the operation's task ends in
``end(op)`` whatever its outcome.

Invariants:

- ``operation`` is the one operation in flight, or ``None``.
- ``own_activity_until`` marks the end of our own kernel traffic (``OWN_ACTIVITY_GRACE`` after an
  operation): activity before it is not the user's (``events.ActivitySampler``).
- Every move goes through the transition table of ``states.py``.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .paused_record import PausedRecord
from .states import State, StateMachine, check_transition

OWN_ACTIVITY_GRACE = 5.0  # seconds after an operation in which kernel traffic is still ours


def server_phase(phase: str) -> dict[str, Any]:
    """A kernel's progress in a phase the server itself runs (``releasing``, ``starting``):
    the kernel's progress shape, with no bytes."""
    return {"phase": phase, "done_bytes": 0, "total_bytes": 0, "rate": 0.0, "seconds": 0.0,
            "since": time.time()}


@dataclass
class KernelEntry:
    """What the server knows of one kernel (read-only outside ``WorkspaceState``)."""

    kernel_id: str
    machine: StateMachine = field(default_factory=StateMachine)
    notebook: str | None = None
    progress: dict[str, Any] | None = None
    snapshot_id: str | None = None
    result: dict[str, Any] | None = None
    held: bool = False  # a pause holds it: it refuses cells

    def to_dict(self) -> dict[str, Any]:
        return {"kernel_id": self.kernel_id, "notebook": self.notebook, **self.machine.to_dict(),
                "progress": self.progress, "snapshot_id": self.snapshot_id, "result": self.result,
                "held": self.held}


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
    task: asyncio.Future | None = None
    cancellable: bool = False
    """A pause can be cancelled until it writes the paused record (``pause.PauseOperation``)."""
    estimate_seconds: float | None = None
    """Its expected whole duration, learned from this workspace's recorded operations."""
    waiting_for: dict[str, Any] | None = None
    """A queued pause: the running cell it waits for (``kernel_id``, ``notebook``,
    ``execution_count``, ``running_seconds``); ``None`` once the pause itself runs."""
    documents: dict[str, Any] | None = None
    """A pause: what the connected labs saved before the hold (``lab_saves.SaveReport``)."""
    idle: dict[str, Any] | None = None
    """An idle pause: since when nobody was active, for how long (``IdleWatcher.note``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "started": self.started, "reason": self.reason,
                "release": self.release, "mode": self.mode, "kernels": list(self.kernels),
                "cancellable": self.cancellable, "waiting_for": self.waiting_for,
                "estimate_seconds": self.estimate_seconds, "documents": self.documents,
                "idle": self.idle}


class WorkspaceState:
    """The state of one workspace and its kernels."""

    def __init__(self) -> None:
        self._workspace = StateMachine()
        self._entries: dict[str, KernelEntry] = {}
        self._operation: Operation | None = None
        self._paused: PausedRecord | None = None
        self._last_error: dict[str, Any] | None = None
        self._own_activity_until = 0.0
        self._record_error: str | None = None
        self._record_ignored: str | None = None

    # -- reading ----------------------------------------------------------------------------
    @property
    def state(self) -> State:
        return self._workspace.state

    @property
    def reason(self) -> str | None:
        return self._workspace.reason

    @property
    def operation(self) -> Operation | None:
        return self._operation

    @property
    def paused(self) -> PausedRecord | None:
        return self._paused

    @property
    def record_error(self) -> str | None:
        """Why the paused record could not be read (``None``: it was read, or there is none)."""
        return self._record_error

    @property
    def record_ignored(self) -> str | None:
        """Why the stored paused record was ignored (corrupt, unsigned, another key or
        workspace), until a pause writes a new one or it is discarded."""
        return self._record_ignored

    @property
    def own_activity_until(self) -> float:
        return self._own_activity_until

    def kernel(self, kid: str) -> KernelEntry:
        """The entry of ``kid`` (a new ``running`` one for a kernel not seen before)."""
        return self._entries.setdefault(kid, KernelEntry(kid))

    def kernel_ids(self) -> set[str]:
        return set(self._entries)

    def to_status(self) -> dict[str, Any]:
        """The workspace part of the status (kernels are listed by the orchestrator)."""
        return {**self._workspace.to_dict(),
                "operation": self._operation.to_dict() if self._operation else None,
                "paused": self._paused.to_dict() if self._paused else None,
                "paused_record_error": self._record_error,
                "paused_record_ignored": self._record_ignored, "last_error": self._last_error}

    # -- operations -------------------------------------------------------------------------
    def begin(self, op: Operation, workspace_to: State, kernels_to: State | None = None,
              reason: str | None = None) -> None:
        """Start ``op``: move the workspace (and, with ``kernels_to``, each of ``op.kernels``);
        every transition is checked before anything moves."""
        check_transition(self.state, workspace_to)
        if kernels_to is not None:
            for kid in op.kernels:
                check_transition(self.kernel(kid).machine.state, kernels_to)
        self._operation = op
        self._workspace.move(workspace_to, reason)
        if kernels_to is not None:
            for kid in op.kernels:
                entry = self.kernel(kid)
                entry.machine.move(kernels_to)
                entry.progress = None

    def end(self, op: Operation) -> None:
        if self._operation is op:
            self._operation = None
        self._own_activity_until = time.time() + OWN_ACTIVITY_GRACE

    # -- moves ------------------------------------------------------------------------------
    def move(self, state: State, reason: str | None = None) -> None:
        self._workspace.move(state, reason)

    def move_kernels(self, ids: Iterable[str], state: State, reason: str | None = None, *,
                     only_active: bool = False) -> None:
        for kid in ids:
            machine = self.kernel(kid).machine
            if not only_active or machine.active:
                machine.move(state, reason)

    def add_kernel(self, kid: str, notebook: str | None, initial: State) -> None:
        """A kernel an operation started (or took over): its entry starts at ``initial``."""
        entry = self._entries.setdefault(kid, KernelEntry(kid, StateMachine(initial)))
        entry.notebook = notebook or entry.notebook

    def set_notebook(self, kid: str, notebook: str | None) -> None:
        entry = self.kernel(kid)
        entry.notebook = notebook or entry.notebook

    def set_held(self, kid: str, held: bool) -> None:
        self.kernel(kid).held = held

    def set_progress(self, kid: str, progress: dict[str, Any]) -> None:
        self.kernel(kid).progress = progress

    def set_result(self, kid: str, snapshot_id: str | None, result: dict[str, Any]) -> None:
        entry = self.kernel(kid)
        entry.result = result
        if snapshot_id is not None:
            entry.snapshot_id = snapshot_id

    def cell_started(self, kid: str) -> None:
        """A user's cell started in ``kid`` (``cell_watch``): a ``ready`` kernel (and a
        ``ready`` workspace, with no operation in flight) is ``running`` again."""
        entry = self._entries.get(kid)
        if entry is not None and entry.machine.state == State.READY:
            entry.machine.move(State.RUNNING, "a cell ran")
        if self._operation is None and self.state == State.READY:
            self._workspace.move(State.RUNNING, "a cell ran")

    def forget_gone(self, live: set[str]) -> None:
        """Drop the entries of kernels that are gone and take part in no operation."""
        for kid in [k for k, e in self._entries.items() if k not in live and not e.machine.active]:
            del self._entries[kid]

    # -- paused record, errors ---------------------------------------------------------------
    def set_paused(self, record: PausedRecord | None) -> None:
        """The record now stored (written or deleted): an ignored one is gone."""
        self._paused = record
        self._record_ignored = None

    def set_record_ignored(self, message: str) -> None:
        self._record_ignored = message

    def set_record_error(self, message: str | None) -> None:
        self._record_error = message

    def note_failure(self, operation: str, message: str) -> None:
        self._last_error = {"operation": operation, "message": message, "at": time.time()}

    def clear_failure(self) -> None:
        self._last_error = None
