"""End to end through gs:// (fake-gcs-server) with real kernels: the core round trip, checkpoints
that meet 503s, a killed server or a permanent failure, and two restores racing for the lease."""

from __future__ import annotations

import threading

import pytest
from test_core_roundtrip import EXTRAS, SETUP

from jupyter_gkeresume.snapshot.store import SnapshotStore

BIG = "big = torch.arange(10_000_000, dtype=torch.float32)\n"  # a 40 MB blob: 3 chunks of 16 MiB


def use_bucket(kernel_env: dict, bucket) -> SnapshotStore:
    """Point every kernel of the test at ``bucket``; return the store as the test sees it."""
    kernel_env.update(bucket.env, GKERESUME_TEST_CWD=kernel_env["GKERESUME_STORE"],
                      GKERESUME_STORE=f"{bucket.url}/snapshots")
    return SnapshotStore(f"{bucket.url}/snapshots", kernel_env["GKERESUME_WORKSPACE"],
                         bucket.storage_options)


def test_core_round_trip_through_gcs(start_kernel, kernel_env, gcs_bucket):
    store = use_bucket(kernel_env, gcs_bucket)
    a = start_kernel()
    a.run(SETUP + EXTRAS)
    a.run("losses_a = [step() for _ in range(5)]")
    assert "(mid)" in a.run("%checkpoint -n mid")
    a.kill()
    assert len(store.list_snapshot_ids()) == 1 and store.list_blobs()

    b = start_kernel()
    assert "resumed" in b.run("%resume mid")
    identity = b.run_json(
        "print(json.dumps([opt.param_groups[0]['params'][0] is model.emb.weight,"
        " model.out.weight is model.emb.weight, alias is fortran]))"
    )
    assert identity == [True, True, True]
    b.run("losses_b = [step() for _ in range(5)]")
    resumed = b.run_json("print(json.dumps([fingerprint(), losses_b]))")

    c = start_kernel()
    c.run(SETUP + EXTRAS)
    c.run("losses_a = [step() for _ in range(5)]\nlosses_c = [step() for _ in range(5)]")
    assert resumed == c.run_json("print(json.dumps([fingerprint(), losses_c]))")


def test_checkpoint_through_503s_succeeds(start_kernel, kernel_env, gcs_faulty):
    store = use_bucket(kernel_env, gcs_faulty.bucket)
    a = start_kernel()
    a.run("import torch\n" + BIG + "small = {'a': torch.ones(3)}")
    proxy = gcs_faulty.proxy
    proxy.inject("status", count=2, match="uploadType=resumable", status=503)
    proxy.inject("status", count=1, match="upload_id=", status=503)
    proxy.inject("status", count=1, match="ifGenerationMatch=0", status=503)  # the commit
    assert "checkpoint" in a.run("%checkpoint -n through")
    assert proxy.outcomes().count("injected 503") == 4
    a.kill()
    assert len(store.list_snapshot_ids()) == 1
    b = start_kernel()
    b.run("%resume through")
    assert b.run("print(bool(big.eq(torch.arange(10_000_000, dtype=torch.float32)).all()))") == (
        "True\n"
    )


def test_permanent_failure_commits_nothing_and_the_previous_snapshot_restores(
    start_kernel, kernel_env, gcs_faulty
):
    store = use_bucket(kernel_env, gcs_faulty.bucket)
    a = start_kernel()
    a.run("import torch\nx = torch.ones(1000)\n")
    a.run("%checkpoint -n before")
    a.run(BIG + "x += 1")
    gcs_faulty.proxy.inject("status", count=10**6, match="/upload/", status=403)
    with pytest.raises(AssertionError) as info:
        a.run("%checkpoint -n after")
    message = str(info.value)
    assert "Forbidden" in message and "upload_id" not in message
    assert a.run("print(float(x.sum()), big.numel())") == "2000.0 10000000\n", "kernel untouched"
    gcs_faulty.proxy.clear()
    assert [m["name"] for m in manifests(store)] == ["before"]
    a.kill()
    b = start_kernel()
    b.run("%resume latest")
    assert b.run("print(float(x.sum()), 'big' in globals())") == "1000.0 False\n"


def test_server_killed_mid_checkpoint(start_kernel, kernel_env, gcs_faulty):
    """SIGKILL the GCS server while the big blob is halfway up, start it again: the checkpoint
    completes (the lost upload session is restarted), and both snapshots restore."""
    store = use_bucket(kernel_env, gcs_faulty.bucket)
    a = start_kernel()
    a.run("import torch\nx = torch.ones(1000)\n")
    a.run("%checkpoint -n before")
    a.run(BIG)
    outcome = gcs_faulty.kill_during_upload(lambda: a.run("%checkpoint -n during"), 300)
    # gcsfs retried the chunk until the server was back, the lost session was restarted
    assert isinstance(outcome[0], str) and "checkpoint" in outcome[0], outcome
    assert [m["name"] for m in manifests(store)] == ["before", "during"]
    assert gcs_faulty.proxy.outcomes("upload_id=").count("404") >= 1
    a.kill()
    b = start_kernel()
    b.run("%resume before")
    assert b.run("print(float(x.sum()), 'big' in globals())") == "1000.0 False\n"
    b.run("%resume during")
    assert b.run("print(bool(big.eq(torch.arange(10_000_000, dtype=torch.float32)).all()))") == (
        "True\n"
    )


RESUME_UNDER_LEASE = r"""
import json, os, time, kernel_hooks, kernel_hooks.api
from jupyter_gkeresume.errors import LeaseHeldError
from jupyter_gkeresume.snapshot.lease import RestoreLease
lease = RestoreLease(kernel_hooks.api.open_store(), "notebook-session-1", "{who}", ttl=60)
try:
    with lease.hold(wait={wait}):
        open({acquired!r}, "w").close()
        while not os.path.exists({go!r}):  # the test says when this restore may proceed
            time.sleep(0.05)
        result = kernel_hooks.resume("latest")
    print(json.dumps({{"restored": sorted(result.restored)}}))
except LeaseHeldError as exc:
    print(json.dumps({{"held_by": exc.holder}}))
"""


def test_two_restores_of_one_session_one_runs_the_other_is_told_or_waits(
    start_kernel, kernel_env, gcs_bucket, tmp_path
):
    use_bucket(kernel_env, gcs_bucket)
    a = start_kernel()
    a.run("import torch\n" + BIG + "y = 7")
    a.run("%checkpoint")
    a.kill()
    tab1, tab2 = start_kernel(), start_kernel()
    flags = {name: str(tmp_path / name) for name in ("acquired1", "go", "acquired2")}
    answers: dict[str, object] = {}
    first = threading.Thread(target=lambda: answers.update(tab1=tab1.run_json(
        RESUME_UNDER_LEASE.format(who="tab-1", wait=0, acquired=flags["acquired1"], go=flags["go"])
    )))
    first.start()
    for _ in range(1200):
        if (tmp_path / "acquired1").exists() or not first.is_alive():
            break
        threading.Event().wait(0.05)
    assert (tmp_path / "acquired1").exists(), answers
    # tab 2 asks while tab 1 holds the lease: it is told who holds it
    told = tab2.run_json(RESUME_UNDER_LEASE.format(
        who="tab-2", wait=0, acquired=flags["acquired2"], go=flags["go"]))
    assert told == {"held_by": "tab-1"}
    assert not (tmp_path / "acquired2").exists()
    # tab 2 asks again, willing to wait: it runs once tab 1 is done
    second = threading.Thread(target=lambda: answers.update(tab2=tab2.run_json(
        RESUME_UNDER_LEASE.format(who="tab-2", wait=120, acquired=flags["acquired2"],
                                  go=flags["go"])
    )))
    second.start()
    (tmp_path / "go").touch()
    first.join(300)
    second.join(300)
    both = {"restored": ["big", "torch", "y"]}
    assert answers == {"tab1": both, "tab2": both}


def manifests(store: SnapshotStore) -> list[dict]:
    import json

    return [json.loads(store.read_manifest_bytes(i)) for i in store.list_snapshot_ids()]
