"""Cell numbers across a pause and a resume through the real server: the server's checkpoint is a
silent execute request (``kernel_client``: ``silent=True, store_history=False``), which IPython
does not count (IPython/core/interactiveshell.py ``run_cell``: only ``store_history`` moves
``execution_count``), so the count the kernel holds then is already the next cell's."""

from __future__ import annotations

import pytest
from fixtures_server import server_config

from jupyter_gkeresume.kernel_client import own_client


@pytest.fixture
def jp_server_config(store_dir):
    return server_config(str(store_dir))


async def cell_number(api, kernel_id: str, code: str) -> tuple[int, str]:
    """Run ``code`` as a counted cell; its number (the execute reply's, what ``In[N]`` shows)
    and its status."""
    client = own_client(api.serverapp.kernel_manager.get_kernel(kernel_id))
    client.start_channels(hb=False)  # see tests/test_server_kernel_call.py
    try:
        await client.wait_for_ready(timeout=60)
        reply = await client.execute_interactive(code, timeout=120)
    finally:
        client.stop_channels()
    return reply["content"]["execution_count"], reply["content"]["status"]


async def test_the_next_cell_after_a_resume_gets_the_number_it_would_have_had(api):
    """Three cells ran: the uninterrupted kernel's next cell would be In[4], and so is the
    resumed kernel's; ``In`` holds the cells at their numbers."""
    kid = await api.new_session("numbers.ipynb")
    for number, cell in enumerate(("x = 1", "y = 2", "z = x + y"), start=1):
        assert await cell_number(api, kid, cell) == (number, "ok")
    status = await api.pause()
    assert status["state"] == "paused", status

    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    status = await api.settle()
    [kernel] = status["kernels"]
    assert kernel["state"] == "ready", status
    assert await cell_number(api, kernel["kernel_id"], "z / 0") == (4, "error")
    assert await cell_number(api, kernel["kernel_id"], "assert In[3] == 'z = x + y'") == (5, "ok")
