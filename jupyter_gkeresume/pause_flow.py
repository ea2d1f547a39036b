"""The pause flow: checkpoint every kernel, verify, record, release, stop.

``PauseFlow`` is a mixin of ``orchestrator.Orchestrator`` on ``OrchestratorBase`` (why a mixin:
see ``orchestrator_base``). Call order: ``start_pause`` validates at once (raising a
``GkeResumeError`` the handlers map to 4xx), moves the workspace and its kernels to ``pausing``,
then runs ``_run_pause`` in a background task: ``_checkpoint_all`` (one kernel call each),
``_verify`` each snapshot (in a worker thread), write the paused record (``make_record``), record
the advisor's event, ``releasing``, then (when ``release``) ``backend.release()`` and
``_stop_kernels``, ``paused``.

Invariants:

- Pause: every kernel checkpoints, every snapshot is read back and verified here (signature,
  every blob present with its size), the paused record is written, and only then does the backend
  release; the kernels stop after that. Any failure before the release call leaves the kernels as
  they were and the state back at ``running``; a failed release also removes the paused record.
- A releasing pause on a backend that releases the pod takes every live kernel (the others
  would die unsaved).
- A pause that writes the paused record is recorded as the advisor's event before the release (a
  released server may not live to record it); recording never fails the pause.
- Without the paused record (``record=False``), the pause only checkpoints: back to ``running``.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from . import metrics
from .advisor import Event
from .errors import ConflictError, GkeResumeError, IntegrityError, KernelNotFoundError
from .orchestrator_base import KERNEL_GONE, Operation, OrchestratorBase
from .paused_record import make_record
from .snapshot import load_manifest
from .snapshot.format import validate_snapshot_name
from .snapshot.verify import verify_snapshot
from .states import State, check_transition


class PauseFlow(OrchestratorBase):
    """Pause: ``start_pause`` and the background task it starts."""

    async def start_pause(self, kernel_ids: list[str] | None = None, *, release: bool = True,
                          name: str | None = None, reason: str = "user",
                          allow_busy: bool = False, record: bool | None = None,
                          timeout: float | None = None) -> Operation:
        """Validate, then pause in the background. ``record`` (default: ``release``) writes the
        paused record; ``release`` also calls the backend and stops the kernels."""
        if self.operation:
            raise ConflictError(f"a {self.operation.kind} is in flight ({self.operation.id})")
        if name is not None:
            validate_snapshot_name(name)
        live = self.kernel_manager.list_kernel_ids()
        ids = list(dict.fromkeys(kernel_ids)) if kernel_ids is not None else list(live)
        unknown = [k for k in ids if k not in live]
        if unknown:
            raise KernelNotFoundError(f"no running kernel {unknown[0]!r}")
        if release and self.backend.releases_pod:  # the others would die unsaved
            ids += [k for k in live if k not in ids]
        if not ids:
            raise ConflictError("there is no kernel to pause")
        busy = [k for k in ids if self.kernel_manager.get_kernel(k).execution_state == "busy"]
        if busy and not allow_busy:
            raise ConflictError(f"kernel {busy[0]} is busy running a cell: wait for it or "
                                "interrupt it, then pause")
        if self.paused is not None:
            raise ConflictError("this workspace is already paused: resume it or discard the "
                                "paused record first")
        check_transition(self.workspace.state, State.PAUSING)
        for kid in ids:
            check_transition(self._entry(kid).machine.state, State.PAUSING)
        self.workspace.move(State.PAUSING, reason)
        for kid in ids:
            entry = self._entry(kid)
            entry.machine.move(State.PAUSING)
            entry.progress = None
        op = Operation("pause", reason=reason, release=release, kernels=ids)
        self.operation = op
        op.task = asyncio.ensure_future(self._run_pause(
            op, name, release, release if record is None else record,
            timeout or self.settings.kernel_call_timeout,
        ))
        return op

    async def _run_pause(self, op: Operation, name: str | None, release: bool, record: bool,
                         timeout: float) -> None:
        t0 = time.monotonic()
        try:
            try:
                items = await self._checkpoint_all(op.kernels, name, timeout)
                t1 = time.monotonic()
                gpus = max([await asyncio.to_thread(self._verify, i["kernel_id"], i["snapshot_id"])
                            for i in items])
                t2 = time.monotonic()
                metrics.PAUSE_SECONDS.labels("checkpoint").observe(t1 - t0)
                metrics.PAUSE_SECONDS.labels("verify").observe(t2 - t1)
                paused = make_record(self.store.workspace, op.reason, self.backend.name, gpus,
                                     items) if record else None
                if paused is not None:
                    await asyncio.to_thread(
                        self.store.write_record, "paused", json.dumps(paused).encode()
                    )
            except Exception as exc:  # the task's boundary: the kernels stay as they are
                self._back_to_running(op, "pause", exc)
                return
            finally:
                self._last_snapshot_stale = True
            if paused is None:
                self._finish_pause(op, State.RUNNING, t0)
                return
            await self.events.record(Event(op.started, "pause", seconds=time.monotonic() - t0,
                                           gpus=max(paused["gpus"], 1)))
            self._move_all(op.kernels, State.RELEASING)
            self.workspace.move(State.RELEASING)
            if release:
                t3 = time.monotonic()
                try:
                    await self.backend.release()
                except Exception as exc:  # nothing released: the record must not claim it was
                    await self._forget_record()
                    self._back_to_running(op, "release", exc)
                    return
                metrics.PAUSE_SECONDS.labels("release").observe(time.monotonic() - t3)
                await self._stop_kernels(op.kernels)
            self.paused = paused
            self._finish_pause(op, State.PAUSED, t0)
        finally:
            self._operation_over(op)

    async def _checkpoint_all(self, ids: list[str], name: str | None,
                              timeout: float) -> list[dict[str, Any]]:
        notebooks = await self._notebooks()
        items = []
        for kid in ids:
            entry = self._entry(kid)
            entry.notebook = notebooks.get(kid, entry.notebook)
            result = await self._call(kid, "checkpoint", {"name": name,
                                                          "notebook": entry.notebook}, timeout)
            entry.snapshot_id = result["snapshot_id"]
            metrics.SNAPSHOT_BYTES.labels("new").inc(result.get("bytes_new", 0))
            metrics.SNAPSHOT_BYTES.labels("reused").inc(result.get("bytes_reused", 0))
            items.append({"kernel_id": kid,
                          "kernel_name": self.kernel_manager.get_kernel(kid).kernel_name,
                          "notebook": entry.notebook, "snapshot_id": result["snapshot_id"],
                          "bytes_total": result.get("bytes_total", 0),
                          "bytes_new": result.get("bytes_new", 0),
                          "saved": result.get("saved", []),
                          "skipped": result.get("skipped", [])})
        return items

    def _verify(self, kid: str, snapshot_id: str) -> int:
        """Read the committed snapshot back in full (``verify_snapshot``: signature, every blob's
        size and digest), reporting progress as phase ``verifying``; return the number of GPUs
        it was taken on. Runs in a worker thread."""
        entry, start = self._entry(kid), time.monotonic()

        def progress(done: int, total: int) -> None:
            seconds = time.monotonic() - start
            entry.progress = {"phase": "verifying", "done_bytes": done, "total_bytes": total,
                              "seconds": seconds, "rate": done / seconds if seconds > 0 else 0.0}

        report = verify_snapshot(self.store, snapshot_id, self.key, progress=progress)
        if not report.ok:
            raise IntegrityError(f"snapshot {snapshot_id} failed verification: "
                                 + "; ".join(report.problems))
        manifest = load_manifest(self.store, snapshot_id, self.key)
        return len((manifest.fingerprint.get("cuda") or {}).get("gpus") or [])

    def _finish_pause(self, op: Operation, final: State, t0: float) -> None:
        self._move_all(op.kernels, final)
        self.workspace.move(final)
        self.last_error = None
        seconds = time.monotonic() - t0
        metrics.PAUSE_SECONDS.labels("total").observe(seconds)
        metrics.OPERATIONS.labels("pause", "ok").inc()
        metrics.log_event(self.log, "pause", outcome="ok", state=final.value, reason=op.reason,
                          seconds=round(seconds, 3), kernels=len(op.kernels),
                          snapshots=[self._entry(k).snapshot_id for k in op.kernels])

    def _back_to_running(self, op: Operation, stage: str, exc: BaseException) -> None:
        message = f"{stage} failed, nothing was released: {exc}"
        self._move_all(op.kernels, State.RUNNING, message)
        self.workspace.move(State.RUNNING, message)
        self._fail_note(stage, exc, message)

    async def _forget_record(self) -> None:
        try:
            await asyncio.to_thread(self.store.delete_record, "paused")
        except GkeResumeError as exc:  # the kernels still run; a later resume restores the pause
            self.log.error("gkeresume: could not delete the paused record: %s", exc)

    async def _stop_kernels(self, ids: list[str]) -> None:
        for kid in ids:
            try:
                await self.kernel_manager.shutdown_kernel(kid)
            except KERNEL_GONE:
                continue
