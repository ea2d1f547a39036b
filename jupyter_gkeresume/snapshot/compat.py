"""Can this snapshot come back here? ``check_compatible`` answers with a verdict and reasons.

Levels, best first: ``exact`` (same environment), ``portable`` (tensors are remapped: another GPU
type, count or driver, or no GPU), ``partial`` (some named objects will not load here, e.g. their
library is missing), ``incompatible`` (nothing can be loaded: unknown format, other Python major).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

from .format import FORMAT_VERSION, Manifest

LEVELS = ("exact", "portable", "partial", "incompatible")


@dataclass
class Verdict:
    """The outcome of a compatibility check: a level, human-readable reasons, objects at risk."""

    level: str
    reasons: list[str] = field(default_factory=list)
    objects_at_risk: dict[str, str] = field(default_factory=dict)

    def worsen(self, level: str, reason: str) -> None:
        if LEVELS.index(level) > LEVELS.index(self.level):
            self.level = level
        self.reasons.append(reason)

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "reasons": self.reasons, "objects_at_risk": self.objects_at_risk}


def _module_available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_compatible(manifest: Manifest, here: dict[str, Any]) -> Verdict:
    """Compare ``manifest.fingerprint`` with ``here`` (an ``environment_fingerprint()``)."""
    there = manifest.fingerprint
    verdict = Verdict("exact")
    if manifest.format_version != FORMAT_VERSION:
        verdict.worsen("incompatible", f"snapshot format {manifest.format_version} is unknown here")
        return verdict
    py_there, py_here = str(there.get("python", "")), str(here.get("python", ""))
    if py_there.split(".")[:2] != py_here.split(".")[:2]:
        level = "incompatible" if py_there.split(".")[:1] != py_here.split(".")[:1] else "partial"
        verdict.worsen(level, f"Python {py_there} wrote it, this is Python {py_here}")
    _compare_gpus(verdict, there.get("cuda") or {}, here.get("cuda") or {}, manifest)
    for key in ("machine_type", "image"):
        if there.get(key) and here.get(key) and there[key] != here[key]:
            verdict.worsen("portable", f"{key} differs: {there[key]} -> {here[key]}")
    pk_there, pk_here = there.get("packages") or {}, here.get("packages") or {}
    for name, version in sorted(pk_there.items()):
        if name in pk_here and pk_here[name] != version:
            verdict.worsen("portable", f"{name} {version} -> {pk_here[name]}: objects are re-created")
    for obj in manifest.objects:
        if obj.status != "saved":
            continue
        missing = sorted(m for m in obj.modules if not _module_available(m))
        if missing:
            why = f"needs {', '.join(missing)}, not importable here"
            verdict.objects_at_risk[obj.name] = why
            verdict.worsen("partial", f"{obj.name}: {why}")
    return verdict


def _compare_gpus(verdict: Verdict, there: dict, here: dict, manifest: Manifest) -> None:
    gpus_there, gpus_here = there.get("gpus") or [], here.get("gpus") or []
    uses_cuda = any(s.device.startswith("cuda") for s in manifest.storages.values())
    if not gpus_there:
        return
    if not gpus_here:
        if uses_cuda:
            verdict.worsen("portable", "no GPU here: CUDA tensors come back on the CPU")
        return
    names_there = [g.get("name") for g in gpus_there]
    names_here = [g.get("name") for g in gpus_here]
    if len(gpus_here) < len(gpus_there):
        verdict.worsen("portable", f"{len(gpus_there)} GPUs there, {len(gpus_here)} here: remapped")
    if names_there[: len(names_here)] != names_here[: len(names_there)]:
        verdict.worsen("portable", f"GPU {names_there[0]} there, {names_here[0]} here")
    if there.get("driver_version") != here.get("driver_version"):
        verdict.worsen(
            "portable", f"CUDA driver {there.get('driver_version')} -> {here.get('driver_version')}"
        )
