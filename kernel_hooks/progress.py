"""A progress line in the cell output: phase, bar, bytes and rate, updated in place."""

from __future__ import annotations

import time

from jupyter_gkeresume.units import human_bytes

from .results import Progress

MIN_INTERVAL = 0.2


def render(p: Progress, width: int = 24) -> str:
    frac = p.done_bytes / p.total_bytes if p.total_bytes else 1.0
    filled = round(frac * width)
    return (
        f"{p.phase:<10} [{'#' * filled}{'.' * (width - filled)}] {frac:4.0%}  "
        f"{human_bytes(p.done_bytes)} / {human_bytes(p.total_bytes)}  {human_bytes(p.rate)}/s"
    )


class CellProgress:
    """Callable progress sink for magics: one display updated at most every 0.2 s."""

    def __init__(self):
        self._handle = None
        self._last = 0.0

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        if p.phase not in ("done", "committing") and now - self._last < MIN_INTERVAL:
            return
        self._last = now
        from IPython.display import display

        text = {"text/plain": render(p)}
        if self._handle is None:
            self._handle = display(text, raw=True, display_id=True)
        else:
            self._handle.update(text, raw=True)
