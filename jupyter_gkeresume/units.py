"""Sizes for people, one spelling everywhere (CLI, magics, progress line, warnings, and the lab:
``labextension/src/format.ts`` ``formatBytes`` writes the same, tests/test_ui_unit.py checks)."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """Binary units, one decimal below 100: ``512`` -> ``512 B``, ``1536`` -> ``1.5 KiB``,
    ``677 * 2**20`` -> ``677 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            break
        n /= 1024
    else:
        unit = "TiB"
    return f"{n:.0f} {unit}" if unit == "B" or abs(n) >= 100 else f"{n:.1f} {unit}"
