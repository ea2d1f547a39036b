"""A pause: checkpoint every kernel, verify, record, release, stop.

``PauseOperation.run`` reads top to bottom: (a queued pause) wait for running cells, ask the
connected labs to save their documents (``lab_saves``, bounded), hold every kernel (from then on
each refuses cells: the consistent cut), checkpoint each kernel (``KernelGateway``), read
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
- The documents are saved before the hold, whatever started the pause; what the labs could not
  save (or a lab that did not answer) is in ``op.documents`` and the record's ``documents``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from logging import Logger
from typing import Any

from . import metrics
from .advisor import Event
from .errors import GkeResumeError
from .events import EventLog
from .kernels import KernelGateway
from .lab_saves import SaveReport
from .paused_record import PausedKernel, PausedRecord, PausedRecords
from .release import ReleaseBackend
from .snapshot import SigningKey, SnapshotStore
from .snapshot.format import Manifest
from .snapshot.manifests import scan_manifests
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
                 previous: PausedRecord | None = None,
                 save_documents: Callable[[], Awaitable[SaveReport]] | None = None):
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
        self.save_documents = save_documents  # the labs save their documents (lab_saves)
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
                if self.save_documents is not None:
                    op.documents = (await self.save_documents()).to_dict()
                await self._hold_all()  # the cut: no cell runs in these kernels from now on
                items, gpus = await self.save_all()
                paused = self._paused_record(items, gpus, self.not_saved) if self.record else None
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

    def _paused_record(self, items: list[PausedKernel], gpus: int,
                       not_saved: list[dict[str, Any]]) -> PausedRecord:
        """The record of ``items`` (and, after a failed resume, of what it did not bring
        back)."""
        if self.previous is not None:
            items = self.previous.carried_into(items)
        return PausedRecord.new(self.gateway.workspace, self.op.reason, self.backend.name, gpus,
                                items, not_saved, self.op.documents, self.op.idle)

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
                            reply.skipped, reply.hash_seed, reply.modules)

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
                          snapshots=[self.state.kernel(k).snapshot_id for k in op.kernels],
                          documents=op.documents)

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
    kept. Only when none could be saved does the checkpoint fail (and leaves no record). It
    never reads blobs back in full (``verify_mode`` metadata): the platform's grace period is
    short.

    The platform may SIGKILL the pod at any moment (a spot node gives about 15 s), so the record
    is written before the first kernel starts (every kernel ``pending``: ``not_saved`` with the
    reason ``PENDING``) and again as each kernel's snapshot commits and verifies; the last write
    is the pause's own. A kill leaves a record naming every kernel recorded so far; one whose
    snapshot committed after the last write is found by ``complete_interrupted`` at the next
    start."""

    verify_mode = "metadata"
    waits_for_cells = False  # its kernels were idle; a busy one is listed, never waited for

    def __init__(self, op: Operation, *, not_saved: list[dict[str, Any]], **parts: Any):
        super().__init__(op, name=None, record=True, **parts)
        self.not_saved = list(not_saved)
        self._saved: list[tuple[PausedKernel, int]] = []  # (item, gpus) in commit order
        self._pending: dict[str, dict[str, Any]] = {}  # kernel id -> its not_saved entry
        self._paused_at: str | None = None  # every write keeps the first one's time

    def _paused_record(self, items: list[PausedKernel], gpus: int,
                       not_saved: list[dict[str, Any]]) -> PausedRecord:
        """As the pause's, stamped when the first record was written (``complete_interrupted``
        looks for snapshots taken since)."""
        record = super()._paused_record(items, gpus, not_saved)
        self._paused_at = self._paused_at or record.paused_at
        return replace(record, paused_at=self._paused_at)

    async def save_all(self) -> tuple[list[PausedKernel], int]:
        notebooks = await self.gateway.notebooks()
        self._pending = {kid: {"kernel_id": kid, "notebook": notebooks.get(kid),
                               "reason": PENDING} for kid in self.op.kernels}
        writes = asyncio.Lock()  # one write at a time, each with every kernel committed so far
        await self._write_progress(writes)

        async def save(kid: str) -> None:
            try:
                item = await self._checkpoint(kid, notebooks.get(kid))
                gpus = await self._verify(item)
            except Exception as exc:  # one kernel's failure must not cost the others
                self.not_saved.append({**self._pending.pop(kid),
                                       "reason": f"{type(exc).__name__}: {exc}"})
                return
            del self._pending[kid]
            self._saved.append((item, gpus))
            await self._write_progress(writes)

        await asyncio.gather(*(save(k) for k in self.op.kernels))
        if not self._saved:
            await self._forget_record()
            raise GkeResumeError("no kernel could be saved: " + "; ".join(
                f"{n['notebook'] or n['kernel_id']}: {n['reason']}" for n in self.not_saved))
        return [item for item, _ in self._saved], max(gpus for _, gpus in self._saved)

    async def _write_progress(self, writes: asyncio.Lock) -> None:
        """Store the record as it stands; a failed write is logged (the next one, or the
        pause's own, tries again)."""
        async with writes:
            record = self._paused_record(
                [item for item, _ in self._saved], max((g for _, g in self._saved), default=0),
                [*self.not_saved, *self._pending.values()])
            try:
                await asyncio.to_thread(self.records.write, record)
            except GkeResumeError as exc:
                self.log.warning("gkeresume: shutdown checkpoint: record not updated: %s", exc)


PENDING = "being saved when the server stopped"
NOT_COMMITTED = "the server stopped before its snapshot was committed"


def complete_interrupted(record: PausedRecord, store: SnapshotStore,
                         key: Callable[[], SigningKey]) -> PausedRecord | None:
    """The record of a shutdown checkpoint that was killed, completed: each ``PENDING`` kernel
    whose snapshot did commit (a verified manifest of its notebook, reason ``shutdown``, taken
    since the record's ``paused_at``) joins the kernels; the others are ``NOT_COMMITTED``.
    ``None`` when no kernel is left to resume. A record without pending kernels is returned as
    it is, without reading anything (``key`` is called only when needed). Blocking (reads
    manifests): run it in a thread."""
    pending = [n for n in record.not_saved if n.get("reason") == PENDING]
    if not pending:
        return record
    since = record.paused_since()
    committed: dict[str, Manifest] = {}  # notebook -> the newest such manifest
    for stored in scan_manifests(store, key(), newest_first=True) if since else ():
        manifest = stored.manifest
        if (stored.verified and manifest is not None and manifest.reason == "shutdown"
                and manifest.notebook and _taken_since(manifest, since)):
            committed.setdefault(manifest.notebook, manifest)
    kernels, not_saved = list(record.kernels), [n for n in record.not_saved if n not in pending]
    for entry in pending:
        manifest = committed.get(entry.get("notebook"))
        if manifest is None:
            not_saved.append({**entry, "reason": NOT_COMMITTED})
        else:
            kernels.append(PausedKernel(manifest.snapshot_id, entry.get("kernel_id"), None,
                                        manifest.notebook, manifest.total_bytes, 0,
                                        manifest.saved_names, hash_seed=manifest.hash_seed))
    return replace(record, kernels=kernels, not_saved=not_saved) if kernels else None


def _taken_since(manifest: Manifest, since: datetime) -> bool:
    try:
        return datetime.fromisoformat(manifest.created.replace("Z", "+00:00")) >= since
    except (ValueError, TypeError):  # an unreadable time: not known to be this checkpoint's
        return False
