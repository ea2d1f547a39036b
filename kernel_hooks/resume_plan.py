"""Stage 1 of a resume: where every storage of a snapshot goes on this machine, decided once.

``make_plan(storages, priority, engine)`` asks the GPUs here once (how many: ``gpu_count``; how
much each target may take: ``usable_bytes``), then ``plan_places`` decides, without touching a
driver: saved devices are mapped onto the GPUs here (``cuda_plan.plan_device_mapping``: fewer
GPUs by order, none: the CPU), then whole objects (the storages of each owning name, in
``priority`` order) are fitted into each GPU's usable memory (``cuda_plan.plan_placement``); what
does not fit goes to the CPU, named in a warning. With the CUDA engine, torch storages and CUDA
arrays bound for a GPU are ``streamed``: their bytes go from the store through the engine's
pinned ring to device memory allocated up front. The loader (stage 2 on) only reads this plan.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyter_gkeresume.snapshot.format import StorageRef

from .cuda_plan import cuda_index, plan_device_mapping, plan_placement

GPU_RESERVE_MAX = 1 << 30
STREAMED_KINDS = ("torch", "cuda_array")


@dataclass(frozen=True)
class StoragePlace:
    """Where one storage goes: ``device`` (``cpu``, ``cuda:N``, ``meta``), its GPU index ``gpu``
    (None off a GPU), and whether its bytes stream to the GPU through the engine."""

    device: str
    gpu: int | None = None
    streamed: bool = False


@dataclass
class ResumePlan:
    """Every storage key's place here, and the device changes and misfits in words."""

    places: dict[str, StoragePlace] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def plan_places(
    storages: Mapping[str, StorageRef],
    priority: Sequence[str],
    gpu_count: int,
    usable: Mapping[int, int],
    *,
    engine: bool,
) -> ResumePlan:
    """Pure: the plan for ``storages`` given ``gpu_count`` GPUs here, ``usable`` bytes per GPU
    index, and whether the CUDA engine drives them (see the module docstring)."""
    mapping = plan_device_mapping(sorted({s.device for s in storages.values()}), gpu_count)
    plan = ResumePlan(warnings=list(mapping.warnings))
    mapped = {key: (mapping.get(s.device, "cpu"), s.nbytes) for key, s in storages.items()}
    devices = {key: device for key, (device, _) in mapped.items()}
    gpus = {device for device in devices.values() if cuda_index(device) is not None}
    if gpus:
        owned: dict[str, list[str]] = {}
        for key, ref in storages.items():
            owned.setdefault(ref.owner or key, []).append(key)
        rank = {name: i for i, name in enumerate(priority)}
        objects = sorted(owned.items(), key=lambda item: rank.get(item[0], len(rank)))
        placement = plan_placement(objects, mapped, {d: usable.get(cuda_index(d), 0) for d in gpus})
        plan.warnings.extend(placement.warnings)
        devices = placement.devices
    for key, device in devices.items():
        gpu = cuda_index(device)
        plan.places[key] = StoragePlace(
            device, gpu, engine and gpu is not None and storages[key].kind in STREAMED_KINDS)
    return plan


def make_plan(storages: Mapping[str, StorageRef], priority: Sequence[str], engine: Any) -> ResumePlan:
    """The plan for this machine: GPUs counted and measured once, then ``plan_places``."""
    count = gpu_count(engine, storages)
    targets = {cuda_index(d) for d in plan_device_mapping(
        sorted({s.device for s in storages.values()}), count).values()} - {None}
    usable = {index: usable_bytes(engine, index) for index in sorted(targets)}
    return plan_places(storages, priority, count, usable, engine=engine is not None)


def gpu_count(engine: Any, storages: Mapping[str, StorageRef]) -> int:
    """GPUs usable here: the CUDA engine's, else torch's (imported when torch storages were
    saved on a GPU: the graph needs torch anyway), else 0."""
    if engine is not None:
        return engine.device_count
    torch = sys.modules.get("torch")
    if torch is None and any(s.kind == "torch" and cuda_index(s.device) is not None
                             for s in storages.values()):
        import torch
    return torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0


def usable_bytes(engine: Any, index: int) -> int:
    """Free memory of GPU ``index`` a restore may fill: all but a reserve of 5% of the GPU (at
    most 1 GiB) left for the next cell's workspaces."""
    if engine is not None:
        free, total = engine.memory_info(index)
    else:
        import torch

        free, total = torch.cuda.mem_get_info(index)
    return max(0, free - min(total // 20, GPU_RESERVE_MAX))
