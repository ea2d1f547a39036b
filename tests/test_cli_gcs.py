"""`jupyter gkeresume` on a gs:// store (fake-gcs-server through gcsfs), run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fixtures_lifecycle import make_snapshot

from jupyter_gkeresume.snapshot import SnapshotStore

JUPYTER = str(Path(sys.executable).with_name("jupyter"))


def test_cli_on_gcs(gcs_bucket, signing_key):
    store = SnapshotStore(gcs_bucket.url, "ws-gcs", gcs_bucket.storage_options)
    first = make_snapshot(store, signing_key, [b"A" * 3000, b"B" * 1000])
    second = make_snapshot(store, signing_key, [b"B" * 1000, b"C" * 2000], name="base")
    env = {**os.environ, **gcs_bucket.env, "GKERESUME_SIGNING_KEY": signing_key.secret.decode()}

    def cli(*args: str) -> tuple[int, object]:
        done = subprocess.run(
            [JUPYTER, "gkeresume", "--store", gcs_bucket.url, "--workspace", "ws-gcs", "--json",
             *args], env=env, capture_output=True, text=True, timeout=120, check=False,
        )
        return done.returncode, json.loads(done.stdout) if done.stdout else done.stderr

    code, rows = cli("list")
    assert code == 0 and [r["id"] for r in rows] == [second.snapshot_id, first.snapshot_id]
    assert all(r["verdict"] and r["error"] is None for r in rows)
    code, shown = cli("show", "base")
    assert code == 0 and shown["signature"] == "valid" and shown["manifest"]["name"] == "base"
    code, reports = cli("verify", "--all")
    assert code == 0 and all(r["ok"] for r in reports)

    code, young = cli("gc", "--dry-run")
    assert code == 0 and young["swept"] == {}

    only_first = {d: s for d, s in first.blobs.items() if d not in second.blobs}
    assert cli("rm", first.snapshot_id) == (0, {"removed": [first.snapshot_id]})
    code, dry = cli("gc", "--dry-run", "--grace-hours", "0")
    assert code == 0 and dry["swept"] == only_first
    assert dry["bytes_freed"] == sum(only_first.values())
    code, done = cli("gc", "--grace-hours", "0")
    assert code == 0 and done["swept"] == only_first
    store.fs.invalidate_cache()
    assert not any(store.has_blob(d) for d in only_first)
    code, usage = cli("usage")
    assert code == 0 and usage["snapshots"] == 1 and usage["stored_bytes"] == second.total_bytes

    store.fs.pipe_file(store.blob_path(second.storages["s1"].blob), b"\0" * 16)
    code, reports = cli("verify", "base")
    assert code == 1 and not reports[0]["ok"]
    assert "holds 16 bytes" in reports[0]["problems"][0]
