"""A real ``jupyter server`` process logs what is wrong with its signing key once at startup
(issue 13.5): a key that also signs another workspace's snapshots, and, loudly, a default key
file created anew while the workspace has earlier snapshots."""

from __future__ import annotations

import time

from fixtures_lifecycle import make_snapshot
from fixtures_server import ServerProcess, server_config

from jupyter_gkeresume.snapshot import SnapshotStore
from jupyter_gkeresume.snapshot.signing import SigningKey


def startup_log(tmp_path, env, wanted: str) -> str:
    config = server_config(str(tmp_path / "store"))
    config["GkeResume"]["release_backend"] = "none"
    server = ServerProcess(tmp_path / "server", config, env)
    server.start()
    try:
        deadline = time.monotonic() + 60  # a safety net: the hook runs just after the server listens
        while wanted not in server.log() and time.monotonic() < deadline:
            time.sleep(0.2)
        return server.log()
    finally:
        server.stop()


def test_a_key_set_cluster_wide_is_warned_about(tmp_path):
    shared = "one-key-for-every-user-" + "7" * 20
    make_snapshot(SnapshotStore(str(tmp_path / "store"), "hub-bob"), SigningKey(shared.encode()))
    log = startup_log(tmp_path, {"GKERESUME_SIGNING_KEY": shared}, "hub-bob")
    assert "also signs snapshots of other workspaces (hub-bob)" in log, log
    assert "$GKERESUME_SIGNING_KEY" in log and shared not in log


def test_a_new_default_key_over_earlier_snapshots_is_loud(tmp_path, monkeypatch):
    monkeypatch.delenv("GKERESUME_SIGNING_KEY", raising=False)
    monkeypatch.delenv("GKERESUME_SIGNING_KEY_FILE", raising=False)
    make_snapshot(SnapshotStore(str(tmp_path / "store"), "server-ws"), SigningKey(b"the-lost-key"))
    log = startup_log(tmp_path, {}, "SIGNING KEY CHANGED")
    assert "the key changed; earlier snapshots will be refused" in log, log
    assert (tmp_path / "server" / "data" / "gkeresume" / "signing.key").exists()
