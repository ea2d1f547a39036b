"""Lifecycle against snapshots written by real kernels: trust, gc during a checkpoint, replay,
and the `jupyter gkeresume` command on them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fixtures_kernels import KernelError
from fixtures_lifecycle import make_snapshot

from jupyter_gkeresume.snapshot import Manifest, SnapshotStore
from jupyter_gkeresume.snapshot.gc import collect_garbage
from jupyter_gkeresume.snapshot.signing import SigningKey
from jupyter_gkeresume.snapshot.verify import verify_snapshot
from kernel_hooks.replay import plan_replay

JUPYTER = str(Path(sys.executable).with_name("jupyter"))


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    """``jupyter gkeresume ...`` as a user runs it, with the kernels' store, workspace and key."""
    return subprocess.run([JUPYTER, "gkeresume", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def store_of(env: dict) -> SnapshotStore:
    return SnapshotStore(env["GKERESUME_STORE"], env["GKERESUME_WORKSPACE"])


def newest(env: dict) -> Manifest:
    store = store_of(env)
    return Manifest.from_json(store.read_manifest_bytes(store.list_snapshot_ids()[-1]))


def test_unsigned_and_foreign_snapshots_are_refused_an_old_key_is_named(start_kernel, kernel_env,
                                                                        tmp_path):
    """Nothing waives a signature (there is no ``--trust``): after a key change, a snapshot
    signed with an earlier key of this workspace is restored and verified with that key named
    explicitly (``--key-file OLD``); a snapshot with a valid signature of a key from elsewhere
    is refused even when its key file is given (issue 22 item 4)."""
    a = start_kernel()
    a.run("import numpy as np\nw = np.arange(1000.0)\n%checkpoint -n base")
    checked = cli(kernel_env, "verify", "base", "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)[0]["signature"] == "valid"

    manifest_path = Path(store_of(kernel_env).manifest_path(newest(kernel_env).snapshot_id))
    data = json.loads(manifest_path.read_bytes())
    del data["signature"]
    manifest_path.write_text(json.dumps(data))
    unsigned = newest(kernel_env).snapshot_id
    b = start_kernel()
    with pytest.raises(KernelError, match=r"no snapshot of any notebook .* verifies .*is unsigned"):
        b.run("%resume")  # an unsigned snapshot never counts as the latest
    with pytest.raises(KernelError, match="is unsigned"):
        b.run(f"%resume {unsigned}")
    assert b.run("print('w' in globals())") == "False\n"
    refused = cli(kernel_env, "verify", "--all")
    assert refused.returncode == 1 and "is unsigned: refused" in refused.stdout

    a.run("%checkpoint -n kept")
    old_key = tmp_path / "old.key"
    old_key.write_text(kernel_env["GKERESUME_SIGNING_KEY"])
    kernel_env["GKERESUME_SIGNING_KEY"] = "another-workspace-key-" + "1" * 20
    c = start_kernel()
    with pytest.raises(KernelError, match="signed with another key"):
        c.run("%resume")
    kept = newest(kernel_env).snapshot_id
    assert "resumed" in c.run(f"%resume {kept} --key-file {old_key}")
    assert c.run("print(w.sum())") == "499500.0\n"
    assert cli(kernel_env, "--key-file", str(old_key), "verify", kept).returncode == 0

    foreign_key = tmp_path / "foreign.key"
    foreign_key.write_text("a-key-from-elsewhere-" + "2" * 20)
    planted = make_snapshot(store_of(kernel_env), SigningKey(foreign_key.read_bytes()), [b"x"])
    with pytest.raises(KernelError, match="never signed a snapshot of workspace test-ws here"):
        c.run(f"%resume {planted.snapshot_id} --key-file {foreign_key}")
    asked = cli(kernel_env, "--key-file", str(foreign_key), "verify", planted.snapshot_id)
    assert asked.returncode == 2 and "never signed a snapshot" in asked.stderr


def test_gc_during_a_real_checkpoint_keeps_every_blob_it_writes(start_kernel, kernel_env):
    store = store_of(kernel_env)
    a = start_kernel()
    a.run("import numpy as np\nparts = [np.random.rand(1 << 19) for _ in range(6)]")
    a.run("%checkpoint -n old")
    old = newest(kernel_env)
    store.delete_manifest(old.snapshot_id)
    for digest in old.blobs:  # garbage from long ago: gc may take it
        os.utime(store.blob_path(digest), (1, 1))
    a.run("parts = [p + 1 for p in parts]")
    outcome = {}
    checkpoint = threading.Thread(target=lambda: outcome.update(out=a.run("%checkpoint -n new")))
    checkpoint.start()
    swept = {}
    runs = 0
    while runs == 0 or checkpoint.is_alive():
        swept.update(collect_garbage(store).swept)
        runs += 1
    checkpoint.join()
    assert "checkpoint" in outcome["out"]
    new = newest(kernel_env)
    assert new.name == "new" and not set(new.blobs) & set(swept)
    key = SigningKey(kernel_env["GKERESUME_SIGNING_KEY"].encode())
    assert verify_snapshot(store, new.snapshot_id, key).ok
    assert set(swept) == set(old.blobs) - set(new.blobs)
    b = start_kernel()
    b.run("%resume new")
    assert b.run("print(round(float(sum(p.min() for p in parts)), 0) >= 6)") == "True\n"


def test_replay_rebuilds_what_could_not_be_captured(start_kernel, kernel_env):
    a = start_kernel()
    a.run("import math")
    a.run("n = 4")
    a.run("offset = 1")
    a.run("squares = (i * i + offset for i in range(n)); first = next(squares)")  # running
    a.run("unrelated = math.pi")
    a.run("%checkpoint")
    manifest = newest(kernel_env)
    missing = [o.name for o in manifest.objects if o.status == "skipped"]
    assert missing == ["squares"]
    plan = plan_replay(manifest.history, missing)
    assert [manifest.history[c] for c in plan.cells] == [
        "n = 4", "offset = 1", "squares = (i * i + offset for i in range(n)); first = next(squares)"]
    assert plan.unresolved == {} and plan.rebinds == ["first", "n", "offset"]

    b = start_kernel()
    b.run("%resume")
    assert b.run("print('squares' in globals(), n)") == "False 4\n"
    for source in plan.sources:
        b.run(source)
    assert b.run("print(first, list(squares))") == "1 [2, 5, 10]\n"
