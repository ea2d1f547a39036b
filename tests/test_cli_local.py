"""`jupyter gkeresume` on a local store: every command, --json parsed, exit codes, progress, the
server's config files, ``gc --all-workspaces``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures_lifecycle import make_snapshot, put_blob

from jupyter_gkeresume import __version__
from jupyter_gkeresume.advisor import Event, record_events
from jupyter_gkeresume.cli import main
from jupyter_gkeresume.paused_record import PausedKernel, PausedRecord, PausedRecords
from jupyter_gkeresume.snapshot import SnapshotStore, environment_fingerprint

JUPYTER = str(Path(sys.executable).with_name("jupyter"))


@pytest.fixture
def run(local_store, signing_key, monkeypatch, capsys):
    """``run(*args)`` -> (exit code, stdout, stderr) of the CLI on the test store."""
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", signing_key.secret.decode())

    def invoke(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--store", local_store.url, "--workspace", local_store.workspace, *args])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def run_json(run, *args):
    code, out, err = run("--json", *args)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def three(local_store, signing_key):
    here = environment_fingerprint()
    return [
        make_snapshot(local_store, signing_key, [b"A" * 1000, b"B" * 2000], fingerprint=here),
        make_snapshot(local_store, signing_key, [b"B" * 2000, b"C" * 3000], name="base",
                      fingerprint=here, modules={"x1": ["gkeresume_gone_module"]}),
        make_snapshot(local_store, None, [b"D" * 500], fingerprint=here),
    ]


def test_list_and_show(run, three):
    rows = run_json(run, "list")
    assert [r["id"] for r in rows] == [m.snapshot_id for m in reversed(three)]
    assert "is unsigned" in rows[0]["error"]
    assert rows[1]["name"] == "base" and rows[1]["verdict"]["level"] == "partial"
    assert rows[2]["verdict"]["level"] == "exact" and rows[2]["bytes"] == three[0].total_bytes
    shown = run_json(run, "show", "base")
    assert shown["manifest"]["id"] == three[1].snapshot_id
    assert shown["signature"] == "valid"
    assert list(shown["verdict"]["objects_at_risk"]) == ["x1"]
    code, out, _ = run("show", "base")
    assert code == 0 and "AT RISK: needs gkeresume_gone_module" in out
    code, out, _ = run("list")
    assert f"{three[2].snapshot_id}  REFUSED: snapshot {three[2].snapshot_id} is unsigned" in out


def test_verify_exit_codes(run, three, local_store):
    assert run("verify", three[0].snapshot_id)[0] == 0
    code, out, _ = run("verify", "--all")
    assert code == 1 and "FAILED" in out and "is unsigned: refused" in out
    assert run("verify", "--all", "--trust")[0] == 2  # nothing waives a signature
    blob = Path(local_store.blob_path(three[0].storages["s0"].blob))
    blob.write_bytes(blob.read_bytes()[:-1] + b"?")
    code, out, err = run("--json", "--progress", "verify", three[0].snapshot_id)
    assert code == 1
    report = json.loads(out)[0]
    assert not report["ok"] and "does not match its digest" in report["problems"][0]
    assert "100.0%" in err  # the progress bar went to stderr, stdout stayed JSON


def test_rm_then_gc_frees_exactly_the_unreferenced_bytes(run, three, local_store):
    only_first = {d: s for d, s in three[0].blobs.items() if d not in three[1].blobs}
    removed = run_json(run, "rm", three[0].snapshot_id)
    assert removed == {"removed": [three[0].snapshot_id]}
    dry = run_json(run, "gc", "--dry-run", "--grace-hours", "0")
    assert dry["swept"] == only_first and dry["bytes_freed"] == sum(only_first.values())
    assert all(local_store.has_blob(d) for d in only_first)
    done = run_json(run, "gc", "--grace-hours", "0")
    assert done["swept"] == only_first
    assert not any(local_store.has_blob(d) for d in only_first)
    assert run("verify", "base")[0] == 0


def test_gc_keeps_young_blobs_and_applies_retention(run, three, local_store):
    fresh, size = put_blob(local_store, b"a checkpoint is writing this")
    for digest in {d for m in three for d in m.blobs}:
        os.utime(local_store.blob_path(digest), (1, 1))
    report = run_json(run, "gc", "--keep-last", "1")
    # the newest stays (last 1), 'base' is named; the oldest goes, with its own blobs
    assert report["retention"]["delete"] == [three[0].snapshot_id]
    assert report["snapshots_deleted"] == [three[0].snapshot_id]
    assert report["young"] == {fresh: size}
    assert set(report["swept"]) == set(three[0].blobs) - set(three[1].blobs)
    assert local_store.list_snapshot_ids() == [three[1].snapshot_id, three[2].snapshot_id]


def test_rm_refuses_the_paused_snapshot_without_force(run, three, local_store, signing_key):
    record = PausedRecord.new(local_store.workspace, "user", "none", 0,
                              [PausedKernel(three[1].snapshot_id, "k")])
    local_store.write_record("paused", json.dumps(record.to_dict()).encode())  # planted
    assert run("rm", "--json", three[0].snapshot_id)[0] == 0  # an unsigned record protects nothing
    PausedRecords(local_store, lambda: signing_key).write(record)
    code, _, err = run("rm", "base")
    assert code == 2 and "the paused workspace resumes from it" in err
    assert three[1].snapshot_id in local_store.list_snapshot_ids()
    assert run("rm", "--force", "base")[0] == 0
    assert three[1].snapshot_id not in local_store.list_snapshot_ids()


def test_usage(run, three, local_store):
    usage = run_json(run, "usage", "--price-per-gib-month", "0.5")
    stored = sum(b.size for b in local_store.list_blobs())
    assert usage["snapshots"] == 3 and usage["stored_bytes"] == stored
    assert usage["unreferenced_bytes"] == 0
    assert usage["monthly_cost_usd"] == pytest.approx(stored / (1 << 30) * 0.5)
    first = next(r for r in usage["per_snapshot"] if r["id"] == three[0].snapshot_id)
    assert first["exclusive_bytes"] == sum(
        s for d, s in three[0].blobs.items() if d not in three[1].blobs
    )


def test_advise_with_plot(run, local_store, tmp_path):
    now = time.time()
    record_events(local_store, [Event(now - 7200, "activity"), Event(now - 3600, "pause", 20),
                                Event(now - 60, "resume", 40), Event(now, "activity")])
    plot = tmp_path / "advice.png"
    advice = run_json(run, "advise", "--thresholds", "15,30", "--plot", str(plot))
    assert [o["threshold_minutes"] for o in advice["outcomes"]] == [None, 15, 30]
    assert advice["outcomes"][1]["pauses"] == 1 and advice["measured"]
    assert plot.read_bytes()[:4] == b"\x89PNG"
    code, out, _ = run("advise")
    assert code == 0 and "GPU-h held" in out


def test_bad_input_is_a_clear_error(run, three, tmp_path):
    code, _, err = run("show", "no-such-name")
    assert code == 1 and "no snapshot 'no-such-name'" in err
    code, _, err = run("show", "../../etc")
    assert code == 2 and "not a usable snapshot name" in err
    assert main(["--workspace", "../up", "--store", str(tmp_path), "list"]) == 2
    code, _, err = run("advise")
    assert code == 2 and "no events recorded" in err
    code, _, err = run("--key-file", str(tmp_path / "nope.key"), "list")
    assert code == 2 and "does not exist" in err and not (tmp_path / "nope.key").exists()
    assert main(["frobnicate"]) == 2


def test_global_options_after_the_command(local_store, signing_key, monkeypatch, capsys, three):
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", signing_key.secret.decode())
    assert main(["list", "--store", local_store.url, "--workspace", local_store.workspace,
                 "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3


def test_gc_all_workspaces_sweeps_every_workspace(tmp_path, signing_key, capsys):
    root = str(tmp_path / "store")
    stores = {ws: SnapshotStore(root, ws) for ws in ("ws-a", "ws-b")}
    orphans = {}
    for ws, store in stores.items():
        kept = make_snapshot(store, signing_key, [f"kept {ws}".encode()])
        gone = make_snapshot(store, signing_key, [f"gone {ws}".encode()])
        store.delete_manifest(gone.snapshot_id)
        orphans[ws] = (set(gone.blobs), set(kept.blobs))
    (tmp_path / "store" / "not a workspace").mkdir()  # never taken for one
    capsys.readouterr()
    assert main(["--store", root, "--json", "gc", "--all-workspaces", "--grace-hours", "0"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert sorted(reports) == ["ws-a", "ws-b"]
    for ws, (gone, kept) in orphans.items():
        assert set(reports[ws]["swept"]) == gone
        assert not any(stores[ws].has_blob(d) for d in gone)
        assert all(stores[ws].has_blob(d) for d in kept)
    assert main(["gc", "--all-workspaces", "--store", root]) == 0
    assert "workspace ws-a:" in capsys.readouterr().out
    assert main(["gc", "--all-workspaces", "--store", root, "--workspace", "ws-a"]) == 2
    assert "exclude each other" in capsys.readouterr().err


def test_gc_all_workspaces_reports_an_unreadable_manifest_and_goes_on(tmp_path, signing_key, capsys):
    """A manifest that cannot be parsed is skipped and reported (issue 30.7): every workspace
    is swept, and the exit code says something needs looking at."""
    root = str(tmp_path / "store")
    broken, later = SnapshotStore(root, "ws-a"), SnapshotStore(root, "ws-b")
    make_snapshot(broken, signing_key, [b"kept a"])
    Path(broken.manifest_path("20261101T120000Z-000bad")).write_bytes(b"{not json")
    gone = make_snapshot(later, signing_key, [b"gone b"])
    later.delete_manifest(gone.snapshot_id)
    capsys.readouterr()
    assert main(["--store", root, "--json", "gc", "--all-workspaces", "--grace-hours", "0"]) == 1
    reports = json.loads(capsys.readouterr().out)
    assert "not valid JSON" in reports["ws-a"]["unreadable"]["20261101T120000Z-000bad"]
    assert set(reports["ws-b"]["swept"]) == set(gone.blobs)
    assert not any(later.has_blob(d) for d in gone.blobs)
    make_snapshot(later, signing_key, [b"gone again"])
    assert main(["gc", "--all-workspaces", "--store", root]) == 1
    out, err = capsys.readouterr()
    assert "workspace ws-b:" in out and "snapshot 20261101T120000Z-000bad cannot be read" in err


def test_bad_options_are_usage_errors(run, three):
    code, _, err = run("show")
    assert code == 2 and "show needs one reference" in err
    code, _, err = run("rm")
    assert code == 2 and "rm needs one or more references" in err
    code, _, err = run("list", "extra")
    assert code == 2 and "list takes no arguments" in err
    code, _, err = run("advise", "--thresholds", "5,soon")
    assert code == 2 and "not a list of minutes" in err
    assert run("gc", "--keep-last", "many")[0] == 2
    assert run("list", "--no-such-option")[0] == 2


def jupyter_cli(*args: str, config_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``jupyter gkeresume ARGS`` as a user runs it, with its own Jupyter config directory."""
    return subprocess.run(
        [JUPYTER, "gkeresume", *args], capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, **env, "JUPYTER_CONFIG_DIR": str(config_dir)},
    )


@pytest.mark.parametrize("kind", ["py", "json"])
def test_the_servers_config_file_is_honoured(kind, tmp_path, local_store, signing_key, three):
    """``c.GkeResume.store_url``/``workspace_id`` in jupyter_server_config: what the server
    reads is what the CLI reads; the command line still wins."""
    config = tmp_path / "config"
    config.mkdir()
    if kind == "py":
        (config / "jupyter_server_config.py").write_text(
            f"c.GkeResume.store_url = {local_store.url!r}\n"
            f"c.GkeResume.workspace_id = {local_store.workspace!r}\n")
    else:
        (config / "jupyter_server_config.json").write_text(json.dumps(
            {"GkeResume": {"store_url": local_store.url, "workspace_id": local_store.workspace}}))
    env = {"GKERESUME_SIGNING_KEY": signing_key.secret.decode(), "GKERESUME_STORE": "",
           "GKERESUME_WORKSPACE": ""}
    done = jupyter_cli("list", "--json", config_dir=config, env=env)
    assert done.returncode == 0, done.stderr
    assert [r["id"] for r in json.loads(done.stdout)] == [m.snapshot_id for m in reversed(three)]
    elsewhere = str(tmp_path / "other")
    done = jupyter_cli("--store", elsewhere, "list", config_dir=config, env=env)
    assert done.returncode == 0 and done.stdout.startswith("no snapshots in"), done.stderr


def test_version_and_help(tmp_path):
    done = jupyter_cli("--version", config_dir=tmp_path, env={})
    assert done.returncode == 0 and done.stdout.strip() == __version__
    done = jupyter_cli("--help", config_dir=tmp_path, env={})
    assert done.returncode == 0
    assert all(name in done.stdout for name in ("list", "show", "verify", "gc", "rm", "usage"))
    done = jupyter_cli("gc", "--help", config_dir=tmp_path, env={})
    assert "--all-workspaces" in done.stdout and "--log-level" in done.stdout


def test_the_cli_looks_for_the_files_the_server_reads():
    from jupyter_server.serverapp import ServerApp

    from jupyter_gkeresume.cli import ListApp

    server, cli = ServerApp(), ListApp()
    assert cli.config_file_name == server.config_file_name == "jupyter_server_config"
    assert cli.config_file_paths == server.config_file_paths


def test_show_imports_nothing_from_an_unsigned_manifest(run, local_store):
    """13.3: a planted manifest naming ``this`` (prints the Zen when imported) and
    ``venv.__main__`` is shown as refused; nothing it names is looked up."""
    planted = make_snapshot(local_store, None, [b"P" * 10],
                            modules={"x0": ["this.x", "venv.__main__.x"]})
    code, out, err = run("show", planted.snapshot_id)
    assert "Beautiful is better than ugly" not in out + err
    assert "this" not in sys.modules and "venv.__main__" not in sys.modules
    signature = next(line for line in out.splitlines() if line.startswith("signature"))
    assert code == 1 and "REFUSED" in signature and "unsigned" in signature
    assert "contents   not shown: the signature did not verify" in out
    assert "x0" not in out and "this.x" not in out  # 22.7: only its id and the reason


def test_stored_text_reaches_the_terminal_escaped(run, local_store, signing_key):
    """22.7: a planted manifest with escape sequences in its workspace, key id and notebook
    cleared the screen, set the window title and printed a fake OK line in list/show/verify;
    a signed one's notebook is shown escaped too."""
    evil = "\x1b]0;pwned\x07\x1b[2J\r\nOK fine\u202e"
    planted = make_snapshot(local_store, None, [b"P" * 10], notebook=evil)
    data = json.loads(local_store.read_manifest_bytes(planted.snapshot_id))
    data["workspace"] = evil
    data["signature"] = {"alg": "HMAC-SHA256", "key_id": evil, "value": "0"}
    local_store.fs.pipe_file(local_store.manifest_path(planted.snapshot_id),
                             json.dumps(data).encode())
    signed = make_snapshot(local_store, signing_key, [b"S" * 10], notebook=evil)
    for args in (("list",), ("show", planted.snapshot_id), ("show", signed.snapshot_id),
                 ("verify", "--all")):
        _, out, err = run(*args)
        assert not any(c in out + err for c in "\x1b\x07\r\u202e"), (args, out, err)
    assert "\\x1b]0;pwned\\x07" in run("list")[1]  # shown, as escapes

