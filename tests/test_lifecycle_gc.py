"""gc: frees exactly what no manifest references, never a blob an in-flight checkpoint needs."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from fixtures_lifecycle import make_snapshot, put_blob

from jupyter_gkeresume.errors import InvalidInputError
from jupyter_gkeresume.paused_record import PausedKernel, PausedRecord, PausedRecords
from jupyter_gkeresume.snapshot import SigningKey
from jupyter_gkeresume.snapshot.gc import (
    apply_retention,
    collect_garbage,
    retention_plan,
)
from jupyter_gkeresume.snapshot.lease import MAX_TTL, RestoreLease
from jupyter_gkeresume.snapshot.retention import RetentionPolicy
from jupyter_gkeresume.snapshot.verify import verify_snapshot

LATER = time.time() + 10 * 86400  # every blob written by the test is past any grace period


def age(store, digest, seconds):
    path = store.blob_path(digest)
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_gc_after_rm_frees_exactly_the_unreferenced_bytes(local_store, signing_key):
    s1 = make_snapshot(local_store, signing_key, [b"A" * 100, b"B" * 200])
    s2 = make_snapshot(local_store, signing_key, [b"B" * 200, b"E" * 300])
    s3 = make_snapshot(local_store, signing_key, [b"B" * 200, b"C" * 400])
    only_s2 = set(s2.blobs) - set(s1.blobs) - set(s3.blobs)
    expected = {d: s2.blobs[d] for d in only_s2}
    assert len(expected) == 2  # E and s2's graph
    local_store.delete_manifest(s2.snapshot_id)

    dry = collect_garbage(local_store, grace_seconds=60, dry_run=True, now=LATER)
    assert dry.swept == expected and dry.bytes_freed == sum(expected.values())
    assert all(local_store.has_blob(d) for d in expected)

    report = collect_garbage(local_store, grace_seconds=60, now=LATER)
    assert report.swept == expected
    assert report.blobs_total == 7 and report.blobs_referenced == 5
    assert not any(local_store.has_blob(d) for d in expected)
    for s in (s1, s3):
        assert verify_snapshot(local_store, s.snapshot_id, signing_key).ok
    assert collect_garbage(local_store, grace_seconds=60, now=LATER).swept == {}


def test_young_blobs_are_never_swept(local_store, signing_key):
    make_snapshot(local_store, signing_key, [b"kept"])
    digest, size = put_blob(local_store, b"being written by a checkpoint")
    report = collect_garbage(local_store, grace_seconds=3600)
    assert report.swept == {} and report.young == {digest: size}
    assert local_store.has_blob(digest)


def test_gc_during_a_running_checkpoint_keeps_its_blobs(local_store, signing_key):
    """A writer streams blobs while gc runs over and over; the snapshot it commits is whole."""
    old = make_snapshot(local_store, signing_key, [b"old" * 100])
    local_store.delete_manifest(old.snapshot_id)
    for digest in old.blobs:
        age(local_store, digest, 7200)
    written, stop = [], threading.Event()

    def checkpoint():
        for i in range(20):
            written.append(put_blob(local_store, bytes([i]) * 4096))
            time.sleep(0.005)
        stop.set()

    writer = threading.Thread(target=checkpoint)
    writer.start()
    swept = {}
    while not stop.is_set():
        swept.update(collect_garbage(local_store, grace_seconds=3600).swept)
    writer.join()
    assert set(swept) == set(old.blobs)  # the garbage went, the new blobs stayed
    assert all(local_store.has_blob(d, s) for d, s in written)


def test_a_commit_during_marking_that_reuses_an_old_blob_keeps_it(local_store, signing_key):
    garbage = make_snapshot(local_store, signing_key, [b"weights" * 100])
    local_store.delete_manifest(garbage.snapshot_id)
    reused = garbage.storages["s0"].blob
    committed = []

    def progress(phase, done, total):
        if phase == "marking" and not committed:  # a checkpoint commits while gc marks
            committed.append(make_snapshot(local_store, signing_key, [b"weights" * 100]))

    make_snapshot(local_store, signing_key, [b"other"])
    report = collect_garbage(local_store, grace_seconds=60, now=LATER, progress=progress)
    assert committed and reused not in report.swept
    assert local_store.has_blob(reused)
    assert verify_snapshot(local_store, committed[0].snapshot_id, signing_key).ok


def test_a_blob_refreshed_during_gc_is_kept(local_store, signing_key):
    garbage = make_snapshot(local_store, signing_key, [b"weights" * 100])
    local_store.delete_manifest(garbage.snapshot_id)
    for digest in garbage.blobs:
        age(local_store, digest, 7200)
    reused = garbage.storages["s0"].blob
    make_snapshot(local_store, signing_key, [b"other"])
    refreshed = []

    def progress(phase, done, total):
        if phase == "marking":  # after the first listing: the writer contract, refresh to reuse
            os.utime(local_store.blob_path(reused))
            refreshed.append(True)

    report = collect_garbage(local_store, grace_seconds=3600, progress=progress)
    assert refreshed and reused in report.young and reused not in report.swept
    assert set(report.swept) == set(garbage.blobs) - {reused}


def test_an_unreadable_manifest_is_skipped_and_keeps_what_it_names(local_store, signing_key):
    """Issue 30.7: one manifest that cannot be parsed no longer freezes gc; the blobs whose
    digests it spells (all of a manifest cut short, here) stay, the rest is collected."""
    s = make_snapshot(local_store, signing_key, [b"a"])
    garbage, _ = put_blob(local_store, b"garbage")
    raw = Path(local_store.manifest_path(s.snapshot_id)).read_bytes()
    Path(local_store.manifest_path(s.snapshot_id)).write_bytes(raw[: len(raw) * 2 // 3])
    report = collect_garbage(local_store, grace_seconds=0, now=LATER)
    assert list(report.unreadable) == [s.snapshot_id]
    assert "skipped, the blobs it may name are kept" in report.unreadable[s.snapshot_id]
    assert set(report.swept) == {garbage}
    assert all(local_store.has_blob(d) for d in s.blobs)


def test_keep_last_counts_per_notebook(local_store, signing_key):
    """A notebook checkpointed often never costs a quieter notebook its last snapshot."""
    quiet = make_snapshot(local_store, signing_key, [b"q" * 50], notebook="quiet.ipynb")
    busy = [make_snapshot(local_store, signing_key, [bytes([i]) * 50], notebook="sub/busy.ipynb")
            for i in range(3)]
    plan = retention_plan(local_store, RetentionPolicy(keep_last=1), signing_key)
    assert plan.delete == [busy[0].snapshot_id, busy[1].snapshot_id]
    assert plan.keep[quiet.snapshot_id] == ["one of the last 1 of quiet.ipynb"]
    assert plan.keep[busy[2].snapshot_id] == ["one of the last 1 of sub/busy.ipynb"]


def test_retention_then_gc(local_store, signing_key):
    snaps = [make_snapshot(local_store, signing_key, [bytes([i]) * 50]) for i in range(4)]
    named = make_snapshot(local_store, signing_key, [b"n" * 50], name="baseline")
    record = PausedRecord.new(local_store.workspace, "user", "none", 0,
                              [PausedKernel(snaps[0].snapshot_id)])
    local_store.write_record("paused", json.dumps(record.to_dict()).encode())
    plan = retention_plan(local_store, RetentionPolicy(keep_last=2), signing_key)
    assert snaps[0].snapshot_id in plan.delete  # 22.1: a planted record protects nothing
    PausedRecords(local_store, lambda: signing_key).write(record)
    plan = retention_plan(local_store, RetentionPolicy(keep_last=2), signing_key)
    assert plan.delete == [snaps[1].snapshot_id, snaps[2].snapshot_id]
    assert apply_retention(local_store, plan, dry_run=True) == plan.delete
    dry = collect_garbage(local_store, grace_seconds=60, dry_run=True, now=LATER,
                          ignore=set(plan.delete))
    expected = {d: s for snap in snaps[1:3] for d, s in snap.blobs.items()}
    assert dry.swept == expected
    assert len(local_store.list_snapshot_ids()) == 5

    apply_retention(local_store, plan, dry_run=False)
    report = collect_garbage(local_store, grace_seconds=60, now=LATER)
    assert report.swept == expected
    assert local_store.list_snapshot_ids() == sorted(
        [snaps[0].snapshot_id, snaps[3].snapshot_id, named.snapshot_id]
    )


def test_files_of_writers_that_died_mid_write_are_swept_after_the_grace_period(
    local_store, signing_key
):
    snap = make_snapshot(local_store, signing_key, [b"kept"])
    folder = Path(local_store.root) / "blobs" / "ab"
    folder.mkdir(parents=True, exist_ok=True)
    dead = folder / f"{'ab' * 32}.safetensors.tmp-0123"
    dead.write_bytes(b"x" * 50)
    old = time.time() - 7200
    os.utime(dead, (old, old))
    live = Path(local_store.root) / "snapshots" / "20261130T101500Z-000aaa.json.tmp-4567"
    live.write_bytes(b"{}")

    dry = collect_garbage(local_store, grace_seconds=3600, dry_run=True)
    assert dry.partial_writes == {str(dead): 50} and dry.bytes_freed == 50 and dead.exists()
    report = collect_garbage(local_store, grace_seconds=3600)
    assert report.partial_writes == {str(dead): 50}
    assert not dead.exists() and live.exists()
    assert verify_snapshot(local_store, snap.snapshot_id, signing_key).ok
    with pytest.raises(InvalidInputError):
        local_store.delete_partial_write(str(Path(local_store.root) / "snapshots"))


PLANTED = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)


def test_a_planted_unsigned_manifest_steers_no_retention(local_store, signing_key):
    """13.2: an unsigned manifest with the newest possible id neither counts for ``keep_last``
    nor is deleted by the policy; the real snapshots stay (the newest of them is kept)."""
    real = [make_snapshot(local_store, signing_key, [bytes([i]) * 50]) for i in range(3)]
    unsigned = make_snapshot(local_store, None, [b"evil"], when=PLANTED)
    foreign = make_snapshot(local_store, SigningKey(b"another-workspace"), [b"other"])
    assert unsigned.snapshot_id.startswith("99991231T235959Z-")
    plan = retention_plan(local_store, RetentionPolicy(keep_last=1), signing_key)
    assert plan.delete == [real[0].snapshot_id, real[1].snapshot_id]
    assert plan.keep[real[2].snapshot_id] == ["one of the last 1"]
    for refused, reason in ((unsigned, "is unsigned"), (foreign, "signed with another key")):
        (why,) = plan.keep[refused.snapshot_id]
        assert reason in why and "never deleted by a policy" in why
    apply_retention(local_store, plan, dry_run=False)
    collect_garbage(local_store, grace_seconds=60, now=LATER)
    assert local_store.list_snapshot_ids() == sorted(
        [real[2].snapshot_id, unsigned.snapshot_id, foreign.snapshot_id])
    assert verify_snapshot(local_store, real[2].snapshot_id, signing_key).ok


def test_gc_removes_finished_lease_chains_only(local_store):
    """13.9: lease records of finished restores are collected after the grace period; a chain
    still held, or finished too recently, is left alone."""
    done = RestoreLease(local_store, "finished")
    for _ in range(3):
        done.acquire()
        done.release()
    expired = RestoreLease(local_store, "expired", ttl=1, clock=lambda: 1000.0)
    expired.acquire()  # never released: its holder died; expired long ago
    held = RestoreLease(local_store, "held", ttl=MAX_TTL)
    held.acquire()
    recent = RestoreLease(local_store, "recent")
    recent.acquire()
    recent.release()
    old = time.time() - 7200
    records = Path(local_store.root) / "records"
    for path in records.iterdir():
        if not path.name.startswith("lease-recent."):
            os.utime(path, (old, old))
    names = lambda: sorted(p.name for p in records.iterdir())  # noqa: E731
    before = names()
    assert len([n for n in before if n.startswith("lease-finished.")]) == 6

    dry = collect_garbage(local_store, grace_seconds=3600, dry_run=True)
    assert sorted(dry.leases) == ["expired", "finished"] and names() == before
    report = collect_garbage(local_store, grace_seconds=3600)
    assert sorted(report.leases) == ["expired", "finished"]
    assert names() == ["lease-held.0.json", "lease-recent.0.json", "lease-recent.1.json"]
    assert held.current().holder == held.holder  # the held chain still works
    held.renew()
    again = RestoreLease(local_store, "finished")  # a collected key starts a fresh chain
    again.acquire()
    assert again.epoch == 0 and again.release()
