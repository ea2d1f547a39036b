"""The single-flight restore lease, on gs:// (fake-gcs-server) and on a local directory."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from jupyter_gkeresume.errors import InvalidInputError, LeaseHeldError
from jupyter_gkeresume.snapshot.gc import collect_garbage
from jupyter_gkeresume.snapshot.lease import MAX_TTL, RestoreLease
from jupyter_gkeresume.snapshot.store import SnapshotStore


class Clock:
    """A wall clock the test moves by hand (expiry without sleeping)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["gs", "local"])
def store(request, tmp_path):
    if request.param == "local":
        return SnapshotStore(str(tmp_path), "ws")
    bucket = request.getfixturevalue("gcs_bucket")
    return SnapshotStore(bucket.url, "ws", bucket.storage_options)


def test_second_caller_is_told_who_holds_it(store):
    clock = Clock()
    tab1 = RestoreLease(store, "kernel-1", "alice tab 1", ttl=60, clock=clock)
    tab2 = RestoreLease(store, "kernel-1", "alice tab 2", ttl=60, clock=clock)
    tab1.acquire()
    with pytest.raises(LeaseHeldError) as info:
        tab2.acquire()
    assert info.value.holder == "alice tab 1"
    assert info.value.expires_at == clock.now + 60
    assert "held by 'alice tab 1'" in str(info.value)
    assert tab1.release() is True
    tab2.acquire()
    assert tab2.current().holder == "alice tab 2"
    # another kernel session is another lease
    RestoreLease(store, "kernel-2", "bob", clock=clock).acquire()


def test_expired_lease_is_taken_over_and_the_old_holder_learns_it(store):
    clock = Clock()
    old = RestoreLease(store, "k", "pod-a", ttl=30, clock=clock)
    new = RestoreLease(store, "k", "pod-b", ttl=30, clock=clock)
    old.acquire()
    clock.now += 29
    with pytest.raises(LeaseHeldError):
        new.acquire()
    clock.now += 2
    new.acquire()
    with pytest.raises(LeaseHeldError) as info:
        old.renew()
    assert info.value.holder == "pod-b"
    assert old.release() is False  # never frees the new holder's lease
    assert new.current().holder == "pod-b" and new.current().state == "held"


def test_renew_extends_and_expired_but_untaken_lease_can_still_renew(store):
    clock = Clock()
    lease = RestoreLease(store, "k", "me", ttl=10, clock=clock)
    lease.acquire()
    clock.now += 8
    lease.renew()
    assert lease.current().expires_at == clock.now + 10
    clock.now += 50  # expired, nobody took it
    lease.renew()
    assert lease.current().holder == "me"
    assert lease.release() is True
    assert lease.current().state == "free"


def test_waiting_acquirer_gets_it_after_release(store):
    holder = RestoreLease(store, "k", "first", ttl=60)
    waiter = RestoreLease(store, "k", "second", ttl=60)
    holder.acquire()
    released = threading.Timer(0.3, holder.release)
    released.start()
    waiter.acquire(wait=30, poll=0.05)
    released.join()
    assert waiter.current().holder == "second"


def test_concurrent_acquirers_exactly_one_wins(store):
    """Several tabs/pods ask at the same moment, round after round (takeovers included)."""
    clock = Clock()
    for round_ in range(6):
        leases = [RestoreLease(store, "k", f"r{round_}-c{i}", ttl=30, clock=clock) for i in range(4)]
        barrier = threading.Barrier(len(leases))

        def attempt(lease, barrier=barrier):
            barrier.wait()
            try:
                lease.acquire()
                return lease
            except LeaseHeldError:
                return None

        with ThreadPoolExecutor(len(leases)) as pool:
            winners = [w for w in pool.map(attempt, leases) if w is not None]
        assert len(winners) == 1
        assert winners[0].current().holder == winners[0].holder
        if round_ % 2:
            winners[0].release()
        else:
            clock.now += 31  # let it expire: next round is a takeover race


def test_hold_renews_in_the_background_and_releases(store):
    lease = RestoreLease(store, "k", "me", ttl=3)
    with lease.hold():
        epoch_before = lease.epoch
        for _ in range(300):  # wait for a renewal (every ttl/3), without timing anything
            if lease.epoch > epoch_before:
                break
            threading.Event().wait(0.1)
        assert lease.epoch > epoch_before and lease.lost is None
        with pytest.raises(LeaseHeldError):
            RestoreLease(store, "k", "other").acquire()
    assert lease.current().state == "free"
    RestoreLease(store, "k", "other").acquire()


@pytest.mark.parametrize("key", ["", "A", "a/b", "a.b", "../x", "x" * 101, None])
def test_bad_keys_are_refused(tmp_path, key):
    with pytest.raises(InvalidInputError):
        RestoreLease(SnapshotStore(str(tmp_path), "ws"), key)


def test_gc_collects_finished_chains_on_both_stores(store):
    """Finished chains go once they are older than the grace period; a held one stays."""
    done = RestoreLease(store, "done", ttl=60)
    done.acquire()
    done.release()
    held = RestoreLease(store, "held", ttl=MAX_TTL)
    held.acquire()
    assert collect_garbage(store, grace_seconds=3600).leases == []  # too recent
    later = time.time() + 7200
    report = collect_garbage(store, grace_seconds=3600, now=later)
    assert report.leases == ["done"]
    assert sorted(store.list_records("lease-")) == ["lease-held.0"]
    assert store.read_record("lease-done.0") is None
    held.release()


def test_a_planted_lease_blocks_for_one_ttl_at_most_and_is_collected(store):
    """22.6: before, ``expires_at: 1e300`` blocked every restore for the whole wait and gc never
    collected it; ``epoch: 1e300`` broke the restore at once (the next record's name). The
    holder text, escape sequences included, reaches the message escaped and quoted."""
    clock = Clock()
    store.write_record("lease-k.0", json.dumps({
        "epoch": 1e300, "state": "held", "holder": "root\x1b]0;owned\x07\n[OK] fine",
        "token": "t", "expires_at": 1e300}).encode())
    waiter = RestoreLease(store, "k", "pod-b", ttl=30, clock=clock)
    with pytest.raises(LeaseHeldError) as info:
        waiter.acquire()
    assert "\x1b" not in str(info.value) and "\n" not in str(info.value)
    assert "held by 'root\\x1b]0;owned\\x07\\n[OK] fine'" in str(info.value)
    clock.now += 31  # one ttl after the waiter first saw it
    waiter.acquire()
    assert waiter.current().epoch == 1 and waiter.release()
    store.write_record("lease-p.0", json.dumps({"state": "held", "expires_at": 1e300}).encode())
    report = collect_garbage(store, grace_seconds=3600, now=time.time() + 2 * MAX_TTL)
    assert "p" in report.leases and store.read_record("lease-p.0") is None
