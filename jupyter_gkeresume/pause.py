"""A pause: checkpoint every kernel, verify, record, release, stop.

``PauseOperation.run`` reads top to bottom: hold every kernel (from then on each refuses cells:
the consistent cut), checkpoint each kernel (``KernelGateway``), read
each snapshot (``SnapshotVerifier``, ``c.GkeResume.verify``), write the paused record (``PausedRecords``),
record the advisor's event, ``releasing``, then (when ``release``) ``backend.release()`` and stop
the kernels, ``paused``. ``ShutdownCheckpoint`` is the variant run when the server stops: it
records the pause but releases nothing.

Invariants:

- The backend releases only after every kernel checkpointed, every snapshot was verified here
  (signature, every blob present with its size; with ``verify="full"`` its digest too) and the
  paused record was written; the kernels stop after that.
- Any failure (or a cancel) before the release call leaves the kernels as they were, lifts the
  holds and puts the state back at ``running``; a failed release also removes the paused record.
- A pause is cancellable (``op.cancellable``) until it writes the paused record.
- A pause that writes the paused record is recorded as the advisor's event before the release (a
  released server may not live to record it); recording never fails the pause.
- Without the paused record (``record=False``), the pause only checkpoints: back to ``running``.
- After a failed resume (``previous``: the record of what did not come back), the new record
  keeps those kernels beside the ones just saved.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from logging import Logger
from typing import Any

from . import metrics
from .advisor import Event
from .errors import GkeResumeError
from .events import EventLog
from .kernels import KernelGateway
from .paused_record import PausedKernel, PausedRecord, PausedRecords
from .release import ReleaseBackend
from .snapshot import SigningKey, SnapshotStore
from .snapshot.writer import validate_verify_mode, verify_committed
from .state import Operation, WorkspaceState, server_phase
from .states import State

WAIT_POLL_SECONDS = 0.25  # a queued pause checks the kernels' busy state (in memory) this often


class SnapshotVerifier:
    """Checks a committed snapshot before anything is released (``writer.verify_committed``):
    ``mode`` ``"metadata"`` (signature, manifest read back, every blob present with its size;
    no blob byte is read) or ``"full"`` (also every blob read back against its digest)."""

    def __init__(self, store: SnapshotStore, key: Callable[[], SigningKey], *,
                 mode: str = "metadata"):
        self.store = store
        self.key = key
        self.mode = validate_verify_mode(mode)

    def verify(self, snapshot_id: str, progress: Callable[[int, int], None], *,
               mode: str | None = None) -> int:
        """Verify in ``mode`` (default: the configured one); ``IntegrityError`` otherwise.
        Returns the number of GPUs the snapshot was taken on. Blocking: run it in a thread."""
        manifest = verify_committed(self.store, self.key(), snapshot_id,
                                    mode=mode or self.mode, progress=progress)
        return len((manifest.fingerprint.get("cuda") or {}).get("gpus") or [])


class PauseOperation:
    """One pause of ``op.kernels``; ``run`` once, as the operation's task."""

    stage = "pause"
    waits_for_cells = True  # a queued pause waits for running cells before its hold
    verify_mode: str | None = None  # None: the verifier's configured mode (c.GkeResume.verify)

    def __init__(self, op: Operation, *, state: WorkspaceState, gateway: KernelGateway,
                 records: PausedRecords, verifier: SnapshotVerifier, backend: ReleaseBackend,
                 events: EventLog, log: Logger, name: str | None, record: bool, timeout: float,
                 previous: PausedRecord | None = None):
        self.op = op
        self.state = state
        self.gateway = gateway
        self.records = records
        self.verifier = verifier
        self.backend = backend
        self.events = events
        self.log = log
        self.name = name
        self.record = record
        self.timeout = timeout
        self.previous = previous  # the record of what a failed resume did not bring back
        self.not_saved: list[dict[str, Any]] = []  # kernels not saved, and why (shutdown)
        self._holding: list[str] = []  # kernels sent a hold
        self._held: set[str] = set()  # kernels whose hold is in place
        self._background: set[asyncio.Future] = set()  # lifts queued behind a running cell

    async def run(self) -> None:
        op, t0 = self.op, time.monotonic()
        try:
            try:
                if self.waits_for_cells:
                    await self._wait_for_cells()  # other kernels keep running meanwhile
                await self._hold_all()  # the cut: no cell runs in these kernels from now on
                items, gpus = await self.save_all()
                if self.previous is not None:
                    items = self.previous.carried_into(items)
                paused = PausedRecord.new(self.gateway.workspace, op.reason, self.backend.name,
                                          gpus, items, self.not_saved) if self.record else None
                op.cancellable = False  # from the record on, the pause goes through
                if paused is not None:
                    await asyncio.to_thread(self.records.write, paused)
            except asyncio.CancelledError:  # ``Orchestrator.cancel``: only while cancellable
                _uncancel()
                await self._lift_holds()
                self._cancelled()
                return
            except Exception as exc:  # the task's boundary: the kernels stay as they are
                await self._lift_holds()
                self._back_to_running(self.stage, exc)
                return
            if paused is None:
                await self._lift_holds()
                self._finish(State.RUNNING, t0)
                return
            await self.events.record(Event(op.started, "pause", seconds=time.monotonic() - t0,
                                           gpus=max(paused.gpus, 1),
                                           bytes=paused.bytes_total))
            self.state.move_kernels(op.kernels, State.RELEASING)
            self.state.move(State.RELEASING)
            for kid in op.kernels:
                self.state.set_progress(kid, server_phase("releasing"))
            if op.release:
                t3 = time.monotonic()
                try:
                    await self.backend.release()
                except Exception as exc:  # nothing released: the record must not claim it was
                    await self._forget_record()
                    await self._lift_holds()
                    self._back_to_running("release", exc)
                    return
                metrics.PAUSE_SECONDS.labels("release").observe(time.monotonic() - t3)
                await self.gateway.stop(op.kernels)
            self.state.set_paused(paused)
            self._finish(State.PAUSED, t0)
        finally:
            self.state.end(op)

    async def _wait_for_cells(self) -> None:
        """A queued pause: wait (never interrupting) until no kernel of the pause runs a cell,
        saying in ``op.waiting_for`` which cell it waits for and for how long."""
        while busy := self.gateway.busy(self.op.kernels):
            kid = busy[0]
            if self.op.waiting_for is None or self.op.waiting_for["kernel_id"] != kid:
                self.state.set_notebook(kid, (await self.gateway.notebooks()).get(kid))
            count, seconds = self.gateway.running_cell(kid)
            self.op.waiting_for = {"kernel_id": kid, "notebook": self.state.kernel(kid).notebook,
                                   "execution_count": count, "running_seconds": seconds}
            await asyncio.sleep(WAIT_POLL_SECONDS)
        self.op.waiting_for = None

    async def _hold_all(self) -> None:
        """Hold every kernel of the pause at once (a busy one from the end of its cell)."""
        reason = f"pause {self.op.id} ({self.op.reason})"

        async def hold(kid: str) -> None:
            await self.gateway.hold(kid, pausing=True, reason=reason, timeout=self.timeout)
            self._held.add(kid)
            self.state.set_held(kid, True)

        self._holding = list(self.op.kernels)
        await asyncio.gather(*(hold(kid) for kid in self._holding))

    async def _lift_holds(self) -> None:
        """Lift every hold sent: held kernels answer at once; a kernel still running a cell gets
        the lift queued behind its hold (sent now, answered when its cell ends)."""

        async def lift(kid: str) -> None:
            try:
                await self.gateway.hold(kid, pausing=False, reason=None, timeout=self.timeout)
                self.state.set_held(kid, False)
            except Exception as exc:  # the kernel went away or broke: nothing to lift there
                self.log.warning("gkeresume: could not lift the hold on kernel %s: %s", kid, exc)

        now = []
        for kid in self._holding:
            task = asyncio.ensure_future(lift(kid))
            if kid in self._held:
                now.append(task)
            else:
                self._background.add(task)
                task.add_done_callback(self._background.discard)
        self._holding = []
        await asyncio.gather(*now)

    async def save_all(self) -> tuple[list[PausedKernel], int]:
        """Checkpoint each kernel in turn, then verify each snapshot; the first failure stops
        the pause. Returns the items and the most GPUs a snapshot was taken on."""
        t0 = time.monotonic()
        notebooks = await self.gateway.notebooks()
        items = [await self._checkpoint(kid, notebooks.get(kid)) for kid in self.op.kernels]
        t1 = time.monotonic()
        gpus = max([await self._verify(item) for item in items])
        metrics.PAUSE_SECONDS.labels("checkpoint").observe(t1 - t0)
        metrics.PAUSE_SECONDS.labels("verify").observe(time.monotonic() - t1)
        return items, gpus

    async def _checkpoint(self, kid: str, notebook: str | None) -> PausedKernel:
        self.state.set_notebook(kid, notebook)
        notebook = self.state.kernel(kid).notebook
        reply = await self.gateway.checkpoint(
            kid, name=self.name, notebook=notebook, timeout=self.timeout, reason=self.op.reason,
            on_progress=lambda progress: self.state.set_progress(kid, progress))
        self.state.set_result(kid, reply.snapshot_id, reply.data)
        metrics.SNAPSHOT_BYTES.labels("new").inc(reply.bytes_new)
        metrics.SNAPSHOT_BYTES.labels("reused").inc(reply.bytes_reused)
        return PausedKernel(reply.snapshot_id, kid, self.gateway.info(kid)["kernel_name"],
                            notebook, reply.bytes_total, reply.bytes_new, reply.saved,
                            reply.skipped)

    async def _verify(self, item: PausedKernel) -> int:
        """Verify one snapshot in a worker thread, reporting progress as phase ``verifying``."""
        kid, start = item.kernel_id or "", time.monotonic()

        def progress(done: int, total: int) -> None:
            seconds = time.monotonic() - start
            self.state.set_progress(kid, {
                "phase": "verifying", "done_bytes": done, "total_bytes": total,
                "seconds": seconds, "rate": done / seconds if seconds > 0 else 0.0})

        return await asyncio.to_thread(self.verifier.verify, item.snapshot_id, progress,
                                       mode=self.verify_mode)

    def _finish(self, final: State, t0: float) -> None:
        op = self.op
        self.state.move_kernels(op.kernels, final)
        self.state.move(final)
        self.state.clear_failure()
        seconds = time.monotonic() - t0
        metrics.PAUSE_SECONDS.labels("total").observe(seconds)
        metrics.OPERATIONS.labels("pause", "ok").inc()
        metrics.log_event(self.log, "pause", outcome="ok", state=final.value, reason=op.reason,
                          seconds=round(seconds, 3), kernels=len(op.kernels),
                          snapshots=[self.state.kernel(k).snapshot_id for k in op.kernels])

    def _cancelled(self) -> None:
        message = "pause cancelled, nothing was released"
        self.state.move_kernels(self.op.kernels, State.RUNNING, message)
        self.state.move(State.RUNNING, message)
        metrics.OPERATIONS.labels("pause", "cancelled").inc()
        metrics.log_event(self.log, "pause", outcome="cancelled", reason=self.op.reason)

    def _back_to_running(self, stage: str, exc: BaseException) -> None:
        message = f"{stage} failed, nothing was released: {exc}"
        self.state.move_kernels(self.op.kernels, State.RUNNING, message)
        self.state.move(State.RUNNING, message)
        self.state.note_failure(stage, message)
        metrics.record_failure(self.log, stage, exc, message)

    async def _forget_record(self) -> None:
        """Put the stored record back as it was before this pause."""
        try:
            if self.previous is None:
                await asyncio.to_thread(self.records.delete)
            else:
                await asyncio.to_thread(self.records.write, self.previous)
        except GkeResumeError as exc:  # the kernels still run; a later resume restores the pause
            self.log.error("gkeresume: could not delete the paused record: %s", exc)


def _uncancel() -> None:
    """The pause handles its cancellation itself: later awaits must not see it pending."""
    task = asyncio.current_task()
    if task is not None and hasattr(task, "uncancel"):  # Python 3.11+
        task.uncancel()


class ShutdownCheckpoint(PauseOperation):
    """The pause run when the server stops (SIGTERM): checkpoint and record, release nothing
    (the platform is already taking the pod away). Every kernel of ``op`` (the idle ones) is
    saved at once, within the one budget; a kernel that fails is listed in the record's
    ``not_saved`` with its reason (as are ``not_saved`` given: the busy ones), the others are
    kept. Only when none could be saved does the checkpoint fail. It never reads blobs back in
    full (``verify_mode`` metadata): the platform's grace period is short."""

    verify_mode = "metadata"
    waits_for_cells = False  # its kernels were idle; a busy one is listed, never waited for

    def __init__(self, op: Operation, *, not_saved: list[dict[str, Any]], **parts: Any):
        super().__init__(op, name=None, record=True, **parts)
        self.not_saved = list(not_saved)

    async def save_all(self) -> tuple[list[PausedKernel], int]:
        notebooks = await self.gateway.notebooks()

        async def save(kid: str) -> tuple[PausedKernel, int] | None:
            try:
                item = await self._checkpoint(kid, notebooks.get(kid))
                return item, await self._verify(item)
            except Exception as exc:  # one kernel's failure must not cost the others
                self.not_saved.append({"kernel_id": kid, "notebook": notebooks.get(kid),
                                       "reason": f"{type(exc).__name__}: {exc}"})
                return None

        saved = [r for r in await asyncio.gather(*(save(k) for k in self.op.kernels)) if r]
        if not saved:
            raise GkeResumeError("no kernel could be saved: " + "; ".join(
                f"{n['notebook'] or n['kernel_id']}: {n['reason']}" for n in self.not_saved))
        return [item for item, _ in saved], max(gpus for _, gpus in saved)
