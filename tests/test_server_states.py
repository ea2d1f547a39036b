"""The state enum and its transition table: the documented paths work, everything else raises."""

from __future__ import annotations

import itertools

import pytest

from jupyter_gkeresume.errors import InvalidTransitionError
from jupyter_gkeresume.states import ACTIVE, TRANSITIONS, State, StateMachine, check_transition

S = State
DOCUMENTED_PATHS = [
    [S.RUNNING, S.PAUSING, S.RELEASING, S.PAUSED],  # pause with release
    [S.RUNNING, S.PAUSING, S.RUNNING],  # checkpoint only, or a failed pause
    [S.RUNNING, S.PAUSING, S.RELEASING, S.RUNNING],  # release refused
    [S.PAUSED, S.WAITING_FOR_RESOURCES, S.RESTORING, S.READY],  # resume
    [S.RUNNING, S.WAITING_FOR_RESOURCES, S.RESTORING, S.READY, S.PAUSING],  # restore, then pause
    [S.READY, S.PAUSING, S.RUNNING],  # checkpoint after a resume
    [S.PAUSED, S.WAITING_FOR_RESOURCES, S.READY],  # files-only
    [S.PAUSED, S.WAITING_FOR_RESOURCES, S.RESTORING, S.FAILED, S.WAITING_FOR_RESOURCES],  # retry
    [S.RUNNING, S.PAUSED, S.RUNNING],  # a paused record found at start, then discarded
    [S.PAUSED, S.WAITING_FOR_RESOURCES, S.FAILED, S.PAUSING],  # pause after a failed resume
    [S.PAUSED, S.WAITING_FOR_RESOURCES, S.FAILED, S.RUNNING],  # discard after a failed resume
]


@pytest.mark.parametrize("path", DOCUMENTED_PATHS, ids=lambda p: "->".join(s.value for s in p))
def test_documented_paths(path):
    machine = StateMachine(path[0])
    for state in path[1:]:
        machine.move(state, f"to {state.value}")
    assert machine.state == path[-1] and machine.reason == f"to {path[-1].value}"


def test_everything_else_raises_and_leaves_the_state_alone():
    refused = 0
    for old, new in itertools.product(State, State):
        if new in TRANSITIONS[old]:
            check_transition(old, new)
            continue
        machine = StateMachine(old, reason="kept")
        with pytest.raises(InvalidTransitionError, match=f"from {old.value} to {new.value}"):
            machine.move(new)
        assert machine.state == old and machine.reason == "kept"
        refused += 1
    assert refused > 30
    # restoring always goes through waiting_for_resources (a kernel to restore into, first)
    assert all(S.RESTORING not in TRANSITIONS[s] for s in State if s != S.WAITING_FOR_RESOURCES)
    # the invariants the orchestrator relies on
    assert S.PAUSED not in TRANSITIONS[S.PAUSING]  # never paused without the releasing step
    assert S.RELEASING not in TRANSITIONS[S.RUNNING]  # never released without a checkpoint
    assert all(S.FAILED in TRANSITIONS[s] for s in ACTIVE)
    assert {s.value for s in State} == {"running", "pausing", "releasing", "paused",
                                        "waiting_for_resources", "restoring", "ready", "failed"}
