"""CRC32C (Castagnoli) as GCS uses it: extended over buffers without copies, combined across
parts (what a composed object's checksum is), and in GCS's base64 big-endian spelling."""

from __future__ import annotations

import base64
import binascii

#: The reflected Castagnoli polynomial.
POLYNOMIAL = 0x82F63B78


def extend(crc: int, data: object) -> int:
    """``crc`` extended over ``data`` (any buffer: bytes, memoryview, numpy, ...; no copy).
    ``crc32c`` comes with the ``gcs`` extra: only object stores check it, so a local store
    works without it (imported here, at first use)."""
    import crc32c

    return crc32c.crc32c(data, crc)


def to_base64(crc: int) -> str:
    """GCS's spelling: base64 of the four bytes, big-endian."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def from_base64(text: object) -> int | None:
    """The CRC from GCS's spelling; None when absent or malformed."""
    if not isinstance(text, str):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return int.from_bytes(raw, "big") if len(raw) == 4 else None


def combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC of ``A + B`` from ``crc(A)``, ``crc(B)`` and ``len(B)`` (zlib's crc32_combine,
    for the Castagnoli polynomial): the checksum GCS gives an object composed of A and B."""
    if len2 <= 0:
        return crc1
    odd = [POLYNOMIAL] + [1 << n for n in range(31)]  # the operator for one zero bit
    even = _square(odd)  # two zero bits
    odd = _square(even)  # four zero bits
    while True:
        even = _square(odd)  # one zero byte, then 4, 16, ...
        if len2 & 1:
            crc1 = _times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _square(even)
        if len2 & 1:
            crc1 = _times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


def _times(matrix: list[int], vector: int) -> int:
    total, row = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _square(matrix: list[int]) -> list[int]:
    return [_times(matrix, matrix[n]) for n in range(32)]
