"""Values computed from what directories hold (the installed distributions, their versions),
reused while none of the directories changed.

Installing, upgrading or removing a distribution adds or removes entries of its ``sys.path``
directory (its ``*.dist-info``), which moves that directory's modification time; so a value
computed from the directories of ``sys.path`` holds while each of them has the ``(device,
inode, mtime)`` it had. A directory modified less than ``SETTLE_SECONDS`` before the value was
computed is not trusted: a file system with a coarse clock (a second on some network file
systems) may show a second change within the same tick with the same time: such a value is
computed again at the next call. A directory that does not exist (``sys.path`` names some) is
one too: its appearing is a change.

A checkpoint asked this of every ``sys.path`` directory each time: reading the metadata of the
key packages and the names and times of every distribution took 15 ms of an unchanged
checkpoint.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

#: See the module docstring.
SETTLE_SECONDS = 2.0


class ListingCache:
    """One value per ``key`` and tuple of directories, kept while they stay as they were
    (see the module docstring). Values are shared: callers must not change them."""

    def __init__(self) -> None:
        self._kept: dict[Hashable, tuple[tuple, Any]] = {}  # one get or set at a time: the GIL

    def get(self, key: Hashable, directories: Iterable[str], compute: Callable[[], T]) -> T:
        """The value ``compute()`` gave for ``key`` over ``directories`` while they have not
        changed since, else ``compute()`` now."""
        directories = tuple(directories)
        state = _state(directories)
        kept = self._kept.get(key)
        if kept is not None and kept[0] == state:
            return kept[1]
        started = time.time()
        value = compute()
        settled = all(stat is None or stat[2] < (started - SETTLE_SECONDS) * 1e9
                      for _, stat in state)
        if settled:  # a change while it was computed moved a time: read again next call
            self._kept[key] = (state, value)
        return value


def path_directories(paths: Iterable[str]) -> tuple[str, ...]:
    """``paths`` (``sys.path``'s form) as absolute directories, each once; not "" (the
    working directory)."""
    return tuple(dict.fromkeys(os.path.abspath(p) for p in paths if p))


def _state(directories: tuple[str, ...]) -> tuple[tuple[str, tuple[int, int, int] | None], ...]:
    """``(device, inode, mtime in ns)`` of each directory (None: there is none to read)."""
    out = []
    for directory in directories:
        try:
            st = os.stat(directory)
        except (OSError, ValueError):
            out.append((directory, None))
            continue
        out.append((directory, (st.st_dev, st.st_ino, st.st_mtime_ns)))
    return tuple(out)
