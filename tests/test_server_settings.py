"""The server's own configuration and what it hands on (issues 14 and 16), on a real in-process
server with real kernels: a planted unsigned manifest is never the last snapshot, a refused
snapshot asked for by id is a 409, kernels get the server's root dir, the verification mode,
automatic retention and the runtime settings endpoint."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

import pytest
from fixtures_lifecycle import make_snapshot
from fixtures_server import SETTLE_TIMEOUT, SIGNING_KEY, server_config
from traitlets import TraitError

from jupyter_gkeresume.app import GkeResume
from jupyter_gkeresume.errors import IntegrityError, ManifestError
from jupyter_gkeresume.pause import SnapshotVerifier
from jupyter_gkeresume.snapshot import SigningKey, SnapshotStore, list_snapshots, load_manifest
from jupyter_gkeresume.snapshot.format import Manifest

PLANTED = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)


@pytest.fixture
def jp_server_config(store_dir):
    return server_config(str(store_dir), keep_last=1)


def store_of(store_dir) -> SnapshotStore:
    return SnapshotStore(str(store_dir), "server-ws")


async def test_a_planted_unsigned_manifest_is_neither_last_nor_usable(api, store_dir):
    kid = await api.new_session("real.ipynb")
    await api.run_cell(kid, "x = 1")
    status = await api.pause({"release": False})
    real = status["last_snapshot"]["id"]
    planted = make_snapshot(store_of(store_dir), None, [b"evil"], when=PLANTED)

    status = await api.pause({"release": False})  # a pause refreshes the cached last snapshot
    assert status["last_snapshot"]["id"] not in (planted.snapshot_id, real), status
    assert status["last_snapshot"]["error"] is None

    code, body = await api.call("POST", "gkeresume/api/resume",
                                {"snapshot": planted.snapshot_id, "kernel": kid})
    assert code == 409, (code, body)
    assert "was refused" in body["message"] and "unsigned" in body["message"]


async def test_kernels_get_the_server_root_dir(api, jp_root_dir):
    kid = await api.new_session("where.ipynb")
    out = await api.run_cell(kid, "import os\nprint(os.environ['GKERESUME_ROOT_DIR'])\n"
                                  "print(repr(os.environ['GKERESUME_EXTRA_PATHS']), "
                                  "os.environ['GKERESUME_EXTRA_PATHS_MAX_BYTES'])")
    assert out.splitlines() == [str(jp_root_dir.resolve()), f"'' {1 << 30}"]


def test_extra_paths_are_absolute_directories():
    """``c.GkeResume.extra_paths``: absolute paths, normalized (a resume compares them)."""
    assert GkeResume(extra_paths=["/data/./x/"]).extra_paths == ["/data/x"]
    for bad in (["data"], ["/a:/b"]):
        with pytest.raises(TraitError, match="not an absolute directory"):
            GkeResume(extra_paths=bad)
    with pytest.raises(TraitError):
        GkeResume(extra_paths_max_bytes=-1)


@pytest.mark.parametrize(("mode", "reads"), [("metadata", 0), ("full", 2)])
def test_metadata_verification_reads_no_blob_bytes(local_store, signing_key, monkeypatch,
                                                   mode, reads):
    """16.3: the default verification asks for sizes only; ``full`` reads every blob back."""
    manifest = make_snapshot(local_store, signing_key, [b"a" * 1000])
    opened = []
    real_open = local_store.open_blob
    monkeypatch.setattr(local_store, "open_blob", lambda d: opened.append(d) or real_open(d))
    verifier = SnapshotVerifier(local_store, lambda: signing_key, mode=mode)
    assert verifier.verify(manifest.snapshot_id, lambda done, total: None) == 0
    assert len(opened) == reads  # the payload blob and the graph blob


def test_metadata_verification_still_catches_a_missing_or_truncated_blob(local_store,
                                                                         signing_key):
    manifest = make_snapshot(local_store, signing_key, [b"a" * 1000, b"b" * 10])
    digest = max(manifest.blobs, key=manifest.blobs.get)
    local_store.delete_blob(digest)
    verifier = SnapshotVerifier(local_store, lambda: signing_key)
    with pytest.raises(IntegrityError, match="missing"):
        verifier.verify(manifest.snapshot_id, lambda done, total: None)


def test_the_verify_trait_is_checked():
    with pytest.raises(TraitError):
        GkeResume(verify="sometimes")
    assert GkeResume().verify == "metadata"


async def wait_for(predicate, what: str):
    for _ in range(int(SETTLE_TIMEOUT / 0.1)):
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"never: {what}")


async def test_retention_runs_after_every_pause_per_notebook(api, store_dir):
    """14.4: keep_last=1 (this module's server), three checkpoints of two notebooks: one
    snapshot of each notebook stays; a named one is always kept."""
    a, b = await api.new_session("a.ipynb"), await api.new_session("b.ipynb")
    await api.run_cell(a, "x = 1")
    await api.run_cell(b, "y = 2")
    await api.pause({"release": False, "name": "keep-me"})
    for _ in range(3):
        last = [k["snapshot_id"] for k in (await api.pause({"release": False}))["kernels"]]
    store = store_of(store_dir)

    def by_notebook():
        rows = list_snapshots(store, SigningKey(SIGNING_KEY.encode()), {})
        return sorted((r.notebook, r.name or "") for r in rows)

    await wait_for(lambda: len(store.list_snapshot_ids()) == 4, "retention applied")
    assert by_notebook() == [("a.ipynb", ""), ("a.ipynb", "keep-me"), ("b.ipynb", ""),
                             ("b.ipynb", "keep-me")]
    assert set(last) <= set(store.list_snapshot_ids())
    status = await api.status()
    assert status["retention"]["error"] is None and status["retention"]["deleted"]


async def test_settings_are_stored_and_checked(api, store_dir):
    code, body = await api.call("GET", "gkeresume/api/settings")
    assert code == 200 and body == {"checkpoint_on_shutdown": True}, body  # the trait default
    code, body = await api.call("PUT", "gkeresume/api/settings", {"checkpoint_on_shutdown": False})
    assert code == 200 and body == {"checkpoint_on_shutdown": False}, body
    code, body = await api.call("GET", "gkeresume/api/settings")
    assert body == {"checkpoint_on_shutdown": False}
    stored = json.loads((store_dir / "server-ws" / "records" / "settings.json").read_text())
    assert stored["checkpoint_on_shutdown"] is False  # survives a restart of the server
    assert stored["workspace"] == "server-ws" and stored["signature"]["value"]  # 22.2: signed
    for bad in ({"checkpoint_on_shutdown": "no"}, {"other": True}, {}):
        code, body = await api.call("PUT", "gkeresume/api/settings", bad)
        assert code == 400, (bad, code, body)
    kid = await api.new_session("off.ipynb")
    await api.run_cell(kid, "x = 1")
    assert await api.serverapp.web_app.settings["gkeresume_orchestrator"].shutdown(5) == (
        "not checkpointed: checkpoint_on_shutdown is off")


async def test_snapshot_rows_say_why_and_ready_returns_to_running(api):
    kid = await api.new_session("why.ipynb")
    await api.run_cell(kid, "x = 1")
    assert (await api.pause())["state"] == "paused"
    code, body = await api.call("GET", "gkeresume/api/snapshots")
    assert [row["reason"] for row in body["snapshots"]] == ["user"]
    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    status = await api.settle()
    assert status["state"] == "ready", status
    progress = status["kernels"][0]["progress"]
    # the kernel answered: its reply ends the progress, whichever of its IOPub reports arrived
    # (a fast restore can outrun them: CI of 6864431 still saw "starting" here)
    assert progress is not None and progress["phase"] == "done", progress
    [kernel] = status["kernels"]
    assert await api.run_cell(kernel["kernel_id"], "print(x)") == "1\n"

    async def running():
        s = await api.status()
        return s["state"] == "running" and s["kernels"][0]["state"] == "running"

    for _ in range(int(SETTLE_TIMEOUT / 0.1)):
        if await running():
            break
        await asyncio.sleep(0.1)
    assert await running()


def test_reason_is_optional_in_the_manifest(local_store, signing_key):
    """Older manifests (no ``reason``) read and verify as before; a new one carries it."""
    old = make_snapshot(local_store, signing_key)
    assert "reason" not in old.to_dict()
    assert load_manifest(local_store, old.snapshot_id, signing_key).reason is None
    new = Manifest.from_json(old.to_json())
    new.reason = "idle"
    again = Manifest.from_json(new.to_json())
    assert again.reason == "idle" and again.to_dict()["reason"] == "idle"
    with pytest.raises(ManifestError, match="reason"):
        Manifest.from_dict({**new.to_dict(), "reason": 3})
