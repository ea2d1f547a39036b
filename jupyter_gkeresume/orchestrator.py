"""Pause and resume of a workspace's kernels: the state machine, in one place.

One ``Orchestrator`` per server. Call order: ``ensure_started()`` (reads the paused record once,
may auto-resume), then any number of ``start_pause`` / ``start_resume`` (each validates at once,
raising a ``GkeResumeError`` the handlers map to 4xx, then runs in a background task),
``status()`` at any time, ``shutdown()`` when the server stops.

Invariants:

- At most one operation (pause or resume) is in flight. A second resume joins the running one
  (single flight: one restore, every caller sees its status); anything else gets ``ConflictError``.
- Pause: every kernel checkpoints, every snapshot is read back and verified here (signature,
  every blob present with its size), the paused record is written, and only then does the backend
  release; the kernels stop after that. Any failure before the release call leaves the kernels as
  they were and the state back at ``running``; a failed release also removes the paused record.
- Resume from the paused record deletes the record only when every kernel is ``ready``.
- The advisor's events (``events.EventLog``): a pause that writes the paused record is recorded
  before the release (a released server may not live to record it), a resume when it is ready;
  recording never fails either. ``own_activity_until`` marks the end of our own kernel traffic.
"""

from __future__ import annotations

import asyncio
import json
import os
import posixpath
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from logging import Logger
from typing import Any

from tornado import web

from . import metrics
from .advisor import Event
from .errors import (
    ConflictError,
    GkeResumeError,
    IntegrityError,
    InvalidInputError,
    KernelCallError,
    KernelNotFoundError,
    SnapshotNotFoundError,
)
from .events import EventLog
from .kernel_client import call_kernel
from .release import ReleaseBackend
from .snapshot import (
    SigningKey,
    SnapshotStore,
    environment_fingerprint,
    list_snapshots,
    load_manifest,
    load_signing_key,
    resolve,
)
from .snapshot.catalog import summarize
from .snapshot.format import validate_snapshot_id, validate_snapshot_name
from .snapshot.store import _safe_url
from .snapshot.verify import verify_snapshot
from .states import State, StateMachine, check_transition

MODES = ("full", "partial", "files-only")
KERNEL_GONE = (KeyError, web.HTTPError)  # jupyter_server's kernel manager raises a 404 HTTPError
RECORD_VERSION = 1
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


class Orchestrator:
    """Pause/resume for one server. ``settings`` is the ``GkeResume`` configurable."""

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

    # -- startup ----------------------------------------------------------------------------
    async def ensure_started(self) -> None:
        """Read the paused record once (and auto-resume if configured); later calls wait on it."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._startup())
        await asyncio.shield(self._started)

    async def _startup(self) -> None:
        try:
            raw = await asyncio.to_thread(self.store.read_record, "paused")
            record = _parse_record(raw) if raw is not None else None
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

    # -- pause ------------------------------------------------------------------------------
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
                paused = self._make_record(op.reason, items, gpus) if record else None
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

    def _make_record(self, reason: str | None, items: list[dict[str, Any]],
                     gpus: int) -> dict[str, Any]:
        return {"version": RECORD_VERSION, "workspace": self.store.workspace,
                "paused_at": _utc_now(), "reason": reason, "release_backend": self.backend.name,
                "gpus": gpus, "kernels": items}

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

    # -- resume -----------------------------------------------------------------------------
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
            path = _safe_notebook_path(item.notebook)
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

    # -- helpers ----------------------------------------------------------------------------
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


def _utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def _safe_notebook_path(path: str) -> str:
    """A notebook path from the store, checked before it reaches the sessions API."""
    norm = posixpath.normpath(path)
    if os.path.isabs(norm) or norm.startswith("..") or "\\" in norm or "\x00" in norm:
        raise InvalidInputError(f"paused record names an unsafe notebook path: {path!r}")
    return norm


def _parse_record(raw: bytes) -> dict[str, Any]:
    """The paused record, strictly: anything else is a ``InvalidInputError`` naming the field."""
    try:
        record = json.loads(raw)
    except ValueError as exc:
        raise InvalidInputError(f"paused record is not JSON: {exc}") from None
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
        raise InvalidInputError("paused record has an unknown version")
    kernels = record.get("kernels")
    if not isinstance(kernels, list) or not all(
        isinstance(k, dict) and isinstance(k.get("snapshot_id"), str) for k in kernels
    ):
        raise InvalidInputError("paused record: 'kernels' is not a list of kernel entries")
    for k in kernels:
        validate_snapshot_id(k["snapshot_id"])
        saved = k.get("saved", [])
        if not (isinstance(saved, list) and all(isinstance(n, str) for n in saved)):
            raise InvalidInputError("paused record: 'saved' is not a list of names")
        if k.get("notebook") is not None:
            _safe_notebook_path(k["notebook"])
    return record
