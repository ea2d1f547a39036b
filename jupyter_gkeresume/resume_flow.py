"""The resume flow: bring a workspace's kernels back from their snapshots.

``ResumeFlow`` is a mixin of ``orchestrator.Orchestrator`` on ``OrchestratorBase`` (why a mixin:
see ``orchestrator_base``). Call order: ``start_resume`` validates at once (raising a
``GkeResumeError`` the handlers map to 4xx) and plans one ``ResumeItem`` per kernel, from the
paused record or from one named snapshot (``_plan_snapshot``), moves the workspace to
``waiting_for_resources``, then runs ``_run_resume`` in a background task: a kernel for each item
(``_start_kernel``: the notebook's session, reused or created, unless one was named),
``restoring`` (one kernel call each, unless ``files-only``), ``ready``.

Invariants:

- Single flight: a second ``start_resume`` joins the running resume (``joined``: one restore,
  every caller sees its status); while a pause is in flight it gets ``ConflictError``.
- Resume from the paused record deletes the record only when every kernel is ``ready``.
- A resume is recorded as the advisor's event when it is ready (a ``files-only`` one as activity:
  it restores nothing); recording never fails the resume.
- Any failure moves the workspace and every active kernel of the operation to ``failed`` with
  the reason.
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from . import metrics
from .advisor import Event
from .errors import ConflictError, InvalidInputError, KernelNotFoundError
from .orchestrator_base import KernelEntry, Operation, OrchestratorBase
from .paused_record import safe_notebook_path
from .snapshot import load_manifest, resolve
from .states import State, StateMachine, check_transition

MODES = ("full", "partial", "files-only")


@dataclass
class ResumeItem:
    """One kernel to bring back: into ``kernel_id`` or a kernel started for ``notebook``.
    ``saved``: the names its snapshot holds, when the paused record says (``None``: unknown)."""

    snapshot_id: str
    notebook: str | None
    kernel_name: str | None
    kernel_id: str | None = None
    saved: list[str] | None = None

    def only(self, names: list[str] | None) -> list[str] | None:
        """The names of ``names`` to restore here: one ``only`` list serves every kernel of the
        paused record, each restores those its snapshot holds (all of them when not known)."""
        if names is None or self.saved is None:
            return names
        return [n for n in names if n in self.saved]


class ResumeFlow(OrchestratorBase):
    """Resume: ``start_resume`` and the background task it starts."""

    async def start_resume(self, snapshot: str | None, mode: str, only: list[str] | None,
                           kernel: str | None) -> tuple[Operation, bool]:
        """Validate, then resume in the background; returns ``(operation, joined)``."""
        async with self._start_lock:
            if self.operation and self.operation.kind == "resume":
                return self.operation, True
            if self.operation:
                raise ConflictError(f"a {self.operation.kind} is in flight ({self.operation.id})")
            if mode not in MODES:
                raise InvalidInputError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
            if (mode == "partial") != bool(only):
                raise InvalidInputError("'only' (a non-empty list of names) goes with mode "
                                        "'partial', and only with it")
            if kernel is not None and snapshot is None:
                raise InvalidInputError("'kernel' needs 'snapshot'")
            if kernel is not None and kernel not in self.kernel_manager.list_kernel_ids():
                raise KernelNotFoundError(f"no running kernel {kernel!r}")
            if snapshot is None:
                if self.paused is None:
                    raise ConflictError("nothing is paused here: give a 'snapshot' to restore")
                items = [ResumeItem(k["snapshot_id"], k["notebook"], k["kernel_name"],
                                    saved=k.get("saved"))
                         for k in self.paused["kernels"]]
                _check_only(only, items)
            else:
                items = [await asyncio.to_thread(self._plan_snapshot, snapshot, kernel)]
            check_transition(self.workspace.state, State.WAITING_FOR_RESOURCES)
            self.workspace.move(State.WAITING_FOR_RESOURCES)
            op = Operation("resume", mode=mode, kernels=[i.kernel_id for i in items if i.kernel_id])
            self.operation = op
            op.task = asyncio.ensure_future(self._run_resume(op, items, mode, only,
                                                             from_record=snapshot is None))
            return op, False

    def _plan_snapshot(self, reference: str, kernel: str | None) -> ResumeItem:
        snapshot_id = resolve(self.store, reference, self.key)
        manifest = load_manifest(self.store, snapshot_id, self.key)
        return ResumeItem(snapshot_id, manifest.notebook, None, kernel)

    async def _run_resume(self, op: Operation, items: list[ResumeItem], mode: str,
                          only: list[str] | None, *, from_record: bool) -> None:
        try:
            kids = []
            for item in items:
                kid = item.kernel_id or await self._start_kernel(item)
                entry = self.entries.setdefault(kid, KernelEntry(kid, StateMachine(State.PAUSED)))
                entry.notebook = item.notebook or entry.notebook
                if entry.machine.state != State.WAITING_FOR_RESOURCES:
                    entry.machine.move(State.WAITING_FOR_RESOURCES)
                kids.append(kid)
                if kid not in op.kernels:
                    op.kernels.append(kid)
            if mode != "files-only":
                self.workspace.move(State.RESTORING)
                for item, kid in zip(items, kids, strict=True):
                    names = item.only(only)
                    if names == []:  # a partial resume that wants nothing of this snapshot
                        continue
                    entry = self._entry(kid)
                    entry.machine.move(State.RESTORING)
                    await self._call(kid, "resume", {"reference": item.snapshot_id,
                                                     "only": names},
                                     self.settings.kernel_call_timeout)
                    entry.snapshot_id = item.snapshot_id
            self._move_all(kids, State.READY)
            if from_record:
                await asyncio.to_thread(self.store.delete_record, "paused")
                self._count_released(self.paused)
                self.paused = None
        except Exception as exc:  # the task's boundary: report every failure as a state
            message = f"resume failed: {exc}"
            for kid in op.kernels:
                if self._entry(kid).machine.active:
                    self._entry(kid).machine.move(State.FAILED, message)
            self.workspace.move(State.FAILED, message)
            self._fail_note("resume", exc, message)
        else:
            self.workspace.move(State.READY)
            self.last_error = None
            seconds = time.time() - op.started  # from the request, as the user waits
            metrics.RESUME_SECONDS.observe(seconds)
            metrics.OPERATIONS.labels("resume", "ok").inc()
            metrics.log_event(self.log, "resume", outcome="ok", mode=mode,
                              seconds=round(seconds, 3), kernels=len(kids),
                              snapshots=[i.snapshot_id for i in items])
            # a files-only resume restores nothing: its time says nothing of a restore
            await self.events.record(Event(op.started, "activity") if mode == "files-only"
                                     else Event(op.started, "resume", seconds=seconds))
        finally:
            self._operation_over(op)

    async def _start_kernel(self, item: ResumeItem) -> str:
        """A kernel for ``item``: the notebook's session (reused or created), else a bare one."""
        kernel_name = item.kernel_name or self.kernel_manager.default_kernel_name
        if item.notebook:
            path = safe_notebook_path(item.notebook)
            for session in await self.session_manager.list_sessions():
                if session.get("path") == path and session.get("kernel"):
                    kid = session["kernel"]["id"]
                    break
            else:
                model = await self.session_manager.create_session(
                    path=path, name=posixpath.basename(path), type="notebook",
                    kernel_name=kernel_name,
                )
                kid = model["kernel"]["id"]
        else:
            kid = await self.kernel_manager.start_kernel(kernel_name=kernel_name)
        return kid

    def _count_released(self, record: dict[str, Any] | None) -> None:
        if not record or not record.get("gpus"):
            return
        try:
            paused_at = datetime.fromisoformat(record["paused_at"].replace("Z", "+00:00"))
        except (ValueError, AttributeError):
            return
        seconds = (datetime.now(timezone.utc) - paused_at).total_seconds()
        metrics.ACCELERATOR_SECONDS_RELEASED.inc(max(seconds, 0) * record["gpus"])


def _check_only(only: list[str] | None, items: list[ResumeItem]) -> None:
    """A partial resume of the paused record: every name must be saved by some kernel (when the
    record says what each saved)."""
    if only is None or any(item.saved is None for item in items):
        return
    held = {name for item in items for name in item.saved or []}
    missing = [n for n in only if n not in held]
    if missing:
        raise InvalidInputError(f"no paused snapshot holds {', '.join(map(repr, missing))}; "
                                f"saved: {', '.join(sorted(held)) or 'nothing'}")
