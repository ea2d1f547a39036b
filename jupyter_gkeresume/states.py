"""The one pause/resume state enum and its transition table (mirrored as a TypeScript union).

A kernel (and the workspace as a whole) moves along two paths::

    running -> pausing -> releasing -> paused              (pause with release)
    running -> pausing -> running                          (checkpoint only, or a failed pause)
    running -> pausing -> releasing -> running             (the release failed: kernels untouched)
    paused -> waiting_for_resources -> restoring -> ready  (resume; -> running at the next cell)
    running/ready -> waiting_for_resources -> restoring     (restore into a running kernel)

and any active step may go to ``failed`` with a reason. A failed pause or release returns to
``running`` with the reason kept (nothing was released, the kernels are untouched); a failed
resume stays ``failed`` until it is retried, paused again or discarded.
``StateMachine.move`` is the only way to change a state (``state.WorkspaceState`` makes every
move); anything the table does not allow raises ``InvalidTransitionError``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

from .errors import InvalidTransitionError


class State(str, Enum):
    RUNNING = "running"
    PAUSING = "pausing"
    RELEASING = "releasing"
    PAUSED = "paused"
    WAITING_FOR_RESOURCES = "waiting_for_resources"
    RESTORING = "restoring"
    READY = "ready"
    FAILED = "failed"


S = State
TRANSITIONS: dict[State, frozenset[State]] = {
    S.RUNNING: frozenset({S.PAUSING, S.PAUSED, S.WAITING_FOR_RESOURCES}),
    S.PAUSING: frozenset({S.RELEASING, S.RUNNING, S.FAILED}),
    S.RELEASING: frozenset({S.PAUSED, S.RUNNING, S.FAILED}),
    S.PAUSED: frozenset({S.WAITING_FOR_RESOURCES, S.RUNNING, S.PAUSING}),
    S.WAITING_FOR_RESOURCES: frozenset({S.RESTORING, S.READY, S.FAILED}),
    S.RESTORING: frozenset({S.READY, S.FAILED}),
    S.READY: frozenset({S.PAUSING, S.WAITING_FOR_RESOURCES, S.RUNNING}),
    S.FAILED: frozenset({S.RUNNING, S.PAUSING, S.WAITING_FOR_RESOURCES}),
}
"""Allowed moves. ``running -> paused`` is a server that starts and finds a paused record;
``paused -> running`` and ``failed -> running`` are the user discarding the paused record;
``paused -> pausing`` is the shutdown checkpoint of kernels started while paused;
``waiting_for_resources -> ready`` is a files-only resume (fresh kernels, nothing restored);
``failed -> waiting_for_resources`` is a retry, ``failed -> pausing`` a pause after a failed
resume; ``ready -> running`` is the next cell a user runs after a resume
(``WorkspaceState.cell_started``)."""

ACTIVE = frozenset({S.PAUSING, S.RELEASING, S.WAITING_FOR_RESOURCES, S.RESTORING})
"""States in which an operation is in flight (a second pause or resume is refused)."""


def check_transition(old: State, new: State) -> None:
    """Raise ``InvalidTransitionError`` unless ``old -> new`` is in the table."""
    if new not in TRANSITIONS[old]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[old]))
        raise InvalidTransitionError(
            f"cannot go from {old.value} to {new.value} (allowed: {allowed})"
        )


@dataclass
class StateMachine:
    """One state with its reason and the time it was entered; ``move`` enforces the table."""

    state: State = S.RUNNING
    reason: str | None = None
    since: float = field(default_factory=time.time)

    def move(self, new: State, reason: str | None = None) -> None:
        check_transition(self.state, new)
        self.state, self.reason, self.since = new, reason, time.time()

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def to_dict(self) -> dict[str, object]:
        return {"state": self.state.value, "reason": self.reason, "since": self.since}
