"""A resume: bring a workspace's kernels back from their snapshots.

Planning first (``items_from_record`` or ``item_for_snapshot``: one ``ResumeItem`` per kernel),
then ``ResumeOperation.run``: a kernel for each item in turn (the notebook's session, reused or
created, unless one was named; a kernel started for it gets the snapshot's string hash seed, a
reused one keeps its own), each ``restoring`` (one kernel call, unless ``files-only``) as
soon as it started, while the next one starts; ``ready`` when all came back; a resume from the
paused record then deletes the record. While the kernels start, ``read_ahead``
(``read_ahead.read_ahead``, in a worker thread) brings the blobs of a local store into the page
cache, so the kernel start and the first reads overlap.

Invariants:

- The paused record is deleted only when every kernel is ``ready``; after a failure it keeps
  the kernels that did not come back (a pause then saves the others anew and keeps those).
- A resume is recorded as the advisor's event when it is ready (a ``files-only`` one as activity:
  it restores nothing); recording never fails the resume.
- Any failure moves the workspace and every active kernel of the operation to ``failed`` with
  the reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from logging import Logger

from . import metrics
from .advisor import Event
from .errors import GkeResumeError, InvalidInputError
from .events import EventLog
from .kernels import KernelGateway
from .notebook_sessions import Claim
from .paused_record import PausedRecord, PausedRecords
from .snapshot import SigningKey, SnapshotStore, load_manifest, resolve
from .state import Operation, WorkspaceState, server_phase
from .states import State

MODES = ("full", "partial", "files-only")


@dataclass
class ResumeItem:
    """One kernel to bring back: into ``kernel_id`` or a kernel started for ``notebook``.
    ``saved``: the names its snapshot holds, when the paused record says (``None``: unknown).
    ``hash_seed``: the snapshot's ``PYTHONHASHSEED``, which a kernel started for it gets
    (``None``: random or not recorded; the notebook's own seed then)."""

    snapshot_id: str
    notebook: str | None
    kernel_name: str | None
    kernel_id: str | None = None
    saved: list[str] | None = None
    hash_seed: str | None = None

    def only(self, names: list[str] | None) -> list[str] | None:
        """The names of ``names`` to restore here: one ``only`` list serves every kernel of the
        paused record, each restores those its snapshot holds (all of them when not known)."""
        if names is None or self.saved is None:
            return names
        return [n for n in names if n in self.saved]


def items_from_record(record: PausedRecord, only: list[str] | None) -> list[ResumeItem]:
    """One item per kernel of the paused record. A partial resume: every name of ``only`` must
    be saved by some kernel (when the record says what each saved)."""
    items = [ResumeItem(k.snapshot_id, k.notebook, k.kernel_name, saved=k.saved,
                        hash_seed=k.hash_seed) for k in record.kernels]
    if only is not None and all(item.saved is not None for item in items):
        held = {name for item in items for name in item.saved or []}
        missing = [n for n in only if n not in held]
        if missing:
            raise InvalidInputError(f"no paused snapshot holds {', '.join(map(repr, missing))}; "
                                    f"saved: {', '.join(sorted(held)) or 'nothing'}")
    return items


def item_for_snapshot(store: SnapshotStore, key: SigningKey, reference: str,
                      kernel: str | None) -> ResumeItem:
    """The item of one named snapshot (blocking: reads the manifest)."""
    snapshot_id = resolve(store, reference, key)
    manifest = load_manifest(store, snapshot_id, key)
    return ResumeItem(snapshot_id, manifest.notebook, None, kernel, hash_seed=manifest.hash_seed)


class ResumeOperation:
    """One resume of ``items``; ``run`` once, as the operation's task."""

    def __init__(self, op: Operation, *, state: WorkspaceState, gateway: KernelGateway,
                 records: PausedRecords, events: EventLog, log: Logger, items: list[ResumeItem],
                 only: list[str] | None, from_record: bool, timeout: float,
                 read_ahead: Callable[[list[str]], object] | None = None):
        self.op = op
        self.state = state
        self.gateway = gateway
        self.records = records
        self.events = events
        self.log = log
        self.items = items
        self.only = only
        self.from_record = from_record
        self.timeout = timeout
        self.read_ahead = read_ahead  # blocking; a failure only loses the overlap
        self._restored: set[int] = set()  # indices of the items that came back
        self._bytes_read = 0  # what the kernels read, as their results say (for the estimates)
        self._ahead: asyncio.Future | None = None  # the read-ahead in its worker thread

    async def run(self) -> None:
        op = self.op
        if self.read_ahead is not None and op.mode != "files-only":
            self._ahead = asyncio.ensure_future(asyncio.to_thread(self._read_ahead_quietly))
        try:
            kids = await self._start_and_restore()
            self.state.move_kernels([k for k in kids if self.state.kernel(k).machine.active],
                                    State.READY)
            if self.from_record:
                await asyncio.to_thread(self.records.delete)
                _count_released(self.state.paused)
                self.state.set_paused(None)
        except Exception as exc:  # the task's boundary: report every failure as a state
            message = f"resume failed: {exc}"
            self.state.move_kernels(op.kernels, State.FAILED, message, only_active=True)
            if self.from_record:  # before ``failed``, as the event before ``ready`` below
                await self._keep_what_did_not_come_back()
            self.state.move(State.FAILED, message)
            self.state.note_failure("resume", message)
            metrics.record_failure(self.log, "resume", exc, message)
        else:
            seconds = time.time() - op.started  # from the request, as the user waits
            # recorded before ``ready``: a status is never ready with its operation in flight
            # (a files-only resume restores nothing: its time says nothing of a restore)
            await self.events.record(Event(op.started, "activity") if op.mode == "files-only"
                                     else Event(op.started, "resume", seconds=seconds,
                                                bytes=self._bytes_read))
            self.state.move(State.READY)
            self.state.clear_failure()
            metrics.RESUME_SECONDS.observe(seconds)
            metrics.OPERATIONS.labels("resume", "ok").inc()
            metrics.log_event(self.log, "resume", outcome="ok", mode=op.mode,
                              seconds=round(seconds, 3), kernels=len(kids),
                              snapshots=[i.snapshot_id for i in self.items])
        finally:
            self.state.end(op)

    async def _start_and_restore(self) -> list[str]:
        """Start the kernels one after another (in the record's order) and restore each as soon
        as it started: a kernel's restore (its ``import torch``, its reads) overlaps the next
        kernel's start. Every restore started is waited for before a failure is raised, so the
        state and ``_restored`` say what came back."""
        kids: list[str] = []
        restores: dict[int, asyncio.Future] = {}  # item index -> its restore
        try:
            for index, item in enumerate(self.items):
                # the notebook's claim: a lab asking for its session meanwhile waits, then gets
                # this kernel once the restore is in its queue (notebook_sessions)
                claim = await self.gateway.claim(item.notebook)
                try:
                    kids.append(await self._kernel_for(item, kids))
                    if self.op.mode == "files-only":
                        continue
                    if self.state.state != State.RESTORING:
                        self.state.move(State.RESTORING)
                    restores[index] = asyncio.ensure_future(self._restore(item, kids[-1], claim))
                finally:
                    if index not in restores:
                        claim.release()
        finally:
            outcomes = await asyncio.gather(*restores.values(), return_exceptions=True)
            failures = []
            for index, outcome in zip(restores, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    failures.append(outcome)
                else:
                    self._restored.add(index)
        if failures:
            raise failures[0]
        return kids

    def _read_ahead_quietly(self) -> None:
        """The read-ahead, whose failure only loses the overlap (the kernel reads anyway)."""
        try:
            self.read_ahead([item.snapshot_id for item in self.items])
        except Exception as exc:
            self.log.debug("gkeresume: read-ahead failed: %s", exc)

    async def _keep_what_did_not_come_back(self) -> None:
        """After a failed resume from the record: the record keeps only the kernels that did
        not come back (those that did run again, and a pause saves them anew)."""
        record = self.state.paused
        if record is None or not self._restored:
            return
        remaining = record.keeping(set(range(len(record.kernels))) - self._restored)
        if not remaining.kernels:
            return
        try:
            await asyncio.to_thread(self.records.write, remaining)
        except GkeResumeError as exc:  # the stored record still names them all: nothing lost
            self.log.error("gkeresume: could not shorten the paused record: %s", exc)
            return
        self.state.set_paused(remaining)

    async def _kernel_for(self, item: ResumeItem, taken: list[str]) -> str:
        """The kernel ``item`` goes into, at ``waiting_for_resources``. ``taken``: the kernels
        of the items before it. A record that names a notebook twice (written before a notebook
        had one kernel) brings the second snapshot back into a kernel of its own, with no
        notebook, so nothing is lost and the next pause records the notebook once."""
        kid = item.kernel_id or await self.gateway.start_for(item.notebook, item.kernel_name,
                                                             hash_seed=item.hash_seed)
        notebook = item.notebook
        if kid in taken and item.kernel_id is None:
            kid, notebook = await self.gateway.start_for(None, item.kernel_name,
                                                         hash_seed=item.hash_seed), None
        self.state.add_kernel(kid, notebook, State.PAUSED)
        if item.kernel_id is None:  # until the kernel answers with its own progress
            self.state.set_progress(kid, server_phase("starting"))
        if self.state.kernel(kid).machine.state != State.WAITING_FOR_RESOURCES:
            self.state.move_kernels([kid], State.WAITING_FOR_RESOURCES)
        if kid not in self.op.kernels:
            self.op.kernels.append(kid)
        return kid

    async def _restore(self, item: ResumeItem, kid: str, claim: Claim) -> None:
        """Restore ``item`` into ``kid``. Once the request is in the kernel's queue (a cell
        sent after it runs after the restore) the kernel is ``restoring`` and the notebook's
        ``claim`` is released (also when the restore ended without sending one)."""

        def sent() -> None:
            self.state.move_kernels([kid], State.RESTORING)
            claim.release()

        try:
            names = item.only(self.only)
            if names == []:  # a partial resume that wants nothing of this snapshot
                return
            reply = await self.gateway.restore(
                kid, reference=item.snapshot_id, only=names,
                notebook=self.state.kernel(kid).notebook, timeout=self.timeout,
                on_progress=lambda p: self.state.set_progress(kid, p), on_sent=sent)
        finally:
            claim.release()
        self.state.set_result(kid, item.snapshot_id, reply.data)
        read = reply.data.get("bytes_read")
        read = read if isinstance(read, int) and read > 0 else 0
        self._bytes_read += read
        # the kernel's own reports come on IOPub, which a fast restore can outrun (its request
        # is sent before IOPub is followed): the reply says how the restore ended
        seconds = reply.data.get("seconds")
        seconds = float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else 0.0
        self.state.set_progress(kid, {**server_phase("done"), "done_bytes": read,
                                      "total_bytes": read, "seconds": seconds,
                                      "rate": read / seconds if seconds else 0.0})
        self.state.move_kernels([kid], State.READY)


def _count_released(record: PausedRecord | None) -> None:
    paused_at = record.paused_since() if record and record.gpus else None
    if record is None or paused_at is None:
        return
    seconds = (datetime.now(timezone.utc) - paused_at).total_seconds()
    metrics.ACCELERATOR_SECONDS_RELEASED.inc(max(seconds, 0) * record.gpus)
