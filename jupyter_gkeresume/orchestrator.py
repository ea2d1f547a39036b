"""Pause and resume of a workspace's kernels: the state machine, in one place.

One ``Orchestrator`` per server: it combines the pause flow (``pause_flow.PauseFlow``) and the
resume flow (``resume_flow.ResumeFlow``) on their shared state and kernel plumbing
(``orchestrator_base.OrchestratorBase``), and adds startup, the status and snapshot queries and
shutdown. The paused record's format is ``paused_record``.

Call order: ``ensure_started()`` (reads the paused record once, may auto-resume), then any number
of ``start_pause`` / ``start_resume`` (each validates at once, raising a ``GkeResumeError`` the
handlers map to 4xx, then runs in a background task), ``status()`` at any time, ``shutdown()``
when the server stops.

Invariants (each flow's own are in its module):

- At most one operation (pause or resume) is in flight. A second resume joins the running one
  (single flight: one restore, every caller sees its status); anything else gets ``ConflictError``.
- A snapshot named by the paused record is not deleted; the paused record is discarded only while
  no operation is in flight.
- A store that cannot be read does not hide the rest of the status: the last snapshot says the
  error.
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import metrics
from .errors import ConflictError, GkeResumeError, SnapshotNotFoundError
from .pause_flow import PauseFlow
from .paused_record import parse_record
from .resume_flow import ResumeFlow
from .snapshot import list_snapshots, load_manifest
from .snapshot.catalog import summarize
from .snapshot.format import validate_snapshot_id
from .snapshot.store import _safe_url
from .states import State


class Orchestrator(PauseFlow, ResumeFlow):
    """Pause/resume for one server. ``settings`` is the ``GkeResume`` configurable."""

    # -- startup ----------------------------------------------------------------------------
    async def ensure_started(self) -> None:
        """Read the paused record once (and auto-resume if configured); later calls wait on it."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._startup())
        await asyncio.shield(self._started)

    async def _startup(self) -> None:
        try:
            raw = await asyncio.to_thread(self.store.read_record, "paused")
            record = parse_record(raw) if raw is not None else None
        except GkeResumeError as exc:
            self._fail_note("startup", exc)
            self._started = None  # the store may come back: the next request tries again
            return
        if record is None:
            return
        self.paused = record
        self.workspace.move(State.PAUSED, f"paused {record['paused_at']} ({record['reason']})")
        self.log.info("gkeresume: found a paused record from %s", record["paused_at"])
        if self.settings.auto_resume:
            await self.start_resume(None, "full", None, None)

    # -- status -----------------------------------------------------------------------------
    async def status(self) -> dict[str, Any]:
        notebooks = await self._notebooks()
        live = set(self.kernel_manager.list_kernel_ids())
        for kid in list(self.entries):
            if kid not in live and not self.entries[kid].machine.active:
                del self.entries[kid]
        kernels = []
        for kid in sorted(live | set(self.entries)):
            entry = self._entry(kid)
            entry.notebook = notebooks.get(kid, entry.notebook)
            kernel = self._kernel(kid)
            kernels.append({
                "kernel_id": kid,
                "kernel_name": getattr(kernel, "kernel_name", None),
                "notebook": entry.notebook,
                "execution_state": getattr(kernel, "execution_state", None),
                **entry.machine.to_dict(),
                "progress": entry.progress, "snapshot_id": entry.snapshot_id,
                "result": entry.result,
            })
        return {
            "workspace": self.store.workspace, "store": _safe_url(self.settings.store_url),
            "release_backend": self.backend.name, **self.workspace.to_dict(),
            "operation": self.operation.to_dict() if self.operation else None,
            "kernels": kernels, "last_snapshot": await self._last_snapshot_or_error(),
            "paused": self.paused, "last_error": self.last_error,
        }

    async def last_snapshot(self) -> dict[str, Any] | None:
        """The newest committed snapshot as a summary row (cached until something changes)."""
        if self._last_snapshot_stale:
            self._last_snapshot = await asyncio.to_thread(self._read_last_snapshot)
            self._last_snapshot_stale = False
        return self._last_snapshot

    async def _last_snapshot_or_error(self) -> dict[str, Any] | None:
        """For status: a store that cannot be read must not hide the rest of the status."""
        try:
            return await self.last_snapshot()
        except GkeResumeError as exc:
            return {"id": None, "error": str(exc)}

    def _read_last_snapshot(self) -> dict[str, Any] | None:
        ids = self.store.list_snapshot_ids()
        if not ids:
            return None
        try:
            return summarize(load_manifest(self.store, ids[-1], self.key), self.here).to_dict()
        except GkeResumeError as exc:
            return {"id": ids[-1], "error": str(exc)}

    async def snapshots(self) -> list[dict[str, Any]]:
        rows = await asyncio.to_thread(list_snapshots, self.store, self.key, self.here)
        return [row.to_dict() for row in rows]

    async def delete_snapshot(self, snapshot_id: str) -> None:
        validate_snapshot_id(snapshot_id)
        if self.paused and snapshot_id in {k["snapshot_id"] for k in self.paused["kernels"]}:
            raise ConflictError(f"snapshot {snapshot_id} is part of the paused record: resume or "
                                "discard the pause first")
        ids = await asyncio.to_thread(self.store.list_snapshot_ids)
        if snapshot_id not in ids:
            raise SnapshotNotFoundError(snapshot_id, ids)
        await asyncio.to_thread(self.store.delete_manifest, snapshot_id)
        self._last_snapshot_stale = True
        metrics.log_event(self.log, "delete", snapshot_id=snapshot_id)

    async def discard_paused(self) -> None:
        """Forget the paused record (the snapshots stay); the workspace becomes ``running``."""
        if self.operation:
            raise ConflictError(f"a {self.operation.kind} is in flight")
        if self.paused is None:
            raise ConflictError("nothing is paused here")
        await asyncio.to_thread(self.store.delete_record, "paused")
        self.paused = None
        if self.workspace.state in (State.PAUSED, State.FAILED):
            self.workspace.move(State.RUNNING, "paused record discarded")

    # -- shutdown ---------------------------------------------------------------------------
    async def shutdown(self, timeout: float) -> str:
        """Checkpoint every kernel before the server stops (SIGTERM); returns the outcome."""
        if self.workspace.state in (State.PAUSED, State.RELEASING) or (
            self.operation and self.operation.kind == "pause"
        ):
            outcome = "already paused or pausing"
            if self.operation and self.operation.task:
                await asyncio.wait([self.operation.task], timeout=timeout)
        elif self.operation or not self.kernel_manager.list_kernel_ids():
            outcome = "nothing to checkpoint" if not self.operation else "resume in flight"
        else:
            try:
                op = await self.start_pause(release=False, record=True, reason="shutdown",
                                            allow_busy=True, timeout=timeout)
                await asyncio.wait([op.task], timeout=timeout + 5)
                outcome = "checkpointed" if self.workspace.state == State.PAUSED else (
                    f"failed: {self.workspace.reason}"
                )
            except GkeResumeError as exc:
                outcome = f"failed: {exc}"
        metrics.log_event(self.log, "shutdown", outcome=outcome)
        return outcome
