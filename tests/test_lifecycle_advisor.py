"""The idle-policy advisor replays recorded events under candidate thresholds."""

from __future__ import annotations

import pytest

from jupyter_gkeresume.advisor import Event, advise, plot, read_events, record_events
from jupyter_gkeresume.errors import InvalidInputError, ManifestError

# activity 0, 300; idle an hour; back at 3900; paused (30 s, 2 GPUs); resumed at 7500 (60 s).
EVENTS = [
    Event(0, "activity"), Event(300, "activity"), Event(3900, "activity"),
    Event(4000, "pause", 30, gpus=2), Event(7500, "resume", 60), Event(7800, "activity"),
]


def outcome(advice, minutes):
    return next(o for o in advice.outcomes if o.threshold_minutes == minutes)


def test_simulated_outcomes_by_threshold():
    advice = advise(EVENTS, [10, 59.9, 60])
    assert (advice.pause_seconds, advice.resume_seconds, advice.gpus) == (30, 60, 2)
    assert advice.measured and advice.hours_observed == pytest.approx(7800 / 3600)
    never = advice.outcomes[0]
    assert never.threshold_minutes is None and never.pauses == 0
    assert never.gpu_hours_held == pytest.approx(2 * 7800 / 3600, abs=1e-3)
    ten = outcome(advice, 10)  # both hour-long gaps pause: 3600 - 600 - 30 s released each
    assert ten.pauses == 2
    assert ten.gpu_hours_released == pytest.approx(2 * 2 * 2970 / 3600, abs=1e-3)
    assert ten.gpu_hours_held == pytest.approx(2 * (7800 - 5940) / 3600, abs=1e-3)
    assert ten.user_wait_minutes == 2.0
    late = outcome(advice, 59.9)  # the user comes back while the pause still runs
    assert late.pauses == 2 and late.gpu_hours_released == 0
    assert late.user_wait_minutes == pytest.approx(2 * (60 + 24) / 60, abs=0.01)
    assert outcome(advice, 60).pauses == 0


def test_defaults_are_assumed_without_measurements():
    advice = advise([Event(0, "activity"), Event(7200, "activity")], [30])
    assert not advice.measured and advice.gpus == 1
    assert outcome(advice, 30).gpu_hours_released == pytest.approx((5400 - 60) / 3600, abs=1e-3)


def test_events_record_round_trip_and_bad_input(local_store):
    assert read_events(local_store) == []
    with pytest.raises(InvalidInputError, match="no events recorded"):
        advise([], [5])
    record_events(local_store, EVENTS[:3])
    record_events(local_store, EVENTS[3:])
    assert read_events(local_store) == EVENTS
    with pytest.raises(InvalidInputError, match="positive minutes"):
        advise(EVENTS, [0])
    local_store.write_record("events", b'{"events": [{"at": -1, "kind": "activity"}]}')
    with pytest.raises(ManifestError, match="event #0 is malformed"):
        read_events(local_store)


def test_plot_is_a_png(tmp_path):
    path = tmp_path / "advice.png"
    plot(advise(EVENTS), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
