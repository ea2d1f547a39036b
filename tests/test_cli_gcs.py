"""`jupyter gkeresume` on a gs:// store (fake-gcs-server through gcsfs), run as a user runs it;
an unreachable one fails fast, in one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from fixtures_lifecycle import make_snapshot

from jupyter_gkeresume.cli import CommandApp
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


def test_gc_all_workspaces_on_gcs(gcs_bucket, signing_key):
    blobs = {}
    for ws in ("ws-one", "ws-two"):
        store = SnapshotStore(gcs_bucket.url, ws, gcs_bucket.storage_options)
        blobs[ws] = len(make_snapshot(store, signing_key, [ws.encode() * 100]).blobs)
    done = subprocess.run(
        [JUPYTER, "gkeresume", "gc", "--all-workspaces", "--dry-run", "--json", "--store",
         gcs_bucket.url], env={**os.environ, **gcs_bucket.env}, capture_output=True, text=True,
        timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    reports = json.loads(done.stdout)
    assert sorted(reports) == ["ws-one", "ws-two"]
    assert {ws: r["blobs_total"] for ws, r in reports.items()} == blobs
    assert all(r["swept"] == {} for r in reports.values())


def test_unreachable_bucket_is_one_line(tmp_path):
    """A store nobody answers for: the CLI gives up within its store_timeout (not gcsfs's ~35 s
    of retries) and says so in one line, with no traceback."""
    with socket.socket() as s:  # a port that was free a moment ago: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}",
           "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "FSSPEC_GS_TOKEN": "anon",
           "GKERESUME_SIGNING_KEY": "k" * 32, "JUPYTER_CONFIG_DIR": str(tmp_path)}
    assert CommandApp.class_traits()["store_timeout"].default_value == 10  # the default deadline
    # Waited out: one set in the config file, one on the command line (which wins over it).
    (tmp_path / "jupyter_server_config.json").write_text('{"CommandApp": {"store_timeout": 1}}')
    runs = {
        "1": ["list", "--store", "gs://nowhere/p", "--workspace", "w"],
        "2": ["gc", "--all-workspaces", "--store", "gs://nowhere/p", "--CommandApp.store_timeout=2"],
    }
    for seconds, args in runs.items():
        done = subprocess.run([JUPYTER, "gkeresume", *args], env=env, capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 1 and done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("jupyter gkeresume: error: ")
        assert f"did not answer within {seconds} s" in lines[0]
