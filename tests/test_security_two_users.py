"""Two users, one store (issue 13.1): two real ``jupyter server`` processes, one per JupyterHub
identity that the old slug mapped to the same workspace, never see, delete or overwrite each
other's snapshots or paused records."""

from __future__ import annotations

from fixtures_lifecycle import make_snapshot
from fixtures_server import ServerProcess

from jupyter_gkeresume.snapshot import SnapshotStore
from jupyter_gkeresume.snapshot.signing import SigningKey
from jupyter_gkeresume.workspace import resolve_workspace_id

USERS = ("alice@corp.com", "alice-corp.com")  # both were "hub-alice-corp.com"


def user_server(tmp_path, store: str, user: str, key: str) -> ServerProcess:
    config = {"GkeResume": {"store_url": store, "release_backend": "none"}}
    env = {"JUPYTERHUB_USER": user, "GKERESUME_SIGNING_KEY": key}
    return ServerProcess(tmp_path / user.replace("@", "_at_"), config, env)


def test_two_users_on_one_store_stay_apart(tmp_path, monkeypatch):
    monkeypatch.delenv("GKERESUME_WORKSPACE", raising=False)
    store = str(tmp_path / "bucket")
    ids = [resolve_workspace_id(env={"JUPYTERHUB_USER": u}) for u in USERS]
    assert ids[0] != ids[1]
    keys = ["key-of-alice-at-corp-" + "1" * 16, "key-of-alice-dash-corp-" + "2" * 16]
    mine = make_snapshot(SnapshotStore(store, ids[0]), SigningKey(keys[0].encode()), name="base")
    servers = [user_server(tmp_path, store, u, k) for u, k in zip(USERS, keys, strict=True)]
    for server in servers:
        server.start()
    try:
        a, b = servers
        assert a.status()["workspace"] == ids[0] and b.status()["workspace"] == ids[1]
        code, listed = b.call("GET", "gkeresume/api/snapshots")
        assert code == 200 and listed["snapshots"] == []
        code, _ = b.call("DELETE", f"gkeresume/api/snapshots/{mine.snapshot_id}")
        assert code == 404  # not B's to delete: B's workspace has no such snapshot
        code, _ = b.call("POST", "gkeresume/api/resume", {"snapshot": "base"})
        assert code == 404
        code, listed = a.call("GET", "gkeresume/api/snapshots")
        assert code == 200 and [r["id"] for r in listed["snapshots"]] == [mine.snapshot_id]
    finally:
        for server in servers:
            server.stop()
