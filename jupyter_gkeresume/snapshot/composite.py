"""Parallel composite upload: a large blob goes up as parts, concurrently, composed server-side.

One resumable session runs at one stream's speed; a blob above ``CompositePolicy.threshold`` is
cut into at most 32 parts (GCS composes up to 32 components in one request), each uploaded with
its crc32c by ``GcsUpload`` (``parallel`` at a time), then composed under the blob's final name
with ``fs.merge`` (GCS ``compose``). The composed object's crc32c must equal the parts' CRCs
combined (composite objects have a crc32c but no md5) and its size the blob's, else it is removed.

Parts are named ``{final}.tmp-{hex}.part{NN}`` beside the final name: never a valid blob name, and
what ``SnapshotStore.list_partial_writes`` lists, so gc sweeps the parts of a writer that died.
A live writer removes its parts once composed, and on any failure (best effort).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from . import checksum, gcs_api
from .gcs_upload import GCS_CHUNK_QUANTUM, GcsUpload, slice_views
from .transfer_types import ChecksumMismatch, StoredObject, UploadInterrupted

MAX_COMPONENTS = 32
MIB = 1 << 20


@dataclass(frozen=True)
class CompositePolicy:
    """When and how a blob is split. ``threshold``: blobs bigger than this go up in parts (0:
    never); ``part_bytes``: the smallest part (a multiple of 256 KiB; parts grow so that there
    are at most 32); ``parallel``: parts in flight at once, per blob."""

    threshold: int = 128 * MIB
    part_bytes: int = 32 * MIB
    parallel: int = 4

    def __post_init__(self) -> None:
        if self.threshold < 0 or self.parallel < 1:
            raise ValueError(f"invalid composite policy {self}")
        if self.part_bytes <= 0 or self.part_bytes % GCS_CHUNK_QUANTUM:
            raise ValueError(f"composite part size {self.part_bytes} is not a multiple of 256 KiB")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CompositePolicy:
        """The default, with ``GKERESUME_COMPOSITE_MIB`` (threshold in MiB, 0 = off) applied;
        a threshold below 64 MiB also makes the parts half the threshold."""
        env = os.environ if env is None else env
        raw = env.get("GKERESUME_COMPOSITE_MIB", "").strip()
        if not raw:
            return cls()
        try:
            threshold = int(raw) * MIB
            half = max(GCS_CHUNK_QUANTUM, threshold // 2 // GCS_CHUNK_QUANTUM * GCS_CHUNK_QUANTUM)
            return cls(threshold=threshold, part_bytes=min(cls.part_bytes, half))
        except ValueError:
            raise ValueError(f"GKERESUME_COMPOSITE_MIB must be a whole number of MiB, not {raw!r}") from None

    def applies(self, size: int) -> bool:
        return 0 < self.threshold < size and size > self.part_bytes


def plan_parts(size: int, part_bytes: int) -> list[tuple[int, int]]:
    """``(start, end)`` byte ranges covering ``size``: parts of ``part_bytes`` or more (a multiple
    of 256 KiB, grown so there are at most 32), the last one the remainder."""
    per = max(part_bytes, -(-size // MAX_COMPONENTS))
    per = -(-per // GCS_CHUNK_QUANTUM) * GCS_CHUNK_QUANTUM
    return [(start, min(size, start + per)) for start in range(0, size, per)]


def upload_composite(fs: Any, path: str, views: list[memoryview], chunk_bytes: int,
                     policy: CompositePolicy) -> StoredObject:
    """Upload ``views`` (the blob, in order) to ``path`` as composed parts; returns the checked
    stored object. Raises ``UploadInterrupted`` (restartable) or the part's own error."""
    size = sum(len(v) for v in views)
    ranges = plan_parts(size, policy.part_bytes)
    stem = f"{path}.tmp-{uuid.uuid4().hex}"
    names = [f"{stem}.part{i:02d}" for i in range(len(ranges))]
    try:
        with ThreadPoolExecutor(min(policy.parallel, len(ranges))) as pool:
            parts = list(pool.map(
                lambda job: GcsUpload(fs, job[0], chunk_bytes).run(slice_views(views, *job[1])),
                zip(names, ranges, strict=True)))
        expected = 0
        for part in parts:
            assert part.crc32c is not None
            expected = checksum.combine(expected, part.crc32c, part.size)
        fs.merge(path, names)
        stored = StoredObject(*gcs_api.stat(fs, path))
        if stored != StoredObject(size, expected):
            with contextlib.suppress(FileNotFoundError):
                fs.rm_file(path)
            kind = UploadInterrupted if stored.size != size else ChecksumMismatch
            raise kind(f"the composed object is {stored}, not {StoredObject(size, expected)}")
        return stored
    finally:
        with contextlib.suppress(Exception):  # leftovers are swept by gc (``.tmp-`` names)
            fs.rm(names)
