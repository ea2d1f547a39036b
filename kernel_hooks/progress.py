"""Progress of a checkpoint or resume: counted per chunk, throttled, shown in the cell output.

- ``PhaseBytes`` counts one phase's bytes from many threads (a blob's writer or reader adds each
  chunk as it goes: ``share(nbytes)`` for one blob) and reports every new count, in order.
- ``ProgressThrottle`` passes reports on at most every ``interval`` seconds without losing the
  last one of any phase (see its docstring); the server's publisher and ``CellProgress`` use it.
- ``CellProgress``: one display (a ``display_id``) per operation: the first report displays it,
  later ones send ``update_display_data``. Each bundle has ``text/html`` (a ``<progress>`` bar
  with bytes, rate and time left, as tqdm's notebook bars look; the rate and the time left only
  once the rate is known, ``jupyter_gkeresume.rates``) and ``text/plain`` (the same in
  one ASCII line, for terminals and nbconvert), at most every ``MIN_INTERVAL`` seconds.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable

from jupyter_gkeresume import rates
from jupyter_gkeresume.units import human_bytes

from .results import Progress

MIN_INTERVAL = 0.2

PHASE_WORDS = {
    "hashing": "Hashing", "writing": "Writing", "committing": "Committing", "verifying": "Verifying",
    "installing": "Installing packages",
    "reading": "Reading", "restoring": "Restoring", "unpickling": "Unpickling", "done": "Done",
}


def seconds_left(p: Progress) -> float | None:
    """What the phase still needs at its rate so far, or None until that rate is known
    (``jupyter_gkeresume.rates``: the kernel knows no learned estimate, so it says none)."""
    return None if p.phase == "done" else rates.seconds_left(p.done_bytes, p.total_bytes, p.seconds)


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
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
    elif rates.rate_known(p.done_bytes, p.total_bytes, p.seconds):
        text += f" at {human_bytes(p.rate)}/s"
    left = seconds_left(p)
    if left is not None:
        text += f", {'' if left < 1 else 'about '}{_duration(left)} left"
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


ProgressSink = Callable[[Progress], None]


class PhaseBytes:
    """The bytes done in one ``phase`` of ``total``, counted from many threads; every count is
    reported to ``sink`` (when there is one) under one lock, so reports only increase."""

    def __init__(self, phase: str, total: int, sink: ProgressSink | None):
        self.phase, self.total, self.sink = phase, total, sink
        self.done = 0
        self._start = time.monotonic()
        self._lock = threading.Lock()

    def add(self, nbytes: int) -> None:
        if nbytes <= 0:
            return
        with self._lock:
            self.done += nbytes
            if self.sink is not None:
                self.sink(Progress(self.phase, self.done, self.total, time.monotonic() - self._start))

    def grow(self, nbytes: int) -> None:
        """The phase holds ``nbytes`` more than its total said (a blob planned after it began)."""
        with self._lock:
            self.total += nbytes

    def share(self, nbytes: int) -> BlobShare:
        """The ``nbytes`` one blob contributes, added chunk by chunk (see ``BlobShare``)."""
        return BlobShare(self, nbytes)


class BlobShare:
    """One blob's part of a ``PhaseBytes``: ``add`` each chunk as it is written or read (never
    more than ``nbytes`` in all: a header, or a second pass, does not count twice), then
    ``finish()`` adds what the chunks did not (a blob reused without writing, copies made after
    reading)."""

    def __init__(self, phase: PhaseBytes, nbytes: int):
        self.phase, self.left = phase, nbytes
        self._lock = threading.Lock()

    def add(self, nbytes: int) -> None:
        with self._lock:
            step = min(nbytes, self.left)
            self.left -= step
        self.phase.add(step)

    def finish(self) -> None:
        self.add(self.left)


class ProgressThrottle:
    """Passes reports on to ``send`` at most every ``interval`` seconds, without losing the last
    one of any phase: the first report of a phase goes at once, after every report held back
    so far (so a phase's last report precedes the next phase's first); ``flush()`` sends what is
    still held (call it when the operation ends). Phases may interleave (a resume reads and
    unpickles at once): coming back to a phase already seen is throttled like any report.
    Thread-safe; reports leave in the order they were passed."""

    def __init__(self, send: ProgressSink, interval: float):
        self.send, self.interval = send, interval
        self._seen: set[str] = set()
        self._held: dict[str, Progress] = {}
        self._sent = 0.0
        self._lock = threading.Lock()

    def __call__(self, p: Progress) -> None:
        with self._lock:
            now = time.monotonic()
            if p.phase not in self._seen:
                self._seen.add(p.phase)
                self._send_held()
            elif now - self._sent < self.interval:
                self._held[p.phase] = p
                return
            self._held.pop(p.phase, None)
            self._sent = now
            self.send(p)

    def flush(self) -> None:
        with self._lock:
            self._send_held()

    def _send_held(self) -> None:
        held, self._held = self._held, {}
        for p in held.values():
            self.send(p)


class CellProgress:
    """Callable progress sink for magics: one display, updated in place (see the module doc)."""

    def __init__(self):
        self._handle = None
        self._throttle = ProgressThrottle(self._show, MIN_INTERVAL)

    def __call__(self, p: Progress) -> None:
        self._throttle(p)

    def _show(self, p: Progress) -> None:
        from IPython.display import display

        if self._handle is None:
            self._handle = display(bundle(p), raw=True, display_id=True)
        else:
            self._handle.update(bundle(p), raw=True)
