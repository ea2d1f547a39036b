"""Estimates a user can trust (issue 23, item 4): ``jupyter_gkeresume.rates`` as pure functions,
and ``EventLog.estimate`` over a store's recorded pauses and resumes, replayed on a fake clock
(the events' ``at``; durations from a store that moves 180 MiB/s after a 1.5 s fixed cost, each
run up to 10 % off)."""

from __future__ import annotations

import logging

import pytest

from jupyter_gkeresume.advisor import Event, read_events, record_events
from jupyter_gkeresume.events import EventLog
from jupyter_gkeresume.rates import expected_seconds, rate_known, seconds_left
from kernel_hooks.progress import describe
from kernel_hooks.results import Progress

MIB = 1 << 20
LOG = logging.getLogger("test-estimates")


def takes(nbytes: int, jitter: float) -> float:
    """What an operation on ``nbytes`` takes on the simulated store."""
    return (1.5 + nbytes / (180 * MIB)) * jitter


# A user's session over a day: it grows, shrinks, once holds a big model; sizes in MiB.
SESSION = [(512, 1.0), (512, 1.08), (600, 0.93), (700, 1.1), (256, 0.95), (2048, 1.05),
           (1024, 0.9), (1100, 1.07), (64, 0.97), (512, 1.02)]


def test_no_rate_and_no_time_left_from_a_first_sample():
    # Issue 23's first samples: 128 B of 1.4 GiB in 10 ms ("about 30 h 15 min left"), 8 MiB of
    # 512 MiB read while the kernel started ("about 2 min 27 s left" for a 5 s resume).
    assert not rate_known(128, int(1.4 * 1024 * MIB), 0.0095)
    assert seconds_left(128, int(1.4 * 1024 * MIB), 0.0095) is None
    assert seconds_left(8 * MIB, 512 * MIB, 2.3) is None
    assert seconds_left(256 * MIB, 512 * MIB, 2.0) == 2.0
    assert seconds_left(MIB, 0, 5.0) is None and rate_known(MIB, 0, 5.0)
    # The notebook's progress line says neither the rate nor a time left until it is known.
    assert describe(Progress("writing", 128, int(1.4 * 1024 * MIB), 0.0095)) == (
        "Writing 128 B of 1.4 GiB")
    assert describe(Progress("reading", 256 * MIB, 512 * MIB, 2.0)) == (
        "Reading 256 MiB of 512 MiB at 128 MiB/s, about 2 s left")


def test_expected_seconds_learns_fixed_and_per_byte_cost():
    assert expected_seconds([], MIB) is None
    # One run: scaled by size; runs of one size cannot tell fixed from per-byte cost.
    assert expected_seconds([(512 * MIB, 4.0)], 256 * MIB) == 2.0
    # Sizes far apart: the line through them (fixed 1.5 s + 180 MiB/s), not a proportion.
    runs = [(b * MIB, takes(b * MIB, 1.0)) for b in (64, 512, 2048)]
    assert expected_seconds(runs, 4 * MIB) == pytest.approx(takes(4 * MIB, 1.0))
    # Older records without bytes: their median duration; only the last 10 runs count.
    assert expected_seconds([(0, 3.0), (0, 5.0), (0, 4.0)], MIB) == 4.0
    assert expected_seconds([(MIB, 100.0)] + [(MIB, 2.0)] * 10, MIB) == 2.0


@pytest.mark.parametrize("kind", ["pause", "resume"])
async def test_after_an_operation_the_next_estimate_is_within_30_percent(local_store, kind):
    log = EventLog(local_store, LOG)
    clock = 1_764_500_000.0  # the fake clock: when each operation starts
    assert await log.estimate(kind, 512 * MIB) is None  # nothing measured on this store yet
    errors = []
    for mib, jitter in SESSION:
        estimate = await log.estimate(kind, mib * MIB)
        took = takes(mib * MIB, jitter)
        if estimate is not None:
            errors.append(abs(estimate - took) / took)
        assert await log.record(Event(clock, kind, seconds=took, bytes=mib * MIB),
                                Event(clock + 600, "activity"))
        clock += 3600
    assert len(errors) == len(SESSION) - 1
    assert max(errors) <= 0.3, errors
    # A server started later reads the same record and says the same.
    again = EventLog(local_store, LOG)
    assert await again.estimate(kind, MIB) == await log.estimate(kind, MIB)
    assert read_events(local_store)[-2].bytes == SESSION[-1][0] * MIB


async def test_a_first_resume_is_estimated_from_the_pauses_of_this_store(local_store):
    """No resume recorded yet: the pauses moved the same bytes through the same store."""
    record_events(local_store, [Event(1.0, "pause", seconds=6.0, bytes=512 * MIB)])
    log = EventLog(local_store, LOG)
    assert await log.estimate("resume", 512 * MIB) == 6.0
    await log.record(Event(100.0, "resume", seconds=4.0, bytes=512 * MIB))
    assert await log.estimate("resume", 512 * MIB) == 4.0  # then the resumes themselves
    assert await log.estimate("pause", 512 * MIB) == 6.0
