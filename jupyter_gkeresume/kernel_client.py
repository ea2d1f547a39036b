"""How the server calls ``kernel_hooks.server_api`` inside a running kernel.

Transport: one silent ``execute_request`` per call (see ``kernel_hooks/server_api.py`` for the
kernel side). Progress arrives on IOPub as display data of ``PROGRESS_MIME``; the outcome comes
back in the execute reply's ``user_expressions`` (shell channel, so it cannot be dropped like an
IOPub message). The call owns its own client (channels opened and closed here), so it never
interferes with the browser's websocket connection to the same kernel. It opens only the shell
and IOPub channels. jupyter_client's heartbeat channel is a thread whose ``stop`` joins it
without a timeout, on the server's event loop, and the thread may never end: a ``stop`` that comes
before the thread set ``_running = True`` is overwritten, so it pings on forever (a short call is
exactly that window), and its REQ socket blocks in ``send`` while no connection to a frozen kernel
is complete (``ZMQ_IMMEDIATE``). Either hung the whole server (``tests/test_server_kernel_call.py``).

``call_kernel`` raises ``KernelCallError`` when the kernel does not answer within ``timeout``,
is interrupted or dies; it returns the kernel's ``Outcome`` otherwise (messages:
``kernel_protocol``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from queue import Empty
from typing import Any

import zmq

from .errors import KernelCallError
from .kernel_protocol import PROGRESS_MIME, RESULT_EXPR, Outcome, Request, call_code

TIMEOUT_HINT = "the time allowed (GkeResume.kernel_call_timeout / shutdown_checkpoint_timeout)"


async def call_kernel(
    kernel_manager: Any,
    kernel_id: str,
    request: Request,
    *,
    timeout: float,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    queue_now: bool = False,
    on_sent: Callable[[], None] | None = None,
) -> Outcome:
    """Run ``server_api.run(request.action, request)`` in the kernel; return its outcome.

    ``queue_now``: send the request at once, behind whatever the kernel is running (no
    readiness round trip first, which a busy kernel answers only after its cell), and follow
    progress only if ``on_progress`` is given (IOPub may then miss the first reports). A hold
    must be in the kernel's queue before any cell sent after the pause started, a restore
    before any cell sent while the resume restores. ``on_sent()`` once the request is sent."""
    action = request.action
    client = own_client(kernel_manager.get_kernel(kernel_id))
    if queue_now:  # its sockets attach only completed connections: see _shell_connected
        client.context.setsockopt(zmq.IMMEDIATE, 1)
    client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
    try:
        deadline = time.monotonic() + timeout
        if queue_now:
            await _shell_connected(client, deadline)
        else:
            await _wait_for_ready(client, deadline)  # a busy kernel answers after its cell
        code = call_code(action, request.to_json())
        msg_id = client.execute(
            code, silent=True, store_history=False, user_expressions={"result": RESULT_EXPR}
        )
        if on_sent is not None:
            on_sent()
        reply_task = asyncio.ensure_future(_shell_reply(client, msg_id, deadline))
        try:
            if not queue_now or on_progress is not None:
                await _follow_iopub(client, msg_id, deadline, on_progress, reply_task)
            reply = await reply_task
        finally:
            reply_task.cancel()
    finally:
        client.stop_channels()
    content = reply["content"]
    if content.get("status") != "ok":
        raise KernelCallError(
            f"kernel {kernel_id}: {action} stopped: {content.get('ename', 'error')}: "
            f"{content.get('evalue', '')}".rstrip(": ")
        )
    expr = content.get("user_expressions", {}).get("result", {})
    outcome = expr.get("data", {}).get("application/json")
    if not isinstance(outcome, dict):
        raise KernelCallError(
            f"kernel {kernel_id} gave no result for {action} "
            f"({expr.get('ename', 'no kernel_hooks?')}: {expr.get('evalue', '')})"
        )
    return Outcome.from_dict(outcome)


def own_client(kernel: Any) -> Any:
    """A client of ``kernel`` with a session id (hence ZMQ identity) of its own.

    ``KernelManager.client()`` clones the manager's session, id included, and the id is the
    shell socket's identity; ipykernel sets ROUTER_HANDOVER, so a second client with the same
    identity takes the route over and the first one (another extension's, a test's) stops
    receiving its replies. A fresh id keeps every other client's replies where they belong.
    """
    client = kernel.client()
    client.session.session = str(uuid.uuid4())
    return client


async def _shell_connected(client: Any, deadline: float) -> None:
    """Until the shell socket has a completed connection to the kernel (``ZMQ_IMMEDIATE``: a
    pipe is attached only then, and the socket is writable only with one; libzmq's
    zmq_setsockopt(3)), so the request goes on the wire when it is sent: the kernel's shell
    thread reads the shell socket as messages arrive (ipykernel 7 ``ShellChannelThread``), so
    a cell another client sends afterwards is queued behind it. No round trip: a busy kernel
    would answer only after its cell."""
    socket = client.shell_channel.socket
    while not socket.get(zmq.EVENTS) & zmq.POLLOUT:
        if time.monotonic() > deadline:
            raise KernelCallError(f"the kernel's shell did not connect within {TIMEOUT_HINT}")
        await asyncio.sleep(0.005)


async def _wait_for_ready(client: Any, deadline: float) -> None:
    """Until the kernel answered a ``kernel_info`` request and IOPub is seen connected (a
    message arrived on it after the reply; otherwise ask again): jupyter_client's
    ``wait_for_ready`` without its last step, which drains IOPub until it has been quiet for
    0.2 s. That cost every call 0.2 s, and never ended while a thread of the kernel kept
    printing. What is left on IOPub does no harm: ``_follow_iopub`` takes only the messages of
    its own request."""
    while True:
        client.kernel_info()  # a busy kernel answers after its cell (then, each one asked)
        try:
            reply = await client.get_shell_msg(timeout=1)
        except (Empty, asyncio.TimeoutError):
            reply = None
        if reply is not None and reply["msg_type"] == "kernel_info_reply":
            try:
                await client.get_iopub_msg(timeout=0.2)
                return
            except (Empty, asyncio.TimeoutError):
                pass  # IOPub not connected yet: its status messages were lost
        if not await client.is_alive():
            raise KernelCallError("the kernel died before it answered")
        if time.monotonic() > deadline:
            raise KernelCallError(f"the kernel did not answer within {TIMEOUT_HINT}")


async def _follow_iopub(client: Any, msg_id: str, deadline: float, on_progress, reply_task) -> None:
    """Pass progress on until the kernel is idle after our request (or, should IOPub have
    dropped that status, until the reply is in and IOPub is quiet)."""
    reply_at: float | None = None
    while True:
        now = time.monotonic()
        if now > deadline:
            raise KernelCallError(f"the kernel did not finish within {TIMEOUT_HINT}")
        if reply_task.done():
            reply_at = reply_at or now
            if now - reply_at > 2:
                return
        try:
            msg = await client.get_iopub_msg(timeout=0.5 if reply_task.done() else 2)
        except (Empty, asyncio.TimeoutError):
            if reply_task.done():
                return
            if not await client.is_alive():
                raise KernelCallError("the kernel died") from None
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "display_data" and PROGRESS_MIME in content.get("data", {}) and on_progress:
            on_progress(content["data"][PROGRESS_MIME])
        elif kind == "status" and content.get("execution_state") == "idle":
            return


async def _shell_reply(client: Any, msg_id: str, deadline: float) -> dict[str, Any]:
    while True:
        try:
            reply = await client.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.1))
        except (Empty, asyncio.TimeoutError):
            raise KernelCallError(f"the kernel sent no reply within {TIMEOUT_HINT}") from None
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply
