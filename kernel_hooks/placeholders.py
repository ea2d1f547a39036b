"""What stands in for objects that cannot be captured, and how they are recognised.

``uncapturable_reason(obj)`` names the kinds of object that hold live process resources (running
frames: a generator that has started, a coroutine; file descriptors, sockets, threads, child
processes, database cursors; locks are ``live_objects``': a free one comes back new, a held one is
named): pickling them is either impossible or would restore something dead. The capture replaces
them with ``Uncaptured`` and reports them; everything around them is still saved. Files ``open()``
returns are ``live_objects``' (reopened, or back closed); any other closed stream holds nothing of
the process: it is named as what it is. In-memory streams (``io.BytesIO``, ``io.StringIO``) are
data and pickle with their contents.
"""

from __future__ import annotations

import inspect
import io
import socket
import sqlite3
import subprocess
import threading
import types

_OPEN_STREAM = "an open file or stream belongs to this process"
_REASONS: tuple[tuple[tuple[type, ...], str], ...] = (
    ((types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType),
     "a generator or coroutine holds a running frame"),
    ((socket.socket,), "an open network connection cannot move to another process"),
    ((threading.Thread,), "a thread cannot move to another process"),
    ((subprocess.Popen,), "a child process stays on this pod: start it again after resume"),
    ((sqlite3.Cursor,), "a database cursor cannot move to another process (its connection "
                        "is reopened when its file is on the home volume: live_objects)"),
    ((types.FrameType, types.TracebackType), "a frame or traceback of this process"),
)


#: A generator not started yet or finished holds no running frame: ``remade`` makes it again.
REMADE_GENERATORS = (inspect.GEN_CREATED, inspect.GEN_CLOSED)
#: Streams that hold their data in memory: they pickle (contents and position) while open.
IN_MEMORY = (io.BytesIO, io.StringIO)
SHOWN_CHARS = 120


def uncapturable_reason(obj: object) -> str | None:
    """Why ``obj`` cannot be captured, or None when it may be."""
    if isinstance(obj, io.IOBase):
        return _stream_reason(obj)
    if type(obj) is types.GeneratorType and inspect.getgeneratorstate(obj) in REMADE_GENERATORS:
        return None  # holds no running frame: made again (``remade``)
    for kinds, reason in _REASONS:
        if isinstance(obj, kinds):
            return reason
    return None


def _stream_reason(stream: io.IOBase) -> str | None:
    try:
        closed = stream.closed
    except ValueError:  # a wrapper whose buffer was detached
        closed = True
    if not closed:
        return None if isinstance(stream, IN_MEMORY) else _OPEN_STREAM
    try:
        name = getattr(stream, "name", None)
    except ValueError:  # detached
        name = None
    shown = f" {str(name)[:SHOWN_CHARS]!r}" if isinstance(name, (str, bytes)) else ""
    kind = "stream" if isinstance(stream, IN_MEMORY) else "file"
    return (f"a closed {kind}{shown}: nothing is open to carry (open it again after resume if "
            "it is needed)")


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
