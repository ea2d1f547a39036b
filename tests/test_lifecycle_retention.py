"""Retention policies are pure: same facts, same plan; named and paused snapshots always stay."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyter_gkeresume.errors import InvalidInputError
from jupyter_gkeresume.snapshot.retention import (
    RetentionPolicy,
    SnapshotFacts,
    created_at,
    plan,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
IDS = [f"202611{day:02d}T120000Z-00000{day % 10}" for day in (20, 25, 27, 28, 29)]


def facts(**named):
    return [SnapshotFacts(i, named.get(i)) for i in IDS]


def test_keep_last_deletes_the_oldest_first():
    p = plan(facts(), RetentionPolicy(keep_last=2), now=NOW)
    assert p.delete == IDS[:3]
    assert p.keep == {IDS[3]: ["one of the last 2"], IDS[4]: ["one of the last 2"]}


def test_keep_days_uses_the_creation_time():
    p = plan(facts(), RetentionPolicy(keep_days=2.5), now=NOW)
    assert p.delete == IDS[:3]
    assert p.keep[IDS[3]] == ["newer than 2.5 days"]


def test_rules_are_a_union():
    p = plan(facts(), RetentionPolicy(keep_last=1, keep_days=4), now=NOW)
    assert p.delete == IDS[:2]
    assert p.keep[IDS[4]] == ["one of the last 1", "newer than 4 days"]


def test_named_paused_and_refused_always_stay():
    snaps = facts(**{IDS[0]: "baseline"})
    snaps[2] = SnapshotFacts(IDS[2], refused="unreadable: not valid JSON")
    p = plan(snaps, RetentionPolicy(keep_last=1), now=NOW, protected={IDS[1]})
    assert p.delete == [IDS[3]]
    assert p.keep[IDS[0]] == ["named 'baseline'"]
    assert p.keep[IDS[1]] == ["in the paused record"]
    assert p.keep[IDS[2]] == ["refused (unreadable: not valid JSON): never deleted by a policy"]


def test_refused_snapshots_do_not_count_for_keep_last():
    """A planted unsigned manifest with the newest id must not push a real snapshot out."""
    planted = "99991231T235959Z-ffffff"
    snaps = [*facts(), SnapshotFacts(planted, refused="snapshot is unsigned")]
    p = plan(snaps, RetentionPolicy(keep_last=1), now=NOW)
    assert p.delete == IDS[:4]
    assert p.keep[IDS[4]] == ["one of the last 1"]
    assert planted in p.keep and planted not in p.delete


def test_no_rule_keeps_everything():
    p = plan(facts(), RetentionPolicy(), now=NOW)
    assert p.delete == [] and set(p.keep) == set(IDS)


@pytest.mark.parametrize("policy", [{"keep_last": 0}, {"keep_last": True}, {"keep_days": -1},
                                    {"keep_days": float("nan")}])
def test_bad_policies_are_refused(policy):
    with pytest.raises(InvalidInputError):
        RetentionPolicy(**policy)


def test_created_at_reads_the_id():
    assert created_at(IDS[0]) == datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
    assert created_at("20261399T999999Z-000000").year == 9999


def test_keep_last_counts_per_notebook():
    # b.ipynb checkpoints often; a.ipynb once, long ago: a keeps its only snapshot.
    snaps = [SnapshotFacts(IDS[0], notebook="a.ipynb")] + [
        SnapshotFacts(i, notebook="b.ipynb") for i in IDS[1:]]
    p = plan(snaps, RetentionPolicy(keep_last=2), now=NOW)
    assert p.keep[IDS[0]] == ["one of the last 2 of a.ipynb"]
    assert p.delete == IDS[1:3]


def _snapshot_id(n: int) -> str:
    return f"20261{n % 2}{n % 28 + 1:02d}T12{n % 60:02d}00Z-{n:06x}"


snapshot_facts = st.lists(
    st.builds(
        SnapshotFacts,
        snapshot_id=st.integers(0, 10**6).map(_snapshot_id),
        name=st.sampled_from([None, None, None, "baseline"]),
        refused=st.sampled_from([None, None, None, "unsigned"]),
        notebook=st.sampled_from([None, "a.ipynb", "sub/b.ipynb", "c.ipynb"]),
    ),
    max_size=30, unique_by=lambda s: s.snapshot_id,
)


@given(snapshot_facts, st.integers(1, 4), st.randoms(use_true_random=False))
def test_no_notebook_loses_its_newest_snapshots(snaps, keep_last, rnd):
    p = plan(snaps, RetentionPolicy(keep_last=keep_last), now=NOW)
    assert set(p.keep) | set(p.delete) == {s.snapshot_id for s in snaps}
    assert not set(p.keep) & set(p.delete)
    for notebook in {s.notebook for s in snaps}:
        verified = sorted((s.snapshot_id for s in snaps if s.notebook == notebook and s.refused is None),
                          reverse=True)
        assert set(verified[:keep_last]) <= set(p.keep), notebook
        kept_by_count = [i for i in verified if any(r.startswith("one of the last")
                                                    for r in p.keep.get(i, []))]
        assert kept_by_count == verified[:keep_last]
    for s in snaps:  # what a policy deletes is never named, unreadable or protected
        if s.snapshot_id in p.delete:
            assert s.name is None and s.refused is None
    shuffled = list(snaps)
    rnd.shuffle(shuffled)
    assert plan(shuffled, RetentionPolicy(keep_last=keep_last), now=NOW) == p
