"""The resume's read-ahead (``read_ahead.read_ahead``): every blob of a local snapshot's manifest
is asked into the page cache, largest first, within the budget; a missing blob, an unreadable
manifest or a store that is not local never raise; ``ResumeOperation`` starts it with the
snapshots it restores (not for a ``files-only`` resume) and a failing one does not fail it; a
real server's resume reads every blob of the paused snapshot ahead."""

from __future__ import annotations

import asyncio
import logging
import os

import numpy as np
import pytest
from fixtures_server import server_config
from test_server_operations import FakeGateway

import kernel_hooks
from jupyter_gkeresume.events import EventLog
from jupyter_gkeresume.paused_record import PausedRecords
from jupyter_gkeresume.read_ahead import free_memory_budget, read_ahead
from jupyter_gkeresume.resume import ResumeItem, ResumeOperation
from jupyter_gkeresume.snapshot import SnapshotStore, load_manifest, load_signing_key
from jupyter_gkeresume.state import Operation, WorkspaceState
from jupyter_gkeresume.states import State

LOG = logging.getLogger("test-read-ahead")


@pytest.fixture
def jp_server_config(store_dir):
    return server_config(str(store_dir))


@pytest.fixture
def snapshot(tmp_path, monkeypatch):
    """A local store holding one snapshot of three arrays of different sizes."""
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", "read-ahead-test-key-" + "2" * 32)
    namespace = {"big": np.arange(300_000.0), "mid": np.arange(40_000.0), "small": np.ones(5000)}
    result = kernel_hooks.checkpoint(namespace=namespace, store=str(tmp_path / "store"),
                                     workspace="ws")
    store = SnapshotStore(str(tmp_path / "store"), "ws")
    return store, result.snapshot_id


def blob_paths_largest_first(store, snapshot_id):
    blobs = load_manifest(store, snapshot_id, load_signing_key()).blobs
    return [store.blob_path(d) for d, _ in sorted(blobs.items(), key=lambda kv: -kv[1])]


def test_every_blob_of_the_manifest_is_read_ahead_largest_first(snapshot, advised):
    store, snapshot_id = snapshot
    expected = blob_paths_largest_first(store, snapshot_id)
    assert len(expected) >= 3  # the arrays (small ones go into the graph) and the graph
    asked = read_ahead(store, load_signing_key, [snapshot_id], LOG)
    assert asked == expected
    assert advised == [(os.path.realpath(p), os.POSIX_FADV_WILLNEED) for p in expected]


def test_a_missing_blob_is_left_out_and_never_raises(snapshot, advised):
    store, snapshot_id = snapshot
    expected = blob_paths_largest_first(store, snapshot_id)
    os.remove(expected[0])
    assert read_ahead(store, load_signing_key, [snapshot_id], LOG) == expected[1:]


def test_an_unreadable_manifest_or_a_failing_key_reads_nothing_ahead(snapshot, advised):
    store, snapshot_id = snapshot
    assert read_ahead(store, load_signing_key, ["20261201T000000Z-abcdef"], LOG) == []

    def no_key():
        raise RuntimeError("no key")

    assert read_ahead(store, no_key, [snapshot_id], LOG) == []
    with open(store.manifest_path(snapshot_id), "r+b") as f:
        f.write(b"not json")  # a damaged manifest
    assert read_ahead(store, load_signing_key, [snapshot_id], LOG) == []
    assert advised == []


def test_the_budget_bounds_what_is_read_ahead(snapshot, advised):
    store, snapshot_id = snapshot
    expected = blob_paths_largest_first(store, snapshot_id)
    sizes = [os.path.getsize(p) for p in expected]
    asked = read_ahead(store, load_signing_key, [snapshot_id], LOG, budget=sum(sizes[1:]))
    assert asked == expected[1:]  # the largest does not fit; every other one does


def test_the_default_budget_is_part_of_the_memory_available():
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < free_memory_budget() <= total // 2


def test_a_store_that_is_not_local_reads_nothing_ahead(advised):
    store = SnapshotStore("memory://read-ahead", "ws")
    assert read_ahead(store, load_signing_key, ["20261201T000000Z-abcdef"], LOG) == []
    assert advised == []


@pytest.mark.parametrize("mode", ["full", "files-only"])
async def test_resume_starts_the_read_ahead_and_a_failing_one_does_not_fail_it(mode):
    gateway = FakeGateway()
    snapshot_id = "20261201T000000Z-abcdef"
    gateway.snapshots[snapshot_id] = {"x": 1}
    asked: list[list[str]] = []

    def failing_read_ahead(ids):
        asked.append(ids)
        raise RuntimeError("read-ahead broke")

    state = WorkspaceState()
    op = Operation("resume", mode=mode)
    state.begin(op, State.WAITING_FOR_RESOURCES)
    store = SnapshotStore("memory://read-ahead-op", "ws")
    await ResumeOperation(
        op, state=state, gateway=gateway, records=PausedRecords(store, load_signing_key),
        events=EventLog(store, LOG), log=LOG, items=[ResumeItem(snapshot_id, "a.ipynb", None)],
        only=None, from_record=False, timeout=10, read_ahead=failing_read_ahead).run()
    assert state.state == State.READY
    for _ in range(500):  # the read-ahead runs in a worker thread: let it get there
        if asked or mode == "files-only":
            break
        await asyncio.sleep(0.01)
    assert asked == ([] if mode == "files-only" else [[snapshot_id]])


async def test_a_resume_through_the_server_reads_the_paused_snapshot_ahead(api, store_dir, advised):
    kid = await api.new_session("ahead.ipynb")
    await api.run_cell(kid, "import numpy as np\nbig = np.arange(400_000.0)\nmid = np.ones(90_000)")
    status = await api.pause()
    assert status["state"] == "paused", status
    [entry] = status["paused"]["kernels"]
    store = SnapshotStore(str(store_dir), "server-ws")
    expected = blob_paths_largest_first(store, entry["snapshot_id"])
    advised.clear()
    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    status = await api.settle()
    assert status["state"] == "ready", status
    for _ in range(500):  # the read-ahead's worker thread may end after the resume
        asked = [path for path, advice in advised if advice == os.POSIX_FADV_WILLNEED]
        if len(asked) >= len(expected):
            break
        await asyncio.sleep(0.01)
    assert asked == [os.path.realpath(p) for p in expected]
