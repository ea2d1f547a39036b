"""PauseOperation, ResumeOperation and the Orchestrator facade without a server: a fake
``KernelGateway`` (kernels are dicts), a fake verifier and a real store on ``memory://``.

What is checked: a failure at each step leaves every kernel as it was and the state back at
``running``; a failed release removes the record; one operation at a time (a second resume
joins); resume brings each kernel of the record back and deletes the record only when all are
ready; the shutdown checkpoint records but releases nothing.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from types import SimpleNamespace

import pytest

from jupyter_gkeresume.errors import (
    ConflictError,
    IntegrityError,
    InvalidInputError,
    KernelCallError,
    KernelNotFoundError,
    ReleaseError,
    StoreError,
)
from jupyter_gkeresume.kernel_protocol import CheckpointReply, RestoreReply
from jupyter_gkeresume.notebook_sessions import Claim
from jupyter_gkeresume.orchestrator import Orchestrator
from jupyter_gkeresume.release import ReleaseBackend
from jupyter_gkeresume.server_settings import ServerSettings
from jupyter_gkeresume.snapshot import SnapshotStore
from jupyter_gkeresume.snapshot.retention import RetentionPolicy
from jupyter_gkeresume.states import State

LOG = logging.getLogger("test-operations")


class FakeGateway:
    """Kernels as dicts: ``namespaces[kid]`` is what a kernel holds; ``snapshots`` what each
    checkpoint saved. ``fail`` maps (action, kid) to an error; ``gate`` holds checkpoints."""

    def __init__(self, workspace: str = "ws"):
        self.workspace = workspace
        self.namespaces: dict[str, dict] = {}
        self.notebook_of: dict[str, str] = {}
        self.busy_ids: set[str] = set()
        self.snapshots: dict[str, dict] = {}
        self.fail: dict[tuple[str, str], Exception] = {}
        self.gate: asyncio.Event | None = None
        self.at_gate = asyncio.Event()  # a checkpoint waits at the gate
        self.calls: list[tuple[str, str]] = []
        self.stopped: list[str] = []
        self.held: set[str] = set()
        self.before_restore = None  # called with the kernel id as a restore begins

    def add(self, notebook: str | None, **namespace) -> str:
        kid = f"k-{secrets.token_hex(3)}"
        self.namespaces[kid] = dict(namespace)
        if notebook:
            self.notebook_of[kid] = notebook
        return kid

    def live_ids(self) -> list[str]:
        return list(self.namespaces)

    def info(self, kid):
        return {"kernel_name": "python3" if kid in self.namespaces else None,
                "execution_state": "busy" if kid in self.busy_ids else "idle"}

    def busy(self, ids):
        return [k for k in ids if k in self.busy_ids]

    def running_cell(self, kid):
        return (3, 1.5) if kid in self.busy_ids else (None, None)

    async def notebooks(self):
        return dict(self.notebook_of)

    async def claim(self, notebook):
        return Claim(None)  # one resume at a time here: nothing else asks for a kernel

    async def start_for(self, notebook, kernel_name, *, hash_seed=None):
        self.calls.append(("start", notebook))
        return self.add(notebook)

    async def stop(self, ids):
        for kid in ids:
            self.stopped.append(kid)
            self.namespaces.pop(kid, None)
            self.notebook_of.pop(kid, None)

    async def hold(self, kid, *, pausing, reason, timeout):
        self._maybe_fail("hold" if pausing else "lift", kid)
        if pausing:
            self.held.add(kid)
        else:
            self.held.discard(kid)

    def _maybe_fail(self, action, kid):
        self.calls.append((action, kid))
        if (action, kid) in self.fail:
            raise self.fail[(action, kid)]

    async def checkpoint(self, kid, *, name, notebook, timeout, on_progress, reason=None):
        if self.gate is not None:
            self.at_gate.set()
            await self.gate.wait()
        self._maybe_fail("checkpoint", kid)
        on_progress({"phase": "writing", "done_bytes": 1, "total_bytes": 2})
        snapshot_id = f"20261130T1015{len(self.snapshots):02d}Z-{secrets.token_hex(3)}"
        self.snapshots[snapshot_id] = dict(self.namespaces[kid])
        saved = sorted(self.namespaces[kid])
        return CheckpointReply(snapshot_id, 10, 10, 0, saved, [],
                               {"snapshot_id": snapshot_id, "saved": saved})

    async def restore(self, kid, *, reference, only, notebook, timeout, on_progress,
                      on_sent=None):
        if on_sent is not None:  # the request is in the kernel's queue
            on_sent()
        if self.before_restore is not None:
            self.before_restore(kid)
        self._maybe_fail("restore", kid)
        values = self.snapshots[reference]
        names = [n for n in values if only is None or n in only]
        self.namespaces[kid].update({n: values[n] for n in names})
        return RestoreReply(reference, names, {"snapshot_id": reference, "restored": names})


class FakeVerifier:
    def __init__(self):
        self.fail_for: set[str] = set()
        self.verified: list[str] = []
        self.modes: list[str | None] = []

    def verify(self, snapshot_id, progress, *, mode=None):
        self.modes.append(mode)
        progress(1, 1)
        if snapshot_id in self.fail_for:
            raise IntegrityError(f"snapshot {snapshot_id} failed verification: bad blob")
        self.verified.append(snapshot_id)
        return 1


class FakeRelease(ReleaseBackend):
    name = "fake"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = 0
        self.fail_with: str | None = None
        self.during_release = None  # called as the release runs
        self.gate: asyncio.Event | None = None  # holds the release (a Hub stopping this server)

    async def release(self):
        self.calls += 1
        if self.during_release is not None:
            self.during_release()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with:
            raise ReleaseError(self.fail_with)


@pytest.fixture
def parts():
    url = f"memory://ops-{secrets.token_hex(4)}"
    settings = SimpleNamespace(store_url=url, workspace_id="ws", kernel_call_timeout=60.0,
                               auto_resume=False, verify="full",
                               retention_policy=RetentionPolicy, gc_grace_hours=6.0,
                               checkpoint_on_shutdown=True, lab_save_timeout=5.0)
    gateway, verifier, backend = FakeGateway(), FakeVerifier(), FakeRelease()
    orch = Orchestrator(settings=settings, kernel_manager=None, session_manager=None,
                        backend=backend, log=LOG, store=SnapshotStore(url, "ws"),
                        gateway=gateway, verifier=verifier)
    return SimpleNamespace(orch=orch, gateway=gateway, verifier=verifier, backend=backend)


async def settle(orch) -> None:
    op = orch.state.operation
    if op is not None:
        await op.task


async def pause_two_notebooks(orch, gw) -> None:
    """``a.ipynb`` holding ``x = 1`` and ``b.ipynb`` holding ``y = 2``, paused."""
    gw.add("a.ipynb", x=1)
    gw.add("b.ipynb", y=2)
    await orch.start_pause()
    await settle(orch)


def kernel_states(orch, ids):
    return [orch.state.kernel(k).machine.state for k in ids]


async def test_pause_checkpoints_verifies_records_releases_then_stops(parts):
    orch, gw = parts.orch, parts.gateway
    a, b = gw.add("a.ipynb", x=1), gw.add("b.ipynb", y=2)
    op = await orch.start_pause()
    assert op.kernels == [a, b] and orch.state.state == State.PAUSING
    await settle(orch)
    assert orch.state.state == State.PAUSED and orch.state.operation is None
    assert parts.backend.calls == 1 and gw.stopped == [a, b]
    record = orch.records.read()
    assert record == orch.state.paused
    assert [(k.kernel_id, k.notebook) for k in record.kernels] == [(a, "a.ipynb"), (b, "b.ipynb")]
    assert parts.verifier.verified == [k.snapshot_id for k in record.kernels]
    assert record.kernels[0].saved == ["x"]


@pytest.mark.parametrize("step", ["hold", "checkpoint-first", "checkpoint-second", "verify",
                                  "record"])
async def test_a_failure_before_the_release_keeps_everything_as_it_was(parts, step):
    orch, gw = parts.orch, parts.gateway
    a, b = gw.add("a.ipynb", x=1), gw.add("b.ipynb", y=2)
    if step == "hold":
        gw.fail[("hold", b)] = KernelCallError("kernel b: no kernel_hooks")
    elif step == "checkpoint-first":
        gw.fail[("checkpoint", a)] = KernelCallError("kernel a: no space")
    elif step == "checkpoint-second":
        gw.fail[("checkpoint", b)] = KernelCallError("kernel b: no space")
    elif step == "verify":
        original = gw.checkpoint

        async def checkpoint_then_mark(kid, **kw):
            reply = await original(kid, **kw)
            parts.verifier.fail_for.add(reply.snapshot_id)
            return reply

        gw.checkpoint = checkpoint_then_mark
    else:
        def refuse(record):
            raise StoreError("write record: permission denied")

        orch.records.write = refuse
    await orch.start_pause()
    await settle(orch)
    assert orch.state.state == State.RUNNING
    assert "pause failed, nothing was released" in orch.state.reason
    assert orch.state.to_status()["last_error"]["operation"] == "pause"
    assert kernel_states(orch, [a, b]) == [State.RUNNING, State.RUNNING]
    assert gw.namespaces == {a: {"x": 1}, b: {"y": 2}} and gw.stopped == []
    assert parts.backend.calls == 0 and orch.records.read() is None
    assert gw.held == set()  # every hold is lifted
    # and the next pause works
    gw.fail.clear()
    vars(gw).pop("checkpoint", None)
    vars(orch.records).pop("write", None)
    await orch.start_pause()
    await settle(orch)
    assert orch.state.state == State.PAUSED


async def test_a_failed_release_removes_the_record_and_keeps_the_kernels(parts):
    orch, gw = parts.orch, parts.gateway
    a = gw.add("a.ipynb", x=1)
    parts.backend.fail_with = "the cluster said no"
    await orch.start_pause()
    await settle(orch)
    assert orch.state.state == State.RUNNING and "the cluster said no" in orch.state.reason
    assert orch.state.to_status()["last_error"]["operation"] == "release"
    assert orch.records.read() is None and orch.state.paused is None
    assert gw.stopped == [] and kernel_states(orch, [a]) == [State.RUNNING]
    assert gw.held == set()


async def test_checkpoint_only_writes_no_record_and_releases_nothing(parts):
    orch, gw = parts.orch, parts.gateway
    a = gw.add("a.ipynb", x=1)
    await orch.start_pause(release=False)
    await settle(orch)
    assert orch.state.state == State.RUNNING and orch.state.reason is None
    assert orch.records.read() is None and parts.backend.calls == 0 and gw.stopped == []
    assert orch.state.kernel(a).snapshot_id in gw.snapshots


async def test_validation_refuses_before_anything_moves(parts):
    orch, gw = parts.orch, parts.gateway
    with pytest.raises(ConflictError, match="no kernel"):
        await orch.start_pause()
    a = gw.add("a.ipynb")
    with pytest.raises(KernelNotFoundError):
        await orch.start_pause(["nope"])
    with pytest.raises(InvalidInputError):
        await orch.start_pause(name="../x")
    gw.busy_ids.add(a)
    with pytest.raises(ConflictError, match="busy"):
        await orch.start_pause()
    assert orch.state.state == State.RUNNING and orch.state.operation is None
    with pytest.raises(InvalidInputError, match="when_busy"):
        await orch.start_pause(when_busy="later")
    op = await orch.start_pause(when_busy="queue", release=False)  # queued behind the cell
    for _ in range(100):
        if op.waiting_for is not None:
            break
        await asyncio.sleep(0.01)
    assert op.waiting_for == {"kernel_id": a, "notebook": "a.ipynb", "execution_count": 3,
                              "running_seconds": 1.5}
    assert ("hold", a) not in gw.calls and "queued behind cell 3 of a.ipynb" in (
        orch.refuse_kernel_start() or "")
    gw.busy_ids.discard(a)  # the cell ends: the pause itself runs
    await op.task
    assert orch.state.state == State.RUNNING and op.waiting_for is None
    assert ("hold", a) in gw.calls


async def test_a_releasing_pause_takes_every_kernel(parts):
    """Issue 27.1: whichever kernels the caller names, a releasing pause takes every kernel of
    the workspace (the workspace goes; the server decides the set); a checkpoint (no release)
    takes only the ones named."""
    orch, gw = parts.orch, parts.gateway
    a, b = gw.add("a.ipynb"), gw.add("b.ipynb")
    op = await orch.start_pause([a], release=False)
    assert op.kernels == [a]
    await settle(orch)
    op = await orch.start_pause([a])
    assert op.kernels == [a, b]
    await settle(orch)
    assert not gw.live_ids()


async def test_one_operation_at_a_time_under_one_lock(parts):
    orch, gw = parts.orch, parts.gateway
    gw.add("a.ipynb", x=1)
    gw.gate = asyncio.Event()
    results = await asyncio.gather(orch.start_pause(), orch.start_pause(),
                                   return_exceptions=True)
    assert sum(isinstance(r, ConflictError) for r in results) == 1
    for call in (orch.start_pause(release=False), orch.start_resume("latest", "full", None, None),
                 orch.discard_paused()):
        with pytest.raises(ConflictError, match="in flight"):
            await call
    gw.gate.set()
    await settle(orch)
    assert orch.state.state == State.PAUSED


async def test_resume_from_the_record_brings_every_kernel_back_then_deletes_it(parts):
    orch, gw = parts.orch, parts.gateway
    await pause_two_notebooks(orch, gw)
    assert gw.live_ids() == []
    answers = await asyncio.gather(*[orch.start_resume(None, "full", None, None)
                                     for _ in range(5)])
    assert len({op.id for op, _ in answers}) == 1
    assert sorted(joined for _, joined in answers) == [False] + [True] * 4
    await settle(orch)
    assert orch.state.state == State.READY and orch.state.paused is None
    assert orch.records.read() is None
    by_notebook = {gw.notebook_of[k]: gw.namespaces[k] for k in gw.live_ids()}
    assert by_notebook == {"a.ipynb": {"x": 1}, "b.ipynb": {"y": 2}}
    assert kernel_states(orch, gw.live_ids()) == [State.READY, State.READY]


async def test_a_kernel_restores_while_the_next_one_starts_and_a_failed_start_waits_for_it(parts):
    """The first kernel's restore (its imports and reads) runs while the second kernel starts;
    when that start fails, the restore in flight still finishes and the record keeps only the
    kernel that did not come back."""
    orch, gw = parts.orch, parts.gateway
    await pause_two_notebooks(orch, gw)
    restoring, second_start = asyncio.Event(), asyncio.Event()
    original_start, original_restore = gw.start_for, gw.restore

    async def start(notebook, kernel_name, *, hash_seed=None):
        if notebook == "b.ipynb":
            await asyncio.wait_for(restoring.wait(), 5)  # a's restore is in flight already
            second_start.set()
            raise KernelCallError("no kernel for b: quota")
        return await original_start(notebook, kernel_name)

    async def restore(kid, **kwargs):
        restoring.set()
        await asyncio.wait_for(second_start.wait(), 5)
        return await original_restore(kid, **kwargs)

    gw.start_for, gw.restore = start, restore
    await orch.start_resume(None, "full", None, None)
    await settle(orch)
    assert orch.state.state == State.FAILED and "quota" in orch.state.reason
    [kid] = gw.live_ids()
    assert gw.namespaces[kid] == {"x": 1} and kernel_states(orch, [kid]) == [State.READY]
    assert [k.notebook for k in orch.records.read().kernels] == ["b.ipynb"]


async def test_a_failed_resume_keeps_the_record(parts):
    orch, gw = parts.orch, parts.gateway
    gw.add("a.ipynb", x=1)
    await orch.start_pause()
    await settle(orch)
    original = gw.start_for

    async def start_failing(notebook, kernel_name, *, hash_seed=None):
        kid = await original(notebook, kernel_name)
        gw.fail[("restore", kid)] = KernelCallError("out of memory")
        return kid

    gw.start_for = start_failing
    await orch.start_resume(None, "full", None, None)
    await settle(orch)
    assert orch.state.state == State.FAILED and "out of memory" in orch.state.reason
    assert orch.records.read() is not None and orch.state.paused is not None
    [kid] = gw.live_ids()
    assert kernel_states(orch, [kid]) == [State.FAILED]
    gw.start_for = original  # a retry works
    await orch.start_resume(None, "full", None, None)
    await settle(orch)
    assert orch.state.state == State.READY and orch.records.read() is None


async def test_partial_resume_restores_only_the_names_each_snapshot_holds(parts):
    orch, gw = parts.orch, parts.gateway
    gw.add("a.ipynb", x=1, y=2)
    gw.add("b.ipynb", z=3)
    await orch.start_pause()
    await settle(orch)
    with pytest.raises(InvalidInputError, match="no paused snapshot holds 'nope'"):
        await orch.start_resume(None, "partial", ["nope"], None)
    await orch.start_resume(None, "partial", ["x"], None)
    await settle(orch)
    assert sorted(map(dict.__len__, gw.namespaces.values())) == [0, 1]
    assert [("restore" in c[0]) for c in gw.calls].count(True) == 1


async def test_shutdown_checkpoint_records_but_releases_nothing(parts):
    orch, gw = parts.orch, parts.gateway
    a, busy = gw.add("a.ipynb", x=1), gw.add("train.ipynb", w=3)
    gw.busy_ids.add(busy)  # at shutdown a busy kernel is reported, never waited for
    assert await orch.shutdown(5) == "checkpointed"
    assert orch.state.state == State.PAUSED and parts.backend.calls == 0
    record = orch.records.read()
    assert record.reason == "shutdown" and [k.kernel_id for k in record.kernels] == [a]
    [reported] = record.not_saved
    assert reported["notebook"] == "train.ipynb" and "busy" in reported["reason"]
    assert ("hold", busy) not in gw.calls and ("checkpoint", busy) not in gw.calls
    assert parts.verifier.modes == ["metadata"]  # never a full read-back within the grace
    # the busy kernel still has no snapshot: never skipped as "already paused", and said so
    assert await orch.shutdown(5) == "failed: every kernel is busy running a cell: nothing was saved"
    gw.busy_ids.clear()
    assert await orch.shutdown(5) == "checkpointed"
    assert sorted(k.notebook for k in orch.records.read().kernels) == ["a.ipynb", "train.ipynb"]
    assert await orch.shutdown(5) == "already paused"


async def test_shutdown_saves_the_kernels_a_paused_record_does_not_stand_for(parts):
    """Issue 27.1: paused (backend ``none`` keeps the server), then a kernel is started for a
    new notebook and one for a paused notebook (the lab opening it): the shutdown checkpoint
    saves the new notebook's kernel and keeps the paused one's snapshot in the record."""
    orch, gw = parts.orch, parts.gateway
    gw.add("a.ipynb", x=1)
    await orch.start_pause()
    await settle(orch)
    paused = orch.records.read()
    late, stand_in = gw.add("late.ipynb", y=2), gw.add("a.ipynb")
    assert await orch.shutdown(5) == "checkpointed"
    record = orch.records.read()
    assert {k.notebook: k.snapshot_id for k in record.kernels} == {
        "a.ipynb": paused.kernels[0].snapshot_id,
        "late.ipynb": orch.state.kernel(late).snapshot_id}
    assert ("checkpoint", stand_in) not in gw.calls


async def test_shutdown_during_the_release_does_not_wait_for_it(parts):
    """The release may be what stops this server (JupyterHub): every kernel is in the record,
    so the shutdown returns at once instead of spending its budget waiting on the release."""
    orch, gw = parts.orch, parts.gateway
    gw.add("a.ipynb", x=1)
    parts.backend.gate = asyncio.Event()
    op = await orch.start_pause()
    while orch.state.state != State.RELEASING:
        await asyncio.sleep(0.01)
    assert await asyncio.wait_for(orch.shutdown(30), 5) == "already paused: releasing"
    parts.backend.gate.set()
    await op.task


async def test_shutdown_waits_for_a_pause_and_saves_what_it_left(parts):
    """A pause in flight at SIGTERM is waited for; when it fails, the kernels it left running
    are checkpointed in the time left."""
    orch, gw = parts.orch, parts.gateway
    a = gw.add("a.ipynb", x=1)
    parts.backend.fail_with = "the Hub refused"  # the pause fails at its release
    await orch.start_pause()
    assert await orch.shutdown(5) == "checkpointed"
    assert parts.backend.calls == 1
    assert [k.kernel_id for k in orch.records.read().kernels] == [a]


async def test_shutdown_checkpoint_saves_every_kernel_it_can(parts):
    orch, gw = parts.orch, parts.gateway
    a, b, c = gw.add("a.ipynb", x=1), gw.add("b.ipynb", y=2), gw.add("c.ipynb", z=3)
    gw.fail[("checkpoint", a)] = KernelCallError("disk full")
    assert await orch.shutdown(5) == "checkpointed"
    record = orch.records.read()
    assert sorted(k.kernel_id for k in record.kernels) == sorted([b, c])
    assert [(n["notebook"], "disk full" in n["reason"]) for n in record.not_saved] == [
        ("a.ipynb", True)]


async def test_shutdown_with_every_kernel_busy_saves_nothing_and_says_so(parts):
    orch, gw = parts.orch, parts.gateway
    gw.busy_ids.add(gw.add("train.ipynb"))
    outcome = await orch.shutdown(5)
    assert outcome.startswith("failed:") and "busy" in outcome
    assert orch.records.read() is None and orch.state.state == State.RUNNING


async def test_delete_and_discard_guards(parts):
    orch, gw = parts.orch, parts.gateway
    gw.add("a.ipynb", x=1)
    with pytest.raises(ConflictError, match="nothing is paused"):
        await orch.discard_paused()
    await orch.start_pause()
    await settle(orch)
    [kept] = orch.state.paused.snapshot_ids()
    with pytest.raises(ConflictError, match="paused record"):
        await orch.delete_snapshot(kept)
    await orch.discard_paused()
    assert orch.state.state == State.RUNNING and orch.records.read() is None


async def test_every_kernel_is_held_before_any_checkpoint(parts):
    orch, gw = parts.orch, parts.gateway
    a, b = gw.add("a.ipynb", x=1), gw.add("b.ipynb", y=2)
    await orch.start_pause(release=False)
    await settle(orch)
    first_checkpoint = gw.calls.index(("checkpoint", a))
    assert {("hold", a), ("hold", b)} <= set(gw.calls[:first_checkpoint])
    assert gw.held == set() and orch.state.state == State.RUNNING  # lifted after the checkpoint


async def test_a_kernel_may_not_start_while_a_pause_is_in_flight(parts):
    orch, gw = parts.orch, parts.gateway
    gw.add("a.ipynb", x=1)
    assert orch.refuse_kernel_start() is None
    gw.gate = asyncio.Event()
    op = await orch.start_pause()
    assert op.id in orch.refuse_kernel_start()
    gw.gate.set()
    await settle(orch)
    assert orch.refuse_kernel_start() is None


async def test_cancel_before_the_record_puts_everything_back(parts):
    orch, gw = parts.orch, parts.gateway
    a = gw.add("a.ipynb", x=1)
    with pytest.raises(ConflictError, match="no pause in flight"):
        await orch.cancel()
    gw.gate = asyncio.Event()
    op = await orch.start_pause()
    assert op.to_dict()["cancellable"] is True
    await gw.at_gate.wait()  # the pause held the kernels and waits in the checkpoint
    assert gw.held == {a}
    assert await orch.cancel() is op
    with pytest.raises(ConflictError, match="can no longer be cancelled"):
        await orch.cancel()
    await op.task
    assert orch.state.state == State.RUNNING and orch.state.reason == (
        "pause cancelled, nothing was released")
    assert orch.state.operation is None and orch.records.read() is None
    assert gw.held == set() and gw.stopped == [] and parts.backend.calls == 0
    assert kernel_states(orch, [a]) == [State.RUNNING]
    gw.gate.set()
    await orch.start_pause()  # and a pause works again
    await settle(orch)
    assert orch.state.state == State.PAUSED


async def test_a_pause_past_its_record_cannot_be_cancelled(parts):
    orch, gw = parts.orch, parts.gateway
    gw.add("a.ipynb", x=1)
    released = asyncio.Event()
    proceed = asyncio.Event()

    async def slow_release():
        released.set()
        await proceed.wait()

    parts.backend.release = slow_release
    op = await orch.start_pause()
    await released.wait()
    assert orch.state.state == State.RELEASING and op.to_dict()["cancellable"] is False
    with pytest.raises(ConflictError, match="releasing: it can no longer be cancelled"):
        await orch.cancel()
    proceed.set()
    await settle(orch)
    assert orch.state.state == State.PAUSED


async def test_after_a_failed_resume_the_shutdown_checkpoint_keeps_what_did_not_come_back(parts):
    orch, gw = parts.orch, parts.gateway
    await pause_two_notebooks(orch, gw)
    lost = {k.notebook: k.snapshot_id for k in orch.state.paused.kernels}["b.ipynb"]
    original = gw.start_for

    async def b_fails(notebook, kernel_name, *, hash_seed=None):
        kid = await original(notebook, kernel_name, hash_seed=hash_seed)
        if notebook == "b.ipynb":
            gw.fail[("restore", kid)] = KernelCallError("out of memory")
        return kid

    gw.start_for = b_fails
    await orch.start_resume(None, "full", None, None)
    await settle(orch)
    assert orch.state.state == State.FAILED
    assert [k.notebook for k in orch.records.read().kernels] == ["b.ipynb"]
    assert await orch.shutdown(5) == "checkpointed"
    record = orch.records.read()
    by_notebook = {k.notebook: k.snapshot_id for k in record.kernels}
    assert sorted(by_notebook) == ["a.ipynb", "b.ipynb"] and by_notebook["b.ipynb"] == lost
    assert gw.snapshots[by_notebook["a.ipynb"]] == {"x": 1}


async def test_estimates_and_server_phases(parts):
    """15.1/15.4: the operation's expected duration from the recorded pauses and resumes; the
    kernels' progress says ``releasing`` during the release and ``starting`` while a resumed
    kernel starts."""
    orch, gw = parts.orch, parts.gateway
    a = gw.add("a.ipynb", x=1)
    seen = []
    parts.backend.during_release = lambda: seen.append(
        [orch.state.kernel(k).progress["phase"] for k in orch.state.operation.kernels])
    op = await orch.start_pause()
    assert op.estimate_seconds is None  # nothing recorded yet
    await settle(orch)
    assert seen == [["releasing"]]
    # No resume recorded yet: the first resume is estimated from the pause (issue 23.4).
    assert (await orch.status())["resume_estimate_seconds"] > 0
    gw.before_restore = lambda kid: seen.append(orch.state.kernel(kid).progress["phase"])
    op, _ = await orch.start_resume(None, "full", None, None)
    await settle(orch)
    assert seen[-1] == "starting" and orch.state.state == State.READY
    op = await orch.start_pause(release=True)
    assert op.estimate_seconds is not None and op.estimate_seconds > 0
    assert op.to_dict()["estimate_seconds"] == op.estimate_seconds
    await settle(orch)
    assert (await orch.status())["resume_estimate_seconds"] > 0
    assert a not in gw.live_ids()


async def test_checkpoint_on_shutdown_is_a_stored_setting(parts):
    orch, gw = parts.orch, parts.gateway
    gw.add("a.ipynb", x=1)
    assert await orch.settings_view() == {"checkpoint_on_shutdown": True}
    await orch.update_settings({"checkpoint_on_shutdown": False})
    assert await orch.shutdown(5) == "not checkpointed: checkpoint_on_shutdown is off"
    assert orch.records.read() is None
    again = Orchestrator(settings=orch.settings, kernel_manager=None, session_manager=None,
                         backend=parts.backend, log=LOG, store=orch.store, gateway=gw,
                         verifier=parts.verifier)  # a restarted server reads it back
    assert await again.settings_view() == {"checkpoint_on_shutdown": False}
    with pytest.raises(InvalidInputError):
        await orch.update_settings({"checkpoint_on_shutdown": "no"})


async def test_shutdown_reads_no_setting_from_the_store(parts, monkeypatch):
    """The grace may be 1 s: the settings read at startup decide, the store is not asked again
    (a store that hangs or fails at shutdown cannot eat the checkpoint's time)."""
    orch, gw = parts.orch, parts.gateway
    gw.add("a.ipynb", x=1)
    orch.settings_records.write(ServerSettings(checkpoint_on_shutdown=False))
    await orch.ensure_started()

    def no_store(name):
        raise AssertionError(f"shutdown read the {name} record")

    monkeypatch.setattr(orch.store, "read_record", no_store)
    assert await orch.shutdown(5) == "not checkpointed: checkpoint_on_shutdown is off"


async def test_a_failing_retention_never_fails_the_pause(parts, monkeypatch):
    orch, gw = parts.orch, parts.gateway
    orch.retention.policy = RetentionPolicy(keep_last=1)

    def broken():
        raise StoreError("the bucket said no")

    monkeypatch.setattr(orch.retention, "_apply", broken)
    gw.add("a.ipynb", x=1)
    op = await orch.start_pause(release=False)
    await settle(orch)
    assert orch.state.state == State.RUNNING and orch.state.operation is None
    assert orch.state.kernel(op.kernels[0]).snapshot_id is not None
    for _ in range(200):
        if orch.retention.report is not None:
            break
        await asyncio.sleep(0.01)
    assert "the bucket said no" in orch.retention.report["error"]
    assert (await orch.status())["retention"]["error"] == orch.retention.report["error"]


async def test_an_unreadable_settings_record_still_checkpoints_at_shutdown(parts):
    orch, gw = parts.orch, parts.gateway
    gw.add("a.ipynb", x=1)
    orch.store.write_record("settings", b"{not json")
    assert await orch.settings_view() == {"checkpoint_on_shutdown": True}  # ignored: defaults
    assert await orch.shutdown(5) == "checkpointed"


def test_the_cell_watch_closes_every_subscription_when_the_server_stops():
    """Each watched kernel holds an IOPub subscription (ZMQ sockets, hence fds): a stopping
    server closes them all, those of kernels the user shut down included."""
    from jupyter_gkeresume.cell_watch import RunningCells

    class Stream:
        def __init__(self):
            self.open = True

        def on_recv(self, callback):
            pass

        def closed(self):
            return not self.open

        def close(self):
            self.open = False

    streams = []

    def kernel():
        stream = Stream()
        streams.append(stream)
        return SimpleNamespace(connect_iopub=lambda: stream,
                               session=SimpleNamespace(config=None, key=b"k"))

    cells = RunningCells()
    for kid in ("a", "b", "c"):
        cells.watch(kid, kernel())
    cells.forget("a")
    assert [s.open for s in streams] == [False, True, True]
    cells.close()
    assert not any(s.open for s in streams)


def test_the_gateway_stops_kernels_at_once_and_skips_the_gone():
    """Each graceful stop waits on a kernel's own teardown (about 1 s with torch imported):
    a pause of several notebooks stops them together, and a kernel already gone is no error."""
    from tornado import web

    from jupyter_gkeresume.kernels import KernelGateway

    class Kernel:  # jupyter_client's KernelManager, as ``kernels.exited`` uses it
        shutdown_wait_time = 5.0

        def __init__(self, kid: str, requested: list[str]):
            self.kid, self.requested = kid, requested

        def stop_restarter(self):
            assert self.kid not in self.requested, "the restarter stops before the request"

        async def request_shutdown(self):
            self.requested.append(self.kid)

        async def is_alive(self):
            return self.kid not in self.requested  # gone once asked

    class Manager:
        def __init__(self):
            self.in_flight = self.most = 0
            self.stopped: list[str] = []
            self.requested: list[str] = []

        def get_kernel(self, kid):
            if kid == "gone":
                raise KeyError(kid)
            return Kernel(kid, self.requested)

        async def shutdown_kernel(self, kid):
            if kid == "gone":
                raise web.HTTPError(404)
            assert kid in self.requested, "the exit was requested and watched first"
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            await asyncio.sleep(0.05)
            self.in_flight -= 1
            self.stopped.append(kid)

    manager = Manager()
    gateway = KernelGateway(manager, None, store_url="memory://x", workspace="ws")
    try:
        asyncio.run(gateway.stop(["a", "gone", "b", "c"]))
    finally:
        gateway.close()
    assert sorted(manager.stopped) == ["a", "b", "c"] and manager.most == 3


async def test_a_record_naming_a_notebook_twice_resumes_both_and_the_next_pause_names_it_once(
        parts):
    """Issue 27.3: a record written while a notebook had two kernels (before one kernel per
    notebook) names it twice. The gateway gives a notebook's live kernel to every start for
    it (as ``KernelGateway.start_for``): the second snapshot comes back into a kernel of its
    own, with no notebook, instead of a second restore into the first one ("cannot go from
    restoring to restoring"); nothing is lost, and the next pause records the notebook once."""
    orch, gw = parts.orch, parts.gateway
    gw.add("a.ipynb", x=1)
    gw.add("a.ipynb", x_twin=2)
    await orch.start_pause()
    await settle(orch)
    assert [k.notebook for k in orch.state.paused.kernels] == ["a.ipynb", "a.ipynb"]
    original_start = gw.start_for

    async def start(notebook, kernel_name, *, hash_seed=None):
        live = [k for k, n in gw.notebook_of.items() if notebook and n == notebook]
        return live[0] if live else await original_start(notebook, kernel_name)

    gw.start_for = start
    await orch.start_resume(None, "full", None, None)
    await settle(orch)
    assert orch.state.state == State.READY, orch.state.reason
    assert sorted(map(sorted, gw.namespaces.values())) == [["x"], ["x_twin"]]
    [notebook_kernel] = [k for k in gw.live_ids() if gw.notebook_of.get(k) == "a.ipynb"]
    assert gw.namespaces[notebook_kernel] in ({"x": 1}, {"x_twin": 2})
    await orch.start_pause()
    await settle(orch)
    assert sorted(str(k.notebook) for k in orch.state.paused.kernels) == ["None", "a.ipynb"]
