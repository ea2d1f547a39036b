"""Sizes for people, one spelling everywhere (CLI, magics, progress line, warnings, and the lab:
``labextension/src/format.ts`` ``formatBytes`` writes the same, tests/test_ui_unit.py checks)."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """Binary units, one decimal below 100: ``512`` -> ``512 B``, ``1536`` -> ``1.5 KiB``,
    ``677 * 2**20`` -> ``677 MiB``."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    step = 0
    while abs(n) >= 1024 and step < len(units) - 1:
        n /= 1024
        step += 1
    digits = 0 if step == 0 or abs(n) >= 100 else 1
    return f"{n:.{digits}f} {units[step]}"
