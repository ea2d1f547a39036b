"""A server call into a kernel that does not answer ends at its timeout and never blocks the
server (``kernel_client.call_kernel``).

Found by CI (stop 39): the second pause of ``test_server_one_kernel`` hung in
``client.stop_channels()``. jupyter_client's heartbeat channel (jupyter_client/channels.py
``HBChannel``) is a thread that ``stop`` joins with no timeout, on the server's event loop. It may
never end: a ``stop`` before the thread's ``_running = True`` is overwritten and the thread pings
on (the short hold call of that test is that window), and its REQ socket blocks in ``send`` while
no connection to the kernel is complete, since the call sets ``ZMQ_IMMEDIATE`` on its client's
context (libzmq zmq_setsockopt(3): "messages shall be queued only to completed connections").
The race cannot be forced from outside; the frozen kernel below hangs the same join every time.
A stopped kernel process (SIGSTOP) completes no handshake: the real shape of a kernel that is
swapped out, frozen or gone unresponsive.

A real kernel through jupyter_client's ``AsyncMultiKernelManager``, the base of jupyter_server's
kernel manager."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

from jupyter_client.multikernelmanager import AsyncMultiKernelManager

from jupyter_gkeresume.errors import KernelCallError
from jupyter_gkeresume.kernel_client import call_kernel
from jupyter_gkeresume.kernel_protocol import HoldRequest


def test_a_call_to_a_frozen_kernel_ends_at_its_timeout(tmp_path):
    loop = asyncio.new_event_loop()
    manager = AsyncMultiKernelManager()
    kid = loop.run_until_complete(
        manager.start_kernel(kernel_name="python3", cwd=str(tmp_path), env=dict(os.environ)))
    pid = manager.get_kernel(kid).provisioner.process.pid
    ended: list[BaseException | None] = []

    def call() -> None:
        """On a thread of its own, so a hang fails this test instead of the whole run."""
        request = HoldRequest(pausing=True, reason="test")
        try:
            asyncio.run(call_kernel(manager, kid, request, timeout=1.5, queue_now=True))
        except BaseException as exc:  # the outcome is asserted below
            ended.append(exc)
        else:
            ended.append(None)

    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        caller.join(30)
        assert not caller.is_alive(), "the call hung past its timeout"
        assert time.monotonic() - started < 15
        [error] = ended
        assert isinstance(error, KernelCallError), error
    finally:
        os.kill(pid, signal.SIGCONT)
        loop.run_until_complete(manager.shutdown_kernel(kid, now=True))
        loop.close()

