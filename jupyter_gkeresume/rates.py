"""Rates and times left that a user can trust (pure functions of numbers; no I/O, no clock).

- ``rate_known(done, total, seconds)``: a phase's rate so far means something only once the phase
  has run ``RATE_MIN_SECONDS`` and moved ``RATE_MIN_FRACTION`` of its bytes. Before that the first
  chunk's timing speaks (a 128-byte header written in 10 ms promises 30 hours for 1.4 GiB; a read
  that waited for its kernel promises minutes for seconds), so neither the rate nor a time left
  is said.
- ``seconds_left(done, total, seconds)``: what the phase still needs at its rate, ``None`` until
  the rate is known.
- ``expected_seconds(samples, nbytes)``: how long an operation on ``nbytes`` should take, from
  this store's recorded operations ``(bytes, seconds)``, oldest first: the last
  ``ESTIMATE_WINDOW`` of them, as a line ``fixed + nbytes * per_byte`` fitted robustly (medians)
  when their sizes differ enough to tell the two apart, else their median seconds per byte
  times ``nbytes``. Operations recorded without their bytes (older records) give their median
  duration. ``None`` without any.

The lab computes the first two itself (labextension/src/progress.ts mirrors them, same
constants: tests/test_ui_unit.py checks); the server gives it ``expected_seconds`` in the status
(``events.EventLog.estimate``). The notebook's progress line (``kernel_hooks/progress.py``) uses
``seconds_left``.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

RATE_MIN_SECONDS = 1.0  # a phase's rate is trusted after it ran this long ...
RATE_MIN_FRACTION = 0.05  # ... and moved this share of its bytes
ESTIMATE_WINDOW = 10  # recent operations an estimate learns from
SPREAD_FOR_A_LINE = 2.0  # sizes this far apart (largest / smallest) tell fixed from per-byte cost


def rate_known(done: int, total: int, seconds: float) -> bool:
    """The phase has run long enough, over enough of its bytes (``total`` 0: not known), for
    its rate to mean something."""
    return done > 0 and seconds >= RATE_MIN_SECONDS and done >= RATE_MIN_FRACTION * total


def seconds_left(done: int, total: int, seconds: float) -> float | None:
    """Seconds the phase still needs at its rate so far; ``None`` until that rate is known, or
    without a total."""
    if total <= 0 or not rate_known(done, total, seconds):
        return None
    return max(0, total - done) * seconds / done


def expected_seconds(samples: Sequence[tuple[int, float]], nbytes: int) -> float | None:
    """The expected duration of an operation on ``nbytes`` (see the module docstring)."""
    recent = [(b, s) for b, s in samples[-ESTIMATE_WINDOW:] if s > 0]
    sized = [(b, s) for b, s in recent if b > 0]
    if not recent:
        return None
    if not sized or nbytes <= 0:
        return statistics.median(s for _, s in recent)
    sizes = [b for b, _ in sized]
    if max(sizes) >= SPREAD_FOR_A_LINE * min(sizes):
        slopes = [(s2 - s1) / (b2 - b1) for (b1, s1), (b2, s2)
                  in itertools.combinations(sized, 2) if b2 != b1]
        per_byte = max(0.0, statistics.median(slopes))
        fixed = max(0.0, statistics.median(s - b * per_byte for b, s in sized))
        return fixed + nbytes * per_byte
    return statistics.median(s / b for b, s in sized) * nbytes
