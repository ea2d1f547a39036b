"""What stands in for objects that cannot be captured, and how they are recognised.

``uncapturable_reason(obj)`` names the kinds of object that hold live process resources (running
frames, file descriptors, sockets, locks, threads, database connections): pickling them is either
impossible or would restore something dead. The capture replaces them with ``Uncaptured`` and
reports them; everything around them is still saved.
"""

from __future__ import annotations

import _thread
import io
import socket
import sqlite3
import threading
import types

_REASONS: tuple[tuple[tuple[type, ...], str], ...] = (
    ((types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType),
     "a generator or coroutine holds a running frame"),
    ((io.IOBase,), "an open file or stream belongs to this process"),
    ((socket.socket,), "an open network connection cannot move to another process"),
    ((threading.Thread,), "a thread cannot move to another process"),
    ((_thread.LockType, _thread.RLock, type(threading.RLock())),
     "a lock belongs to this process"),
    ((sqlite3.Connection, sqlite3.Cursor), "a database connection cannot move to another process"),
    ((types.FrameType, types.TracebackType), "a frame or traceback of this process"),
)


def uncapturable_reason(obj: object) -> str | None:
    """Why ``obj`` cannot be captured, or None when it may be."""
    for kinds, reason in _REASONS:
        if isinstance(obj, kinds):
            return reason
    return None


def type_name(obj: object) -> str:
    t = type(obj)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


class Uncaptured:
    """Restored in place of an object that could not be captured; says what it was and why."""

    def __init__(self, type_name: str, reason: str):
        self.type_name = type_name
        self.reason = reason

    def __repr__(self) -> str:
        return f"<not restored: {self.type_name} ({self.reason})>"

    def __reduce__(self):
        return (Uncaptured, (self.type_name, self.reason))
