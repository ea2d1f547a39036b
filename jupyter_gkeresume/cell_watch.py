"""``RunningCells``: which cell each kernel is running, and since when.

jupyter_server tracks a kernel's ``execution_state`` (busy/idle) from IOPub but not which cell
runs; a queued pause says "waiting for cell N of notebook X, running for S seconds". So each
kernel the server starts gets one extra IOPub subscription here (``watch``): only the header of
each message is decoded, and the content only of ``execute_input`` (the one message that names
the execution count). Silent executes (our own kernel calls) publish no ``execute_input``, so
every message whose parent is the request of a user's cell (its input, its output, its end) is
a person's activity (``on_activity(kid)``, the idle pause's clock).

Call order: ``watch(kid, kernel)`` once the kernel started (``kernels.guard_kernel_starts``),
``current(kid)`` any time, ``forget(kid)`` when it stops (``prune(live)`` drops every gone one),
``close()`` when the server stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from jupyter_client.session import Session


class RunningCells:
    """The last cell each watched kernel started: ``(execution_count, started_at)``;
    ``on_cell(kernel_id)`` is called as each one starts, ``on_activity(kernel_id)`` on each
    message of a user's cell."""

    def __init__(self, on_cell: Callable[[str], None] | None = None,
                 on_activity: Callable[[str], None] | None = None) -> None:
        self.on_cell = on_cell
        self.on_activity = on_activity
        self._cells: dict[str, tuple[int | None, float]] = {}
        self._requests: dict[str, str] = {}  # the msg_id of the last user cell's request
        self._streams: dict[str, Any] = {}

    def watch(self, kid: str, kernel: Any) -> None:
        if kid in self._streams:
            return
        stream = kernel.connect_iopub()  # a ZMQStream on the server's IOLoop
        session = Session(config=kernel.session.config, key=kernel.session.key)

        def on_message(parts: list) -> None:
            _, frames = session.feed_identities(parts)
            msg = session.deserialize(frames, content=False)
            parent = msg["parent_header"].get("msg_id")
            if msg["header"]["msg_type"] == "execute_input":
                content = session.deserialize(frames)["content"]
                self._cells[kid] = (content.get("execution_count"), time.time())
                self._requests[kid] = parent
                if self.on_cell is not None:
                    self.on_cell(kid)
            if self.on_activity is not None and parent and parent == self._requests.get(kid):
                self.on_activity(kid)

        stream.on_recv(on_message)
        self._streams[kid] = stream

    def current(self, kid: str) -> tuple[int | None, float] | None:
        """The execution count and start time of the last cell ``kid`` started (None: none
        seen since the server watched it)."""
        return self._cells.get(kid)

    def forget(self, kid: str) -> None:
        stream = self._streams.pop(kid, None)
        self._cells.pop(kid, None)
        self._requests.pop(kid, None)
        if stream is not None and not stream.closed():
            stream.close()

    def prune(self, live: set[str]) -> None:
        for kid in [k for k in self._streams if k not in live]:
            self.forget(kid)

    def close(self) -> None:
        """Close every subscription (the server stops: each holds ZMQ sockets, hence fds)."""
        self.prune(set())
