"""A stopping kernel is watched closely (``kernels.exited``) before jupyter_client's own graceful
stop, which polls every 0.1 s (issue 31, item 2: the pause's fixed cost), and a kernel that is
slow to exit still gets jupyter_client's escalation.

Real kernels through jupyter_client's ``AsyncKernelManager``, the class jupyter_server's kernel
managers derive from (jupyter_client/manager.py: ``_async_shutdown_kernel`` interrupts, requests
the shutdown, ``_async_finish_shutdown`` polls, then SIGTERM and SIGKILL after
``shutdown_wait_time``)."""

from __future__ import annotations

import asyncio
import os

from jupyter_client.ioloop import AsyncIOLoopKernelManager
from jupyter_client.manager import AsyncKernelManager, _ShutdownStatus
from traitlets.config import Config

from jupyter_gkeresume import kernels


async def started(tmp_path) -> AsyncKernelManager:
    manager = AsyncKernelManager(kernel_name="python3")
    await manager.start_kernel(cwd=str(tmp_path), env=dict(os.environ))
    return manager


async def test_a_kernel_that_exits_is_seen_gone_and_its_stop_needs_no_signal(tmp_path):
    manager = await started(tmp_path)
    await kernels.exited(manager)
    assert not await manager.is_alive()
    await manager.shutdown_kernel()
    assert manager._shutdown_status == _ShutdownStatus.ShutdownRequest, "no SIGTERM, no SIGKILL"


async def test_a_kernel_slow_to_exit_is_left_to_jupyter_clients_escalation(tmp_path, monkeypatch):
    monkeypatch.setattr(kernels, "EXIT_WATCH_SECONDS", 0.3)
    manager = await started(tmp_path)
    client = manager.client()
    client.start_channels(hb=False)  # see tests/test_server_kernel_call.py
    try:
        reply = await client.execute("import atexit, time\natexit.register(time.sleep, 60)",
                                     reply=True, timeout=60)
        assert reply["content"]["status"] == "ok"
    finally:
        client.stop_channels()
    await kernels.exited(manager)
    assert await manager.is_alive(), "still in its exit handler: the watch gave up"
    manager.shutdown_wait_time = 2.0
    await manager.shutdown_kernel()
    assert not await manager.is_alive()
    assert manager._shutdown_status in (_ShutdownStatus.SigtermRequest,
                                        _ShutdownStatus.SigkillRequest)


async def test_the_restarter_does_not_bring_back_a_kernel_asked_to_exit(tmp_path):
    """CI (stop 40): an idle pause hung in ``releasing``. The kernel exited on ``exited``'s
    request while jupyter_client's restarter still watched it; the restarter saw a dead kernel
    and restarted it ("restarting kernel (1/5)") under the shutdown that followed. jupyter_client's
    own shutdown marks ``shutting_down`` and stops the restarter before it asks
    (jupyter_client/manager.py ``_async_shutdown_kernel``; restarter.py ``poll`` returns while
    ``shutting_down``). The restarter here polls every 20 ms, so it always looks in that window."""
    manager = AsyncIOLoopKernelManager(
        kernel_name="python3", config=Config({"KernelRestarter": {"time_to_dead": 0.02}}))
    await manager.start_kernel(cwd=str(tmp_path), env=dict(os.environ))
    restarts = []
    manager.start_restarter()
    manager.add_restart_callback(lambda: restarts.append("restart"))
    try:
        await kernels.exited(manager)
        await asyncio.sleep(0.5)  # many restarter polls
        assert restarts == [], "the restarter restarted a kernel asked to exit"
        assert not await manager.is_alive()
    finally:
        await manager.shutdown_kernel(now=True)
