"""Content digests of blobs: the one registry of hash algorithms the snapshot format knows.

A digest string says its own algorithm, so blobs of every kind can live side by side in one
workspace and a name can never be read with the wrong hash:

- ``sha256``: 64 lowercase hex characters, bare (format v1 snapshots);
- ``blake3``: ``b3-`` and 64 lowercase hex characters (BLAKE3-256; format v2, the default).

Everything that names, checks or computes a digest (manifest validation, store paths and
listings, blob writing and verified reading) goes through ``algorithm_of`` / ``validate_digest``
and the ``Digest.new`` hasher, never through a test on the format version.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from ..errors import InvalidInputError

#: Blobs at least this big are hashed by BLAKE3 with all cores (its tree mode); smaller ones with
#: one thread. Blobs are hashed in parallel anyway (one writer or reader thread each), so this
#: pays for a few huge blobs on a many-core node; on a shared 2-core machine a threaded update of
#: an 8 MiB chunk measured slower than one thread (docs/benchmarks.md).
PARALLEL_HASH_BYTES = 64 << 20


class Hasher(Protocol):
    """The incremental hash interface both hashlib and blake3 provide."""

    def update(self, data: memoryview | bytes, /) -> object: ...

    def hexdigest(self) -> str: ...


@dataclass(frozen=True)
class Digest:
    """One algorithm: ``name`` (as docs and manifests say it), the ``prefix`` of its digest
    strings and ``new(size_hint)``, a fresh hasher for about ``size_hint`` bytes."""

    name: str
    prefix: str
    new_hasher: Callable[[int], Hasher]

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(rf"{re.escape(self.prefix)}[0-9a-f]{{64}}")  # used with fullmatch

    def new(self, size_hint: int = 0) -> Hasher:
        return self.new_hasher(size_hint)

    def finish(self, hasher: Hasher) -> str:
        """The digest string of what ``hasher`` was fed."""
        return self.prefix + hasher.hexdigest()

    def of(self, parts: Iterable[object], size_hint: int = 0) -> str:
        """Digest of the concatenation of ``parts`` (buffers, each used only while it is
        hashed: ring chunks are fine); hashing releases the GIL."""
        hasher = self.new(size_hint)
        for part in parts:
            hasher.update(memoryview(part).cast("B"))
        return self.finish(hasher)


def _blake3(size_hint: int) -> Hasher:
    import blake3  # here, not at import: a kernel's start names no digest (issue 31)

    threads = blake3.blake3.AUTO if size_hint >= PARALLEL_HASH_BYTES else 1
    return blake3.blake3(max_threads=threads)


SHA256 = Digest("sha256", "", lambda size_hint: hashlib.sha256())
BLAKE3 = Digest("blake3", "b3-", _blake3)

#: Every algorithm a digest string may use, and the one new blobs are named with.
ALGORITHMS: tuple[Digest, ...] = (SHA256, BLAKE3)
DEFAULT = BLAKE3


def algorithm_of(digest: object) -> Digest:
    """The algorithm a digest string names; ``InvalidInputError`` for anything else (this is
    also the path-traversal guard for blob names)."""
    if isinstance(digest, str):
        for algorithm in ALGORITHMS:
            if algorithm.pattern.fullmatch(digest):
                return algorithm
    raise InvalidInputError(
        f"not a blob digest: {digest!r} (64 hex digits for sha256, b3- and 64 hex for blake3)"
    )


def validate_digest(digest: object) -> str:
    """Return ``digest`` if it is a digest string of a known algorithm, else raise."""
    algorithm_of(digest)
    return digest  # type: ignore[return-value]


def is_digest(name: str) -> bool:
    """Whether ``name`` is a digest string of a known algorithm (for listings)."""
    return any(algorithm.pattern.fullmatch(name) for algorithm in ALGORITHMS)


def hex_part(digest: str) -> str:
    """The hex digits of a digest, without its algorithm prefix (for fan-out folders)."""
    return digest[len(algorithm_of(digest).prefix):]
