"""A store that fails in the middle of a pause: nothing is released, the kernel is unchanged,
the state goes back to ``running`` with the reason. Real GCS API (fake-gcs-server) behind the
fault-injecting proxy, a real in-process jupyter_server and a real kernel."""

from __future__ import annotations

import pytest
from fixtures_server import RecordingRelease, server_config


@pytest.fixture
def jp_server_config(gcs_faulty, monkeypatch):
    for name, value in gcs_faulty.bucket.env.items():
        monkeypatch.setenv(name, value)  # the server and the kernels it starts
    return server_config(gcs_faulty.bucket.url)


async def test_store_failure_mid_pause_releases_nothing(api, gcs_faulty):
    kid = await api.new_session("nb.ipynb")
    await api.run_cell(kid, "import numpy as np\nweights = np.arange(300_000.0)\nstep = 7")
    gcs_faulty.proxy.inject("status", count=10_000, match="/upload/", status=403)

    status = await api.pause()

    assert status["state"] == "running", status
    assert "pause failed, nothing was released" in status["reason"]
    assert status["last_error"]["operation"] == "pause"
    assert status["paused"] is None
    assert RecordingRelease.calls == []
    assert gcs_faulty.proxy.outcomes("/upload/")  # the failure did happen in the store
    [kernel] = status["kernels"]
    assert kernel["kernel_id"] == kid and kernel["state"] == "running"
    out = await api.run_cell(kid, "print(weights.sum(), step)")
    assert out == f"{float(sum(range(300_000)))} 7\n"

    gcs_faulty.proxy.clear()  # the store is back: the same kernel pauses fine now
    status = await api.pause()
    assert status["state"] == "paused", status
    assert len(RecordingRelease.calls) == 1


async def test_store_down_at_startup_then_back(api, gcs_faulty):
    from jupyter_gkeresume.snapshot import SnapshotStore
    from jupyter_gkeresume.snapshot.records import sign_record
    from jupyter_gkeresume.snapshot.signing import load_signing_key

    store = SnapshotStore(gcs_faulty.bucket.url, "server-ws", gcs_faulty.bucket.storage_options)
    record = {"version": 1, "workspace": "server-ws", "paused_at": "2026-11-30T10:15:00Z",
              "reason": "user", "release_backend": "recording", "gpus": 0,
              "kernels": [{"kernel_id": "old", "kernel_name": "python3", "notebook": "a.ipynb",
                           "snapshot_id": "20261130T101500Z-a1b2c3", "bytes_total": 1}]}
    store.write_record("paused", sign_record("paused", record, load_signing_key(workspace="server-ws")))
    gcs_faulty.proxy.inject("status", count=10_000, match="/b/", status=403)

    status = await api.status()  # the first request reads the paused record: the store refuses
    assert status["state"] == "running" and status["paused"] is None
    assert status["last_error"]["operation"] == "startup"
    assert status["last_snapshot"]["error"]

    gcs_faulty.proxy.clear()
    status = await api.status()  # the next request tries again
    assert status["state"] == "paused"
    assert status["paused"] == {**record, "not_saved": [], "documents": None, "idle": None,
                                "kernels": [{**record["kernels"][0], "bytes_new": 0,
                                             "skipped": [], "modules": []}]}
