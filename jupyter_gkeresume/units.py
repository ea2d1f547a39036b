"""Sizes for people, one spelling everywhere (CLI, magics, progress line, warnings)."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """Binary units, one decimal: ``512`` -> ``512 B``, ``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
