"""The server's open terminals are named in the status (issue 21 item 4): no snapshot holds a
terminal, so the lab's pause message says a release ends them.

jupyter_server_terminals keeps its ``TerminalManager`` in the web app's settings as
``terminal_manager`` (jupyter_server_terminals/app.py ``initialize_handlers``) and lists the open
ones as ``[{"name", "last_activity"}]`` (terminalmanager.py ``TerminalManager.list``).
"""

from __future__ import annotations

import pytest
from fixtures_server import server_config


@pytest.fixture
def jp_server_config(store_dir):
    config = server_config(str(store_dir))
    config["ServerApp"]["jpserver_extensions"]["jupyter_server_terminals"] = True
    return config


async def test_status_names_the_open_terminals(api):
    assert (await api.status())["terminals"] == []
    code, terminal = await api.call("POST", "api/terminals")
    assert code == 200, terminal
    try:
        assert (await api.status())["terminals"] == [terminal["name"]]
    finally:
        await api.call("DELETE", f"api/terminals/{terminal['name']}")
    assert (await api.status())["terminals"] == []
