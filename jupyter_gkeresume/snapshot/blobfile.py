"""Blob files: safetensors layout, written as a stream and read back with digest verification.

A blob is a valid safetensors file (readable by ``safetensors.safe_open``) whose tensors are named
``"0", "1", ...`` in order. Its name in the store is the digest of the whole file (BLAKE3 for
new blobs, sha256 in v1 snapshots: the digest string says which, see ``digests``), so equal
content is stored once. The header depends only on the entries' dtypes and sizes, so a blob's
digest is a pure function of its content.

Nothing here imports torch or numpy: callers hand in buffers (anything ``memoryview`` accepts) and
receive bytes into buffers they allocated.
"""

from __future__ import annotations

import functools
import itertools
import json
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import IntegrityError
from .digests import DEFAULT, Digest, algorithm_of

#: dtype names (torch / numpy spelling) -> (safetensors dtype, item size). Others go as U8 bytes.
SAFETENSORS_DTYPES: dict[str, tuple[str, int]] = {
    "float64": ("F64", 8), "float32": ("F32", 4), "float16": ("F16", 2), "bfloat16": ("BF16", 2),
    "int64": ("I64", 8), "int32": ("I32", 4), "int16": ("I16", 2), "int8": ("I8", 1),
    "uint64": ("U64", 8), "uint32": ("U32", 4), "uint16": ("U16", 2), "uint8": ("U8", 1),
    "bool": ("BOOL", 1), "float8_e4m3fn": ("F8_E4M3", 1), "float8_e5m2": ("F8_E5M2", 1),
}
#: A blob's data start on a boundary of this many bytes (the header is padded with spaces, as
#: safetensors pads it to 8): a storage served over the mapped file is then aligned as torch's
#: allocator aligns every CPU storage (c10/core/alignment.h, ``gAlignment``), which some of
#: MKL's kernels round by (kernel_hooks/loader.py ``HOST_ALIGNMENT``).
DATA_ALIGNMENT = 64
MAX_HEADER_BYTES = 64 << 20
READ_CHUNK = 8 << 20


@dataclass(frozen=True)
class BlobLayout:
    """The header bytes of a blob and where each entry's data starts inside the file."""

    header: bytes
    entry_offsets: tuple[int, ...]
    entry_sizes: tuple[int, ...]

    @property
    def size(self) -> int:
        """Total file size in bytes."""
        return len(self.header) + sum(self.entry_sizes)


#: Layouts of blobs with at most this many entries are kept (``layout_for``); a header takes
#: about 180 bytes an entry (measured), so the kept ones hold at most about 3 MB.
KEPT_LAYOUT_ENTRIES = 16


def layout_for(entries: Sequence[tuple[str, int]]) -> BlobLayout:
    """Header for entries given as ``(dtype name, nbytes)``, in file order. A checkpoint asks
    again for every blob, unchanged or not: the layouts of the last 1,024 blobs of few entries
    are kept (those of many small storages are made each time: kept, their headers would grow
    with the session)."""
    entries = tuple(entries)
    return _kept_layout(entries) if len(entries) <= KEPT_LAYOUT_ENTRIES else _layout(entries)


def _layout(entries: tuple[tuple[str, int], ...]) -> BlobLayout:
    header: dict[str, object] = {"__metadata__": {"format": "gkeresume.blob.v1"}}
    offsets, begin = [], 0
    for i, (dtype, nbytes) in enumerate(entries):
        st_dtype, itemsize = SAFETENSORS_DTYPES.get(dtype, ("U8", 1))
        if nbytes % itemsize:
            st_dtype, itemsize = "U8", 1
        header[str(i)] = {
            "dtype": st_dtype, "shape": [nbytes // itemsize], "data_offsets": [begin, begin + nbytes]
        }
        offsets.append(begin)
        begin += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % DATA_ALIGNMENT)
    head = struct.pack("<Q", len(raw)) + raw
    return BlobLayout(
        head, tuple(len(head) + o for o in offsets), tuple(n for _, n in entries)
    )


_kept_layout = functools.lru_cache(maxsize=1024)(_layout)


def blob_digest(layout: BlobLayout, buffers: Iterable[object], algorithm: Digest = DEFAULT) -> str:
    """Digest of the blob made of ``layout`` and the entries' ``buffers`` (hashing releases the
    GIL; big blobs are hashed with every core)."""
    return algorithm.of(itertools.chain([layout.header], buffers), layout.size)


def read_layout(f: BinaryIO, size: int) -> BlobLayout:
    """Parse and check a blob header from ``f`` positioned at 0; ``size`` is the file size."""
    prefix = f.read(8)
    if len(prefix) != 8:
        raise IntegrityError("blob is shorter than a safetensors header")
    (n,) = struct.unpack("<Q", prefix)
    if n > MAX_HEADER_BYTES or 8 + n > size:
        raise IntegrityError("blob header length is out of range")
    raw = f.read(n)
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        raise IntegrityError("blob header is not valid JSON") from None
    if not isinstance(header, dict):
        raise IntegrityError("blob header is not a JSON object")
    header.pop("__metadata__", None)
    offsets, sizes, expected = [], [], 0
    for i in range(len(header)):
        entry = header.get(str(i))
        try:
            begin, end = entry["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise IntegrityError(f"blob header entry {i} is malformed") from None
        if not (isinstance(begin, int) and isinstance(end, int)) or begin != expected or end < begin:
            raise IntegrityError(f"blob header entry {i} has bad offsets")
        offsets.append(8 + n + begin)
        sizes.append(end - begin)
        expected = end
    if 8 + n + expected != size:
        raise IntegrityError("blob size does not match its header")
    return BlobLayout(prefix + raw, tuple(offsets), tuple(sizes))


#: Where ``read_verified`` puts one entry: a buffer to fill, a sink that receives its bytes in
#: order chunk by chunk (each chunk valid only during the call), or None to skip it.
EntryTarget = memoryview | Callable[[memoryview], None] | None


def read_verified(
    f: BinaryIO,
    digest: str,
    size: int,
    destination: Callable[[int, int], EntryTarget],
    progress: Callable[[int], None] | None = None,
) -> BlobLayout:
    """Stream a blob from ``f`` into caller buffers or sinks, checking its digest at the end
    (with the algorithm ``digest`` names).

    ``destination(entry, nbytes)`` returns that entry's target (``EntryTarget``); skipped bytes
    are still hashed. ``progress`` is told the size of each entry chunk once it is read and
    hashed (for a bar that moves inside one big blob). Raises ``IntegrityError`` if the bytes do
    not match ``digest``: the caller must then discard what was written into its buffers or
    given to its sinks.
    """
    algorithm = algorithm_of(digest)
    layout = read_layout(f, size)
    h = algorithm.new(size)
    h.update(layout.header)
    scratch = bytearray(min(READ_CHUNK, max(layout.entry_sizes, default=0)))
    for i, nbytes in enumerate(layout.entry_sizes):
        target = destination(i, nbytes)
        sink = target if callable(target) else None
        view = None
        if target is not None and sink is None:
            view = memoryview(target).cast("B")
            if len(view) != nbytes:
                raise IntegrityError(f"blob entry {i} holds {nbytes} bytes, expected {len(view)}")
        done = 0
        while done < nbytes:
            step = min(READ_CHUNK, nbytes - done)
            chunk = view[done : done + step] if view is not None else memoryview(scratch)[:step]
            got = _readinto_full(f, chunk)
            if got != step:
                raise IntegrityError(f"blob {digest[:12]} is truncated")
            h.update(chunk)
            if sink is not None:
                sink(chunk)
            if progress is not None:
                progress(step)
            done += step
    _check(algorithm.finish(h), digest)
    return layout


def verify_mapped(
    f: BinaryIO,
    digest: str,
    size: int,
    mapping: memoryview,
    progress: Callable[[int], None] | None = None,
) -> BlobLayout:
    """Check the blob whose file is ``f`` (at position 0) and whose ``size`` bytes are also
    mapped as ``mapping``: the header is parsed from ``f``, and that header plus the entries'
    bytes as the mapping holds them are hashed, so the digest vouches for exactly the bytes
    that will be served from the mapping. ``progress`` as in ``read_verified``. Raises
    ``IntegrityError`` when they do not match ``digest``: nothing made over the mapping may
    then be served."""
    algorithm = algorithm_of(digest)
    layout = read_layout(f, size)
    if len(mapping) != size:
        raise IntegrityError(f"blob {digest[:12]}: the mapping holds {len(mapping)} of {size} bytes")
    h = algorithm.new(size)
    h.update(layout.header)
    for begin in range(len(layout.header), size, READ_CHUNK):
        step = min(READ_CHUNK, size - begin)
        h.update(mapping[begin : begin + step])
        if progress is not None:
            progress(step)
    _check(algorithm.finish(h), digest)
    return layout


def _check(computed: str, digest: str) -> None:
    if computed != digest:
        raise IntegrityError(f"blob {digest[:12]} does not match its digest (corrupt)")


def _readinto_full(f: BinaryIO, view: memoryview) -> int:
    total = 0
    while total < len(view):
        if hasattr(f, "readinto"):
            n = f.readinto(view[total:])
        else:
            data = f.read(len(view) - total)
            n = len(data)
            view[total : total + n] = data
        if not n:
            break
        total += n
    return total
