"""Files as the entries of one blob: what ``packages`` and ``extra_paths`` share.

``mapped(stack, path)`` is a file's bytes for ``BlobWriter.write_views`` (mapped, not read into
memory first). ``read_entries(store, digest)`` is every entry of a stored blob, returned only
once the whole blob matched its digest (``read_verified``): no byte of a file is written before.
``write_file(target, data, mode)`` writes one file atomically (a temporary beside it, renamed).
"""

from __future__ import annotations

import mmap
import os
from contextlib import ExitStack
from typing import TYPE_CHECKING

from jupyter_gkeresume.snapshot.blobfile import read_verified

if TYPE_CHECKING:
    from jupyter_gkeresume.snapshot import SnapshotStore


def mapped(stack: ExitStack, path: str | os.PathLike) -> object:
    """The bytes of the file at ``path``, mapped until ``stack`` closes."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return stack.enter_context(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def read_entries(store: SnapshotStore, digest: str) -> list[bytearray]:
    """The entries of blob ``digest``, its digest verified; raises ``IntegrityError`` else."""
    contents: list[bytearray] = []

    def entry(index: int, nbytes: int) -> memoryview:
        contents.append(bytearray(nbytes))
        return memoryview(contents[-1])

    with store.open_blob(digest) as (f, size):
        read_verified(f, digest, size, entry)
    return contents


def write_file(target: str, data: bytes | bytearray, mode: int | None = None) -> None:
    """Write ``target`` (its directories made) with ``data``; ``mode``: its permission bits
    (``None``: the default of a new file)."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    temporary = f"{target}.gkeresume-{os.getpid()}"
    with open(temporary, "wb") as f:
        f.write(data)
    if mode is not None:
        os.chmod(temporary, mode)
    os.replace(temporary, target)
