"""Host memory that NumPy and torch share: ``torch.from_numpy(a)`` is a tensor over ``a``'s
memory, ``t.numpy()`` an array over ``t``'s storage. Each library's pickling copies, so the two
came back as separate copies and a write through one no longer showed in the other.

``StorageCollector`` (``storages``) records each NumPy root array and torch CPU storage it meets
(``add``); one of the other library that lies inside a recorded one (``within``) is rebuilt over
it at resume (``rebuild.storage_in_array``, ``rebuild.array_in_storage``) instead of being
pickled on its own. Exact starts are looked up for every region; a region starting inside
another is found only inside one of ``LARGE`` bytes or more (few: a session may hold a great many
small arrays, and each lookup must stay cheap).
"""

from __future__ import annotations

import bisect
from typing import Any

LARGE = 64 << 10


class HostRegions:
    """Host regions met while pickling one graph, each with its kind ("numpy" or "torch") and
    its owner (the root array, or the untyped storage)."""

    def __init__(self) -> None:
        self._at: dict[int, tuple[int, str, Any]] = {}  # start -> (end, kind, owner)
        self._large: list[int] = []  # sorted starts of regions of LARGE bytes or more

    def add(self, start: int, nbytes: int, kind: str, owner: Any) -> None:
        if nbytes <= 0 or start in self._at:
            return
        self._at[start] = (start + nbytes, kind, owner)
        if nbytes >= LARGE:
            bisect.insort(self._large, start)

    def within(self, start: int, nbytes: int, kind: str) -> tuple[int, Any] | None:
        """``(offset, owner)`` of a region of the other kind holding ``[start, start + nbytes)``,
        else None."""
        if nbytes <= 0:
            return None
        for candidate in (start, self._large_start_before(start)):
            found = self._at.get(candidate) if candidate is not None else None
            if found is not None and found[1] != kind and found[0] >= start + nbytes:
                return start - candidate, found[2]
        return None

    def _large_start_before(self, start: int) -> int | None:
        index = bisect.bisect_right(self._large, start) - 1
        return self._large[index] if index >= 0 else None
