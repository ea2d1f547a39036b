"""Retention policies are pure: same facts, same plan; named and paused snapshots always stay."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

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
    """12.4: a busy notebook's snapshots never push another notebook's last one out."""
    snaps = [SnapshotFacts(i, notebook="a.ipynb") for i in IDS[1:]]
    snaps.append(SnapshotFacts(IDS[0], notebook="b.ipynb"))
    p = plan(snaps, RetentionPolicy(keep_last=1), now=NOW)
    assert p.delete == IDS[1:4]
    assert p.keep == {IDS[0]: ["one of the last 1"], IDS[4]: ["one of the last 1"]}
