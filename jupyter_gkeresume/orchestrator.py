"""The server's pause/resume facade: validation, one lock for every operation, status, shutdown.

``Orchestrator`` builds the parts once per server (``WorkspaceState``, ``UserActivity``,
``KernelGateway``, ``PausedRecords``, ``SnapshotVerifier``, ``EventLog``) and hands each
operation exactly the ones it uses (``pause.PauseOperation``, ``pause.ShutdownCheckpoint``,
``resume.ResumeOperation``).

Call order: ``ensure_started()`` (reads the paused record once, may auto-resume), then any number
of ``start_pause`` / ``start_resume`` (each validates at once under the lock, raising a
``GkeResumeError`` the handlers map to 4xx, then runs in a background task), ``status()`` at any
time, ``shutdown()`` when the server stops.

Invariants:

- Every operation start, cancel and destructive call holds ``_lock``: at most one operation is
  in flight. A second resume joins the running one (single flight: one restore, every caller sees
  its status); anything else gets ``ConflictError``.
- A snapshot named by the paused record is not deleted; the paused record is discarded only while
  no operation is in flight.
- A store that cannot be read does not hide the rest of the status: the last snapshot says the
  error.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from logging import Logger
from typing import Any

from . import metrics
from .auto_retention import AutoRetention
from .errors import (
    ConflictError,
    GkeResumeError,
    InvalidInputError,
    KernelNotFoundError,
    SnapshotNotFoundError,
    StoredRecordError,
)
from .events import EventLog
from .idle import UserActivity
from .kernels import KernelGateway
from .lab_saves import LabSaves
from .pause import PauseOperation, ShutdownCheckpoint, SnapshotVerifier, complete_interrupted
from .paused_record import PausedRecord, PausedRecords
from .printable import printable
from .read_ahead import read_ahead
from .release import ReleaseBackend
from .resume import MODES, ResumeOperation, item_for_snapshot, items_from_record
from .server_settings import ServerSettings, SettingsRecords, parse_changes
from .snapshot import (
    SigningKey,
    SnapshotStore,
    environment_fingerprint,
    list_snapshots,
    load_signing_key,
)
from .snapshot.catalog import summarize
from .snapshot.format import SNAPSHOT_ID_RE, validate_snapshot_id, validate_snapshot_name
from .snapshot.manifests import newest_verified
from .snapshot.store import _safe_url
from .state import Operation, WorkspaceState
from .states import State

WHEN_BUSY = ("queue", "refuse")


class Orchestrator:
    """Pause/resume for one server. ``settings`` is the ``GkeResume`` configurable."""

    def __init__(self, *, settings: Any, kernel_manager: Any, session_manager: Any,
                 backend: ReleaseBackend, log: Logger, store: SnapshotStore | None = None,
                 gateway: KernelGateway | None = None, verifier: SnapshotVerifier | None = None,
                 terminals: Callable[[], list[str]] = list):
        self.settings = settings
        self.terminals = terminals  # names of the server's open terminals (no snapshot has them)
        self.backend = backend
        self.log = log
        self.store = store or SnapshotStore(settings.store_url, settings.workspace_id)
        self.state = WorkspaceState()
        self.activity = UserActivity()  # what a person did: the idle pause's clock
        self.gateway = gateway or KernelGateway(kernel_manager, session_manager,
                                                store_url=settings.store_url,
                                                workspace=self.store.workspace,
                                                on_cell=self.state.cell_started,
                                                on_activity=lambda _: self.activity.touch("cell"),
                                                paused=lambda: self.state.paused)
        self.records = PausedRecords(self.store, lambda: self.key)
        self.verifier = verifier or SnapshotVerifier(self.store, lambda: self.key,
                                                     mode=settings.verify)
        self.events = EventLog(self.store, log)
        self.lab_saves = LabSaves()  # every pause asks the connected labs to save first
        self._lock = asyncio.Lock()
        self.retention = AutoRetention(
            self.store, lambda: self.key, settings.retention_policy(),
            grace_seconds=settings.gc_grace_hours * 3600, lock=self._lock, state=self.state,
            log=log)
        self._key: SigningKey | None = None
        self._here: dict[str, Any] | None = None
        self._started: asyncio.Future | None = None
        self._last_snapshot: dict[str, Any] | None = None
        self._last_snapshot_stale = True
        self.settings_records = SettingsRecords(self.store, lambda: self.key)
        self._server_settings: ServerSettings | None = None

    @property
    def key(self) -> SigningKey:
        if self._key is None:
            self._key = load_signing_key(workspace=self.store.workspace)
        return self._key

    @property
    def here(self) -> dict[str, Any]:
        if self._here is None:
            self._here = environment_fingerprint()
        return self._here

    # -- startup ----------------------------------------------------------------------------
    async def ensure_started(self) -> None:
        """Read the paused record once (and auto-resume if configured); later calls wait on it."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._startup())
        await asyncio.shield(self._started)

    async def _startup(self) -> None:
        try:
            record = await asyncio.to_thread(self._read_record)
        except StoredRecordError as exc:  # planted or corrupt: it names nothing to restore
            record = None
            self.log.warning("gkeresume: the paused record is ignored: %s (a pause writes a new "
                             "one; DELETE /gkeresume/api/paused removes it)", printable(exc))
            self.state.set_record_ignored(printable(exc))
        except GkeResumeError as exc:  # unreachable: never "not paused", a pause would overwrite it
            message = (f"the paused record cannot be read ({exc}); nothing that could change it "
                       "runs until it can (retried on every request; a corrupt record must be "
                       "fixed or removed in the store)")
            self.state.set_record_error(message)
            self.state.note_failure("startup", message)
            metrics.record_failure(self.log, "startup", exc, message)
            self._started = None  # the store may come back: the next request tries again
            return
        self.state.set_record_error(None)
        self.state.clear_failure()
        try:  # read now: the shutdown checkpoint must not spend its grace reading the store
            await self._current_settings()
        except GkeResumeError as exc:
            self.log.warning("gkeresume: settings unreadable (%s): the defaults apply",
                             printable(exc))
        if record is None:
            return
        self.state.set_paused(record)
        # while the record was unreadable nothing could start, so the workspace is running
        self.state.move(State.PAUSED, f"paused {record.paused_at} ({record.reason})")
        self.log.info("gkeresume: found a paused record from %s", printable(record.paused_at))
        if self.settings.auto_resume:
            await self.start_resume(None, "full", None, None)

    def _read_record(self) -> PausedRecord | None:
        """The stored paused record; one a killed shutdown checkpoint left is completed
        (``pause.complete_interrupted``) and stored so. Blocking."""
        record = self.records.read()
        completed = complete_interrupted(record, self.store, lambda: self.key) if record else None
        if completed is not record:
            if completed is None:
                self.records.delete()
            else:
                self.records.write(completed)
            self.log.info("gkeresume: completed the record of an interrupted shutdown "
                          "checkpoint: %s", "nothing was committed" if completed is None else
                          f"{len(completed.kernels)} kernel(s) to resume")
        return completed

    def kernel_started(self, kid: str) -> None:
        """A kernel started (``kernels.guard_kernel_starts``): follow its cells; a person opened
        a notebook (a resume's own starts are followed by its end, which restarts the idle
        clock anyway)."""
        self.gateway.watch_cells(kid)
        self.activity.touch("kernel")

    # -- operations -------------------------------------------------------------------------
    async def start_pause(self, kernel_ids: list[str] | None = None, *, release: bool = True,
                          name: str | None = None, reason: str = "user",
                          when_busy: str = "refuse",
                          idle: dict[str, Any] | None = None) -> Operation:
        """Validate, then pause in the background; ``release`` also writes the paused record,
        calls the backend and stops the kernels. ``when_busy`` (``WHEN_BUSY``): ``"queue"``
        waits for running cells (other kernels keep running until the pause itself starts),
        ``"refuse"`` raises ``ConflictError`` for a busy kernel. ``idle``: an idle pause's
        note (``IdleWatcher.note``), kept in the paused record."""
        if when_busy not in WHEN_BUSY:
            raise InvalidInputError(f"when_busy must be one of {', '.join(WHEN_BUSY)}, not "
                                    f"{when_busy!r}")
        async with self._lock:
            ids = self._pause_kernels(kernel_ids, release=release, name=name,
                                      allow_busy=when_busy == "queue")
            op = Operation("pause", reason=reason, release=release, kernels=ids, idle=idle,
                           cancellable=True, estimate_seconds=await self.events.estimate("pause"))
            self.state.begin(op, State.PAUSING, State.PAUSING, reason)
            return self._launch(op, PauseOperation(
                op, **self._pause_parts(), name=name, record=release,
                timeout=self.settings.kernel_call_timeout,
                save_documents=lambda: self.lab_saves.save_documents(
                    self.settings.lab_save_timeout)))

    def _pause_kernels(self, kernel_ids: list[str] | None, *, release: bool, name: str | None,
                       allow_busy: bool) -> list[str]:
        """The kernels a pause takes, or the reason it cannot start."""
        self._refuse_if_busy()
        if name is not None:
            validate_snapshot_name(name)
        live = self.gateway.live_ids()
        ids = list(dict.fromkeys(kernel_ids)) if kernel_ids is not None else list(live)
        unknown = [k for k in ids if k not in live]
        if unknown:
            raise KernelNotFoundError(f"no running kernel {unknown[0]!r}")
        if release:  # the workspace goes: the server decides the set, never the caller
            ids += [k for k in live if k not in ids]
        ids = [k for k in ids if not self._still_in_record(k)]
        if not ids:
            raise ConflictError("there is no kernel to pause")
        busy = self.gateway.busy(ids)
        if busy and not allow_busy:
            raise ConflictError(f"kernel {busy[0]} is busy running a cell: wait for it or "
                                "interrupt it, then pause (or pause with when_busy 'queue')")
        if self.state.state == State.PAUSED:
            raise ConflictError("this workspace is already paused: resume it or discard the "
                                "paused record first")
        return ids

    def _still_in_record(self, kid: str) -> bool:
        """A kernel a failed resume started for a notebook it did not bring back: the paused
        record's snapshot of that notebook is what counts, not this kernel's empty state."""
        entry, record = self.state.kernel(kid), self.state.paused
        return (record is not None and entry.machine.state == State.FAILED
                and any(k.notebook == entry.notebook for k in record.kernels))

    def _pause_parts(self) -> dict[str, Any]:
        return {"state": self.state, "gateway": self.gateway, "records": self.records,
                "verifier": self.verifier, "backend": self.backend, "events": self.events,
                "log": self.log, "previous": self.state.paused}

    async def release_without_kernels(self, reason: str) -> bool:
        """Give the pod back when the workspace holds no kernel (the idle pause of a server
        with a tab open and no kernel, or of a fresh pod whose paused record nobody resumed):
        nothing to checkpoint, so no snapshot, and the paused record (if any) stays as it is
        for the next pod. Under the lock, only while no operation runs, the workspace is
        ``running``, ``ready`` or ``paused``, no kernel lives, and the backend gives a pod back
        (``none`` frees nothing without kernels). True when the backend released; its
        ``ReleaseError`` propagates (nothing changed here)."""
        async with self._lock:
            if (self.state.operation or self.gateway.live_ids() or not self.backend.releases_pod
                    or self.state.state not in (State.RUNNING, State.READY, State.PAUSED)):
                return False
            await self.backend.release()
        metrics.OPERATIONS.labels("release", "ok").inc()
        metrics.log_event(self.log, "release", outcome="released", reason=reason, kernels=0)
        return True

    async def start_resume(self, snapshot: str | None, mode: str, only: list[str] | None,
                           kernel: str | None) -> tuple[Operation, bool]:
        """Validate, then resume in the background; returns ``(operation, joined)``."""
        async with self._lock:
            running = self.state.operation
            if running and running.kind == "resume":
                return running, True
            self._refuse_if_busy()
            if mode not in MODES:
                raise InvalidInputError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
            if (mode == "partial") != bool(only):
                raise InvalidInputError("'only' (a non-empty list of names) goes with mode "
                                        "'partial', and only with it")
            if kernel is not None and snapshot is None:
                raise InvalidInputError("'kernel' needs 'snapshot'")
            if snapshot not in (None, "latest") and not SNAPSHOT_ID_RE.fullmatch(snapshot):
                validate_snapshot_name(snapshot)  # in full: no stray whitespace either
            if kernel is not None and kernel not in self.gateway.live_ids():
                raise KernelNotFoundError(f"no running kernel {kernel!r}")
            if snapshot is None:
                if self.state.paused is None:
                    raise ConflictError("nothing is paused here: give a 'snapshot' to restore")
                items = items_from_record(self.state.paused, only)
            else:
                items = [await asyncio.to_thread(item_for_snapshot, self.store, self.key,
                                                 snapshot, kernel)]
            op = Operation("resume", mode=mode, kernels=[i.kernel_id for i in items if i.kernel_id],
                           estimate_seconds=await self._resume_estimate(snapshot is None))
            self.state.begin(op, State.WAITING_FOR_RESOURCES)
            return self._launch(op, ResumeOperation(
                op, state=self.state, gateway=self.gateway, records=self.records,
                events=self.events, log=self.log, items=items, only=only,
                from_record=snapshot is None, timeout=self.settings.kernel_call_timeout,
                read_ahead=functools.partial(read_ahead, self.store, lambda: self.key,
                                             log=self.log))), False

    async def cancel(self) -> Operation:
        """Cancel the pause in flight (only before it writes the paused record): the holds are
        lifted, the kernels stay as they were, the state goes back to ``running``."""
        async with self._lock:
            op = self.state.operation
            if op is None or op.kind != "pause":
                raise ConflictError("there is no pause in flight to cancel")
            if not op.cancellable or op.task is None:
                raise ConflictError(f"the pause is {self.state.state.value}: it can no longer be "
                                    "cancelled")
            op.cancellable = False
            op.task.cancel()
            return op

    def refuse_kernel_start(self) -> str | None:
        """Why no kernel (or session) may start now, or ``None`` (``guard_kernel_starts``)."""
        op = self.state.operation
        if op is not None and op.kind == "pause":
            waiting = op.waiting_for
            queued = "" if waiting is None else (
                f" (queued behind cell {waiting['execution_count'] or '?'} of "
                f"{waiting['notebook'] or waiting['kernel_id']})")
            return (f"the workspace is pausing ({op.id}{queued}): no kernel or session can start "
                    "until the pause completes, fails or is cancelled")
        return None

    def _refuse_if_busy(self) -> None:
        """Refuse while an operation is in flight, or while the paused record is unreadable."""
        if self.state.record_error is not None:
            raise ConflictError(self.state.record_error)
        op = self.state.operation
        if op:
            raise ConflictError(f"a {op.kind} is in flight ({op.id}): wait for it to end"
                                + (" or cancel it" if op.cancellable else ""))

    def _launch(self, op: Operation, operation: PauseOperation | ResumeOperation) -> Operation:
        op.task = asyncio.ensure_future(self._tracked(op, operation.run()))
        return op

    async def _tracked(self, op: Operation, run: Awaitable[None]) -> None:
        try:
            await run
        finally:
            self._last_snapshot_stale = True
            if op.kind == "pause" and op.reason != "shutdown":  # the pod is going: no time
                self.retention.schedule()

    # -- status and snapshots ---------------------------------------------------------------
    async def _resume_estimate(self, whole_record: bool) -> float | None:
        """How long a resume should take (``EventLog.estimate``), sized by the paused record when
        it resumes the whole record (a snapshot's size is not known before it is read)."""
        paused = self.state.paused
        nbytes = paused.bytes_total if whole_record and paused is not None else 0
        return await self.events.estimate("resume", nbytes)

    async def status(self) -> dict[str, Any]:
        notebooks = await self.gateway.notebooks()
        live = set(self.gateway.live_ids())
        self.state.forget_gone(live)
        kernels = []
        for kid in sorted(live | self.state.kernel_ids()):
            self.state.set_notebook(kid, notebooks.get(kid))
            row = self.state.kernel(kid).to_dict()
            kernels.append({**row, **self.gateway.info(kid)})
        resume_estimate = await self._resume_estimate(True) if self.state.paused else None
        return {"workspace": self.store.workspace, "store": _safe_url(self.settings.store_url),
                "release_backend": self.backend.name, **self.state.to_status(),
                "resume_estimate_seconds": resume_estimate,
                "kernels": kernels, "last_snapshot": await self._last_snapshot_or_error(),
                "retention": self.retention.report, "terminals": self.terminals()}

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
        """The newest snapshot that verifies (what ``latest`` means): a planted or tampered
        manifest with a newer id is never shown as the last snapshot."""
        stored = newest_verified(self.store, self.key)
        if stored is None or stored.manifest is None:
            return None
        return summarize(stored.manifest, self.here).to_dict()

    async def snapshots(self) -> list[dict[str, Any]]:
        rows = await asyncio.to_thread(list_snapshots, self.store, self.key, self.here)
        return [row.to_dict() for row in rows]

    # -- destructive calls ------------------------------------------------------------------
    async def delete_snapshot(self, snapshot_id: str) -> None:
        validate_snapshot_id(snapshot_id)
        async with self._lock:
            self._refuse_if_busy()  # a pause may be about to name it in its record
            paused = self.state.paused
            if paused and snapshot_id in paused.snapshot_ids():
                raise ConflictError(f"snapshot {snapshot_id} is part of the paused record: "
                                    "resume or discard the pause first")
            ids = await asyncio.to_thread(self.store.list_snapshot_ids)
            if snapshot_id not in ids:
                raise SnapshotNotFoundError(snapshot_id, ids)
            await asyncio.to_thread(self.store.delete_manifest, snapshot_id)
            self._last_snapshot_stale = True
        metrics.log_event(self.log, "delete", snapshot_id=snapshot_id)

    async def discard_paused(self) -> None:
        """Forget the paused record (the snapshots stay); the workspace becomes ``running``. An
        ignored record (corrupt, unsigned, foreign) is removed from the store the same way."""
        async with self._lock:
            self._refuse_if_busy()
            if self.state.paused is None and self.state.record_ignored is None:
                raise ConflictError("nothing is paused here")
            await asyncio.to_thread(self.records.delete)
            self.state.set_paused(None)
            if self.state.state in (State.PAUSED, State.FAILED):
                self.state.move(State.RUNNING, "paused record discarded")

    # -- runtime settings -------------------------------------------------------------------
    async def settings_view(self) -> dict[str, Any]:
        """The runtime settings: stored ones, else the ``c.GkeResume`` defaults."""
        return (await self._current_settings()).to_dict()

    async def update_settings(self, body: Any) -> dict[str, Any]:
        """Change and store runtime settings (``server_settings.parse_changes``)."""
        changes = parse_changes(body)
        async with self._lock:
            updated = (await self._current_settings()).with_changes(changes)
            await asyncio.to_thread(self.settings_records.write, updated)
            self._server_settings = updated
        return updated.to_dict()

    async def _current_settings(self) -> ServerSettings:
        """The stored settings, read once; a stored record that is not valid (corrupt, unsigned,
        another key or workspace) is logged and the defaults apply until a ``PUT`` replaces it.
        An unreachable store raises (the next call reads again)."""
        if self._server_settings is None:
            defaults = ServerSettings(checkpoint_on_shutdown=self.settings.checkpoint_on_shutdown)
            try:
                self._server_settings = await asyncio.to_thread(self.settings_records.read,
                                                                defaults)
            except StoredRecordError as exc:
                self.log.warning("gkeresume: the settings record is ignored, the defaults apply: "
                                 "%s", printable(exc))
                self._server_settings = defaults
        return self._server_settings

    # -- shutdown ---------------------------------------------------------------------------
    async def shutdown(self, timeout: float) -> str:
        """Checkpoint every kernel that has no committed snapshot before the server stops
        (SIGTERM), unless the runtime setting ``checkpoint_on_shutdown`` is off; returns the
        outcome. A pause in flight is waited for within ``timeout``; what it leaves unsaved (it
        failed, or kernels started while paused) is checkpointed in the time left."""
        deadline = asyncio.get_running_loop().time() + timeout
        # No store read here: the grace may be 1 s (KubeSpawner). The settings read at startup
        # or last changed decide; never read (the store was down): the trait, on the safe side.
        known = self._server_settings
        enabled = known.checkpoint_on_shutdown if known else self.settings.checkpoint_on_shutdown
        outcome = await self._shutdown_outcome(deadline) if enabled else (
            "not checkpointed: checkpoint_on_shutdown is off")
        paused = self.state.paused
        metrics.log_event(self.log, "shutdown", outcome=outcome,
                          not_saved=paused.not_saved if paused and outcome == "checkpointed" else [])
        return outcome

    async def _shutdown_outcome(self, deadline: float) -> str:
        loop = asyncio.get_running_loop()
        op = self.state.operation
        if op is not None and op.kind == "resume":
            return "resume in flight"
        if self.state.state == State.RELEASING:  # every kernel is in the record: nothing to wait
            return "already paused: releasing"  # for (the release may be what stops us)
        if op is not None and op.task is not None:  # a pause: let it end, then see what is left
            await asyncio.wait([op.task], timeout=deadline - loop.time())
            if self.state.operation is not None:
                return "pause still in flight when the budget ran out"
        unsaved = await self._unsaved_kernels()
        if not unsaved:
            return "already paused" if self.state.state == State.PAUSED else (
                "nothing to checkpoint")
        left = deadline - loop.time()
        if left <= 0:
            return f"failed: no time left to checkpoint {len(unsaved)} kernel(s)"
        try:
            checkpoint = await self._start_shutdown_checkpoint(unsaved, left)
            await asyncio.wait([checkpoint.task], timeout=left + 5)
        except GkeResumeError as exc:
            return f"failed: {exc}"
        return "checkpointed" if self.state.state == State.PAUSED else (
            f"failed: {self.state.reason}")

    async def _unsaved_kernels(self) -> list[str]:
        """The live kernels the paused record does not stand for: every one while nothing is
        paused; while paused, those of notebooks the record does not name (a kernel of a paused
        notebook is its fresh stand-in: the record's snapshot is what comes back)."""
        live, record = self.gateway.live_ids(), self.state.paused
        if self.state.state != State.PAUSED or record is None:
            return [k for k in live if not self._still_in_record(k)]
        notebooks = await self.gateway.notebooks()
        recorded = {n for k in record.kernels for n in (k.notebook, k.kernel_id) if n}
        return [k for k in live if k not in recorded and notebooks.get(k) not in recorded]

    async def _start_shutdown_checkpoint(self, ids: list[str], timeout: float) -> Operation:
        """``ids`` at once, the idle ones; a busy one is listed as not saved, never waited for
        (the platform's grace period is short: 1 s by default on KubeSpawner). While paused,
        the new record keeps the paused one's kernels beside these."""
        async with self._lock:
            self._refuse_if_busy()
            busy = set(self.gateway.busy(ids))
            notebooks = await self.gateway.notebooks()
            not_saved = [{"kernel_id": k, "notebook": notebooks.get(k),
                          "reason": "busy running a cell at shutdown: not waited for"}
                         for k in ids if k in busy]
            idle = [k for k in ids if k not in busy]
            if not idle:
                raise ConflictError("every kernel is busy running a cell: nothing was saved")
            op = Operation("pause", reason="shutdown", release=False, kernels=idle)
            self.state.begin(op, State.PAUSING, State.PAUSING, "shutdown")
            return self._launch(op, ShutdownCheckpoint(op, **self._pause_parts(),
                                                       timeout=timeout, not_saved=not_saved))
