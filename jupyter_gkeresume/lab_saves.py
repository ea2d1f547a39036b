"""The server -> lab channel that saves the documents open in every connected lab before a pause.

Every lab page keeps one long poll open (``LabRequestsHandler``: ``GET lab/requests?lab=ID&
after=N``, answered at once when a save request newer than ``N`` exists, else after
``WAIT_SECONDS`` with none) and asks again as soon as it is answered. A pause, whatever started
it, calls ``LabSaves.save_documents`` before it holds the kernels: a new request reaches every
waiting poll at once; each lab saves its dirty documents and answers ``POST lab/saved`` with
what it saved and what it could not. ``save_documents`` returns when every lab connected at the
request has answered, or after ``timeout`` seconds (a lab that does not answer never blocks a
pause), with a ``SaveReport`` naming what was not saved and which labs did not answer.

Invariants: a lab is connected while its poll is open and for ``LINGER_SECONDS`` after each
answer (the time it takes to ask again); requests are numbered in order; an answer for an
unknown or finished request is ignored. Everything runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

WAIT_SECONDS = 25.0  # a poll left open this long is answered with no request (proxies, reloads)
LINGER_SECONDS = 5.0  # after an answer a lab counts as connected this long (it asks again at once)


@dataclass
class SaveReport:
    """What one save request came back with (``to_dict``: the pause's ``documents``)."""

    saved: list[str] = field(default_factory=list)
    not_saved: list[dict[str, str]] = field(default_factory=list)  # {"path", "reason"}
    labs: int = 0  # labs connected when the request went out
    unanswered: int = 0  # of those, the ones that had not answered within the timeout

    def to_dict(self) -> dict[str, Any]:
        return {"saved": list(self.saved), "not_saved": [dict(n) for n in self.not_saved],
                "labs": self.labs, "unanswered": self.unanswered}


class LabSaves:
    """The save requests of one server and the labs waiting for them."""

    def __init__(self) -> None:
        self._seq = 0  # the newest request's number (0: none yet)
        self._waiting: dict[str, int] = {}  # lab id -> polls open now
        self._answered_at: dict[str, float] = {}  # lab id -> when its last poll was answered
        self._replies: dict[int, dict[str, dict[str, Any]]] = {}  # open request -> lab -> reply
        self._wake: asyncio.Event | None = None

    # -- the lab's side (handlers) ------------------------------------------------------------
    async def next_request(self, lab: str, after: int, wait: float = WAIT_SECONDS) -> int:
        """The number of the newest save request once it is newer than ``after`` (at once when
        it already is), else ``after`` after ``wait`` seconds. ``lab`` counts as connected
        meanwhile."""
        self._waiting[lab] = self._waiting.get(lab, 0) + 1
        try:
            deadline = time.monotonic() + wait
            while self._seq <= after and (left := deadline - time.monotonic()) > 0:
                await self._changed(left)
            return max(self._seq, after)
        finally:
            self._waiting[lab] -= 1
            if not self._waiting[lab]:
                del self._waiting[lab]
            self._answered_at[lab] = time.monotonic()

    def is_open(self, request: int) -> bool:
        """Whether ``request`` still waits for answers."""
        return request in self._replies

    def reply(self, lab: str, request: int, saved: list[str],
              not_saved: list[dict[str, str]]) -> bool:
        """A lab's answer to ``request``; False when that request is not open (ignored)."""
        replies = self._replies.get(request)
        if replies is None:
            return False
        replies[lab] = {"saved": saved, "not_saved": not_saved}
        self._notify()
        return True

    # -- the pause's side ---------------------------------------------------------------------
    def connected(self) -> set[str]:
        """The labs with a poll open now or answered within ``LINGER_SECONDS``."""
        now = time.monotonic()
        self._answered_at = {lab: at for lab, at in self._answered_at.items()
                             if now - at <= LINGER_SECONDS}
        return set(self._waiting) | set(self._answered_at)

    async def save_documents(self, timeout: float) -> SaveReport:
        """Ask every connected lab to save its documents; wait for their answers, at most
        ``timeout`` seconds. With no lab connected it returns at once."""
        labs = self.connected()
        if not labs:
            return SaveReport()
        self._seq += 1
        request, replies = self._seq, {}
        self._replies[request] = replies
        self._notify()
        try:
            deadline = time.monotonic() + timeout
            while not labs <= set(replies) and (left := deadline - time.monotonic()) > 0:
                await self._changed(left)
        finally:
            del self._replies[request]
        report = SaveReport(labs=len(labs), unanswered=len(labs - set(replies)))
        for answer in replies.values():
            report.saved += [p for p in answer["saved"] if p not in report.saved]
            report.not_saved += answer["not_saved"]
        return report

    # -- wake-ups -----------------------------------------------------------------------------
    async def _changed(self, timeout: float) -> None:
        """Wait until the next request or answer, at most ``timeout`` seconds."""
        if self._wake is None:
            self._wake = asyncio.Event()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()
        self._wake = None
