"""What the transfer layer returns and raises (shared by ``transfer``, ``gcs_upload``, ``composite``)."""

from __future__ import annotations

from dataclasses import dataclass


class UploadInterrupted(OSError):
    """An upload session was lost or kept other bytes than sent: the whole upload can restart."""


class ChecksumMismatch(UploadInterrupted):
    """The stored object's crc32c differs from the bytes we sent (corrupted in flight): the
    object was removed (or GCS refused it) and the upload can restart."""


@dataclass(frozen=True)
class StoredObject:
    """An object as the service stored it: ``size`` in bytes and ``crc32c`` (the Castagnoli CRC
    as an unsigned int; None where the store keeps none, e.g. a local directory)."""

    size: int
    crc32c: int | None
