"""Pure planning for GPU transfers: the pinned-buffer ring schedule and device remapping on restore.

Nothing here touches a driver, so every decision is testable on a machine without a GPU; the
engine (``cuda_engine``) only executes what these functions plan.

Ring schedules. A transfer of one or more parts (device ranges) is cut into chunks of at most
``chunk_bytes``; chunk ``i`` goes through pinned buffer ``i % buffers``. Invariant of both
schedules: a buffer is never written (by a DMA copy or by the CPU) while an earlier use of it may
still be reading or writing it.

Device mapping on restore, in this order: a saved ``cuda:i`` stays ``cuda:i`` when that device
exists here; saved devices missing here are spread by order (the j-th missing one, by index, goes
to ``cuda:(j % count)``); with no GPU every CUDA device becomes ``cpu``. Each change is a warning.
Devices other than CUDA come back on the CPU (``meta`` stays ``meta``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from jupyter_gkeresume.errors import InvalidInputError
from jupyter_gkeresume.units import human_bytes

CUDA_DEVICE_RE = re.compile(r"\Acuda(?::([0-9]+))?\Z")


@dataclass(frozen=True)
class Chunk:
    """Bytes ``[offset, offset + size)`` of part ``part`` of a transfer, staged through pinned
    buffer ``buffer``; ``index`` counts chunks across all parts."""

    index: int
    buffer: int
    part: int
    offset: int
    size: int


def plan_chunks(sizes: Sequence[int], chunk_bytes: int, buffers: int) -> list[Chunk]:
    """Cut parts of ``sizes`` bytes into consecutive chunks of at most ``chunk_bytes``, assigned
    round-robin to ``buffers`` ring slots across parts (a part of 0 bytes has no chunk)."""
    if chunk_bytes <= 0 or buffers <= 0 or any(n < 0 for n in sizes):
        raise InvalidInputError(
            f"bad transfer plan: sizes={list(sizes)[:8]}, chunk_bytes={chunk_bytes}, "
            f"buffers={buffers}"
        )
    chunks: list[Chunk] = []
    for part, nbytes in enumerate(sizes):
        for offset in range(0, nbytes, chunk_bytes):
            i = len(chunks)
            chunks.append(Chunk(i, i % buffers, part, offset, min(chunk_bytes, nbytes - offset)))
    return chunks


def d2h_schedule(chunks: Sequence[Chunk], buffers: int) -> Iterator[tuple[str, Chunk]]:
    """Device-to-host steps: ``("copy", c)`` enqueues the DMA of ``c`` into its buffer and records
    the buffer's event; ``("deliver", c)`` waits for that event and hands the buffer to the
    consumer, who holds it until the next step.

    The first ``buffers`` copies are enqueued up front; after each delivery the buffer just handed
    back is refilled with the chunk ``buffers`` places ahead, so up to ``buffers - 1`` copies run
    while the consumer works on one chunk.
    """
    for chunk in chunks[:buffers]:
        yield "copy", chunk
    for i, chunk in enumerate(chunks):
        yield "deliver", chunk
        if i + buffers < len(chunks):
            yield "copy", chunks[i + buffers]


def cuda_index(device: str) -> int | None:
    """The index of a ``cuda`` / ``cuda:N`` device string, None for any other device."""
    match = CUDA_DEVICE_RE.match(device)
    if match is None:
        return None
    return int(match.group(1) or 0)


class DeviceMapping(dict):
    """``{saved device: device here}``; ``warnings`` says, in words, every device that changed."""

    def __init__(self, mapping: Mapping[str, str], warnings: list[str]):
        super().__init__(mapping)
        self.warnings = warnings


def plan_device_mapping(saved_devices: Sequence[str], available_gpu_count: int) -> DeviceMapping:
    """Where each device named in a snapshot goes here (rules in the module docstring)."""
    if available_gpu_count < 0:
        raise InvalidInputError(f"available_gpu_count must be >= 0, not {available_gpu_count}")
    mapping: dict[str, str] = {}
    warnings: list[str] = []
    cuda = sorted({d for d in saved_devices if cuda_index(d) is not None}, key=cuda_index)
    missing = [d for d in cuda if available_gpu_count == 0 or cuda_index(d) >= available_gpu_count]
    for device in cuda:
        if device not in missing:
            mapping[device] = f"cuda:{cuda_index(device)}"
    if missing and available_gpu_count == 0:
        mapping.update(dict.fromkeys(missing, "cpu"))
        warnings.append(f"no GPU here: tensors of {', '.join(missing)} come back on the CPU")
    for j, device in enumerate(missing if available_gpu_count else []):
        mapping[device] = f"cuda:{j % available_gpu_count}"
        warnings.append(
            f"{device} does not exist here ({available_gpu_count} GPU(s)): "
            f"its tensors go to {mapping[device]}"
        )
    for device in dict.fromkeys(saved_devices):
        if device in mapping:
            continue
        mapping[device] = device if device in ("cpu", "meta") else "cpu"
        if mapping[device] != device:
            warnings.append(f"device {device!r} is not supported here: its tensors go to the CPU")
    return DeviceMapping(mapping, warnings)


@dataclass
class Placement:
    """Where each storage goes, and which objects did not fit on their GPU (they go to the CPU)."""

    devices: dict[str, str]
    not_fitted: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def plan_placement(
    objects: Sequence[tuple[str, Sequence[str]]],
    storages: Mapping[str, tuple[str, int]],
    free_bytes: Mapping[str, int],
    reserve_bytes: int = 0,
) -> Placement:
    """Fit storages onto their (already remapped) devices, object by object, in the given order.

    ``objects`` lists ``(name, storage keys)``; ``storages`` maps a key to ``(device, nbytes)``;
    ``free_bytes`` is the free memory of each GPU here, of which ``reserve_bytes`` stays unused.
    An object fits when all its storages not yet placed fit at once; then they are placed (a
    storage shared by several objects counts once). An object that does not fit has its
    remaining storages placed on the CPU and is named in ``not_fitted``, so the caller can report
    it (a partial restore) instead of running out of memory half-way. CPU storages always fit.
    """
    left = {device: max(0, free - reserve_bytes) for device, free in free_bytes.items()}
    devices: dict[str, str] = {}
    placement = Placement(devices)
    for name, keys in objects:
        need: dict[str, int] = {}
        for key in dict.fromkeys(keys):
            if key in devices:
                continue
            device, nbytes = storages[key]
            if cuda_index(device) is not None:
                need[device] = need.get(device, 0) + nbytes
        fits = all(nbytes <= left.get(device, 0) for device, nbytes in need.items())
        for key in dict.fromkeys(keys):
            if key not in devices:
                devices[key] = storages[key][0] if fits else "cpu"
        if fits:
            for device, nbytes in need.items():
                left[device] -= nbytes
        elif need:
            placement.not_fitted.append(name)
            wanted = ", ".join(f"{human_bytes(n)} on {d}" for d, n in sorted(need.items()))
            placement.warnings.append(f"{name}: needs {wanted}, not free here: restored on the CPU")
    return placement
