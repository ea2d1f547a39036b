"""One store resolution (issue 12.3): a server configured only through its config file
(``c.GkeResume.store_url``, no ``GKERESUME_STORE``) hands its store and workspace to the kernels
it starts, so ``%checkpoint`` / ``%snapshots`` / ``%resume latest`` there see the Pause button's
snapshots and the server sees theirs."""

from __future__ import annotations


def test_kernels_use_the_store_of_the_server_config(server_process, tmp_path, monkeypatch):
    monkeypatch.delenv("GKERESUME_STORE", raising=False)
    monkeypatch.delenv("GKERESUME_WORKSPACE", raising=False)
    store = tmp_path / "configured-store"
    server = server_process("srv", {"GkeResume": {
        "store_url": str(store), "workspace_id": "cfg-ws", "release_backend": "none"}})
    kid = server.new_session("cfg.ipynb")
    server.run_cell(kid, "x = 'from the button'")
    code, body = server.call("POST", "gkeresume/api/pause", {"release": False, "name": "button"})
    assert code == 202, body
    status = server.wait_for(lambda s: s["operation"] is None, "checkpointed")
    assert status["state"] == "running", status
    button_id = status["last_snapshot"]["id"]

    out = server.run_cell(kid, "%snapshots")
    assert button_id in out, out
    server.run_cell(kid, "x = 'changed'\n%resume latest")
    assert server.run_cell(kid, "print(x)") == "from the button\n"

    server.run_cell(kid, "y = 2\n%checkpoint -n magic")
    status = server.status()
    rows = server.call("GET", "gkeresume/api/snapshots")[1]["snapshots"]
    assert sorted(r["name"] for r in rows) == ["button", "magic"], rows
    assert (store / "cfg-ws").is_dir()
    assert status["store"] == str(store)
