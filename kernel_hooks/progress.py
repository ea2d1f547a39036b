"""The progress of ``%checkpoint`` / ``%resume`` in the cell output, updated in place.

One display (a ``display_id``) per operation: the first report displays it, later ones send
``update_display_data``. Each bundle has ``text/html`` (a ``<progress>`` bar with bytes, rate and
time left, as tqdm's notebook bars look) and ``text/plain`` (the same in one ASCII line, for
terminals and nbconvert). Reports come at most every ``MIN_INTERVAL`` seconds, plus every
phase change and the final one.
"""

from __future__ import annotations

import html
import time

from jupyter_gkeresume.units import human_bytes

from .results import Progress

MIN_INTERVAL = 0.2

PHASE_WORDS = {
    "hashing": "Hashing", "writing": "Writing", "committing": "Committing", "verifying": "Verifying",
    "reading": "Reading", "restoring": "Restoring", "unpickling": "Unpickling", "done": "Done",
}


def seconds_left(p: Progress) -> float | None:
    """What the phase still needs at its rate so far, or None when that is not known."""
    if p.phase == "done" or not p.total_bytes or p.rate <= 0:
        return None
    return max(0, p.total_bytes - p.done_bytes) / p.rate


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "< 1 s"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    return f"{s // 60} min {s % 60} s" if s < 3600 else f"{s // 3600} h {s % 3600 // 60} min"


def describe(p: Progress) -> str:
    """One sentence: "Writing 412 MiB of 764 MiB at 95 MiB/s, about 4 s left"."""
    text = PHASE_WORDS.get(p.phase, p.phase.capitalize())
    if p.total_bytes:
        text += f" {human_bytes(p.done_bytes)} of {human_bytes(p.total_bytes)}"
    if p.phase == "done":
        text += f" in {_duration(p.seconds)}"
    elif p.rate > 0:
        text += f" at {human_bytes(p.rate)}/s"
    left = seconds_left(p)
    if left is not None:
        text += f", about {_duration(left)} left"
    return text


def fraction(p: Progress) -> float:
    return min(1.0, p.done_bytes / p.total_bytes) if p.total_bytes else 1.0


def render(p: Progress, width: int = 24) -> str:
    """The plain-text line: "Writing [######.....]  25%  Writing 1.0 GiB of ..." without repeats."""
    frac = fraction(p)
    filled = round(frac * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {frac:4.0%}  {describe(p)}"


def render_html(p: Progress) -> str:
    """A ``<progress>`` bar and the sentence beside it, styled by JupyterLab's variables."""
    frac = fraction(p)
    return (
        '<div class="gkeresume-progress" style="display:flex;align-items:center;gap:8px">'
        f'<progress value="{frac:.4f}" max="1" style="width:240px"></progress>'
        f"<span>{frac:.0%}</span><span>{html.escape(describe(p))}</span></div>"
    )


def bundle(p: Progress) -> dict[str, str]:
    return {"text/html": render_html(p), "text/plain": render(p)}


class CellProgress:
    """Callable progress sink for magics: one display, updated in place (see the module doc)."""

    def __init__(self):
        self._handle = None
        self._last = 0.0
        self._phase: str | None = None

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        final = p.phase in ("done", "committing") or p.phase != self._phase
        if not final and now - self._last < MIN_INTERVAL:
            return
        self._last, self._phase = now, p.phase
        from IPython.display import display

        if self._handle is None:
            self._handle = display(bundle(p), raw=True, display_id=True)
        else:
            self._handle.update(bundle(p), raw=True)
