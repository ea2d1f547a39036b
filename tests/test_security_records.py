"""No record can be replayed or moved to steer a restore, and what a resume writes stays where it
belongs (issue 30). Each finding on a real server (in-process jupyter_server with real kernels,
or a ``jupyter server`` process restarted on the same volume), on a local store and on
fake-gcs-server:

1. a signed record copied under another name (the settings over the paused record) or into
   another workspace is refused (the environment baseline of the finding is no record since
   issue 31: nothing is stored);
2. an older, validly signed ``settings.json`` put back is refused and logged;
3. a paused record a resume consumed (or a user discarded), put back, is refused;
4. ``DELETE paused`` needs what a pause needs;
5. a resume follows no link below an extra path, keeps no setuid/setgid bit, renames each file
   into place; a failed package install keeps the old version; blobs are streamed;
6. ``accountkey=`` in lower case is a credential;
7. an unparsable manifest is skipped by gc, which collects the rest and keeps what it may name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
import tracemalloc
from dataclasses import dataclass, field

import pytest
from fixtures_lifecycle import put_blob, tiny_site
from fixtures_server import SETTLE_TIMEOUT, SIGNING_KEY, server_config
from test_server_handlers import DenyingAuthorizer, _allow_all  # noqa: F401 (autouse fixture)

from jupyter_gkeresume.credentials import env_looks_secret
from jupyter_gkeresume.errors import StoredRecordError
from jupyter_gkeresume.paused_record import PausedRecords
from jupyter_gkeresume.server_settings import ServerSettings, SettingsRecords
from jupyter_gkeresume.snapshot import SigningKey, SnapshotStore
from jupyter_gkeresume.snapshot.format import PackageRecord, canonical_json
from jupyter_gkeresume.snapshot.records import RecordOrder, SignedRecords
from jupyter_gkeresume.snapshot.signing import signature_of
from kernel_hooks import packages

KEY = SigningKey(SIGNING_KEY.encode())
WORKSPACE = "server-ws"
# Lower case, as the Azure SDK accepts it: azure-sdk-for-python
# sdk/storage/azure-storage-blob/azure/storage/blob/_shared/base_client.py, parse_connection_str:
# ``conn_settings = dict((key.upper(), val) for key, val in conn_settings)``, then
# ``conn_settings["ACCOUNTKEY"]`` (commit ccfdc2ca174cfa5efb2cbe262041e5f1e6c0c995).
ACCOUNT_KEY = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"
AZURE_LOWER = (f"defaultendpointsprotocol=https;accountname=acct;accountkey={ACCOUNT_KEY};"
               "endpointsuffix=core.windows.net")


@dataclass
class Where:
    """One store for the server, its kernels and the test: ``url``, gcsfs ``options``, the
    ``env`` a subprocess needs to reach it."""

    url: str
    options: dict = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def store(self, workspace: str = WORKSPACE) -> SnapshotStore:
        return SnapshotStore(self.url, workspace, self.options or None)

    def every_byte(self, workspace: str = WORKSPACE) -> bytes:
        store = self.store(workspace)
        store.fs.invalidate_cache()
        return b"".join(store.fs.cat_file(p) for p in sorted(store.fs.find(store.root)))


@pytest.fixture(params=["local", "gs"])
def where(request, tmp_path, monkeypatch) -> Where:
    if request.param == "local":
        return Where(str(tmp_path / "store"))
    bucket = request.getfixturevalue("gcs_bucket")
    for name, value in bucket.env.items():
        monkeypatch.setenv(name, value)  # the in-process server and the kernels it starts
    return Where(bucket.url, bucket.storage_options, bucket.env)


@pytest.fixture
def extra_config() -> dict:
    """More ``c.GkeResume`` settings (a test parametrizes it)."""
    return {}


@pytest.fixture
def jp_server_config(where, extra_config, tmp_path):
    # No checkpoint when the server stops: pytest_jupyter's autouse ``jp_server_cleanup`` stops
    # it after ``monkeypatch`` took the emulator's environment away, so on gs:// that checkpoint
    # went to storage.googleapis.com and retried for 30 s per test. These tests are about the
    # records; the shutdown checkpoint has its own (test_server_shutdown).
    config = server_config(where.url, extra_paths=[str(tmp_path / "extra-links"),
                                                   str(tmp_path / "extra-modes")],
                           checkpoint_on_shutdown=False, **extra_config)
    config["ServerApp"]["authorizer_class"] = "test_server_handlers.DenyingAuthorizer"
    return config


# -- 1: a record is bound to its kind, name and workspace -------------------------------------

def test_a_signed_record_moved_or_copied_under_another_name_is_refused(where, gk_env):
    store = where.store()
    records = SignedRecords(store, lambda: KEY)
    settings = {"workspace": WORKSPACE, "checkpoint_on_shutdown": False}
    records.write("settings", settings)
    assert records.read("settings", "settings") == settings
    store.write_record("paused", store.read_record("settings"))  # settings copied over the pause
    with pytest.raises(StoredRecordError, match="moved or copied here, refused"):
        records.read("paused", "the record")
    other = where.store("other")
    other.write_record("settings", store.read_record("settings"))
    with pytest.raises(StoredRecordError, match="belongs to workspace 'server-ws', not 'other'"):
        SignedRecords(other, lambda: KEY).read("settings", "settings")


def signed_the_old_way(data: dict) -> bytes:
    """A record as the version before issue 30 signed it: its fields, no kind, name or sequence."""
    return json.dumps({**data, "signature": signature_of(canonical_json(data), KEY)}).encode()


def test_a_paused_record_signed_the_old_way_resumes_once(tmp_path, gk_env):
    """Records signed before the kind, name and sequence were bound: a paused record is read
    (a workspace paused by the earlier version resumes), once: spent, it is refused like any;
    settings signed the old way are refused (the defaults apply until the next PUT)."""
    store = SnapshotStore(str(tmp_path / "store"), WORKSPACE)
    paused = {"version": 1, "workspace": WORKSPACE, "paused_at": "2026-11-30T10:15:00Z",
              "reason": "user", "release_backend": "none", "gpus": 0,
              "kernels": [{"snapshot_id": "20261130T101500Z-a1b2c3", "notebook": "nb.ipynb"}]}
    store.write_record("paused", signed_the_old_way(paused))
    records = PausedRecords(store, lambda: KEY)
    assert records.read().kernels[0].notebook == "nb.ipynb"
    records.delete()  # the resume consumed it
    store.write_record("paused", signed_the_old_way(paused))
    with pytest.raises(StoredRecordError, match="older than one this workspace already saw"):
        records.read()

    store.write_record("settings", signed_the_old_way(
        {"workspace": WORKSPACE, "checkpoint_on_shutdown": False}))
    with pytest.raises(StoredRecordError, match="signed by an earlier version"):
        SettingsRecords(store, lambda: KEY).read(ServerSettings())
    (tmp_path / "jupyter-data" / "gkeresume" / "record-sequences.json").write_text("[1, 2")
    assert RecordOrder(WORKSPACE).highest("paused") == 0  # a corrupt file: nothing seen


# -- 2, 3: an older or spent record put back is refused ---------------------------------------

def test_an_older_settings_record_put_back_is_refused_and_logged(server_process, where):
    """The finding: a validly signed older settings.json (checkpoint_on_shutdown: false) put
    back was honoured after a restart, and SIGTERM then saved nothing. A ``jupyter server``
    process, restarted on the same volume (its data dir keeps the highest sequence seen)."""
    server = server_process("srv", {"GkeResume": {
        "store_url": where.url, "workspace_id": "roll-ws", "release_backend": "none"}}, where.env)
    assert server.call("PUT", "gkeresume/api/settings", {"checkpoint_on_shutdown": False})[0] == 200
    store = where.store("roll-ws")
    older = store.read_record("settings")
    assert server.call("PUT", "gkeresume/api/settings", {"checkpoint_on_shutdown": True})[0] == 200
    assert server.stop() == 0
    store.write_record("settings", older)

    server.start()
    code, settings = server.call("GET", "gkeresume/api/settings")
    assert code == 200 and settings == {"checkpoint_on_shutdown": True}
    assert "the settings record is ignored" in server.log()
    assert "older than one this workspace already saw or acted on" in server.log()


async def test_a_consumed_paused_record_put_back_is_refused(api, where):
    """The finding: the older paused.json put back after a resume deleted it made the workspace
    paused in the older snapshot again, and protected its snapshots from retention."""
    kid = await api.new_session("nb.ipynb")
    await api.run_cell(kid, "x = 41")
    assert (await api.pause())["state"] == "paused"
    store = where.store()
    consumed = store.read_record("paused")
    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    assert (await api.settle())["state"] == "ready"
    assert store.read_record("paused") is None

    store.write_record("paused", consumed)
    records = PausedRecords(store, lambda: KEY)
    with pytest.raises(StoredRecordError, match="older than one this workspace already saw"):
        records.read()
    assert records.protected_ids() == frozenset()


# -- 4: discarding a pause needs the pause permissions ----------------------------------------

@pytest.mark.parametrize("denied", [("execute", "kernels"), ("write", "sessions")])
async def test_discarding_a_pause_needs_what_a_pause_needs_and_spends_it(api, where, denied):
    kid = await api.new_session("nb.ipynb")
    await api.run_cell(kid, "x = 1")
    assert (await api.pause())["state"] == "paused"
    store = where.store()
    record = store.read_record("paused")

    DenyingAuthorizer.denied = {denied}  # read-only on kernels or sessions
    code, body = await api.call("DELETE", "gkeresume/api/paused")
    assert code == 403 and denied[1] in body["message"], (code, body)
    status = await api.status()
    assert status["state"] == "paused" and store.read_record("paused") == record

    DenyingAuthorizer.denied = set()
    code, _ = await api.call("DELETE", "gkeresume/api/paused")
    assert code == 204
    store.write_record("paused", record)  # a discarded pause put back is spent too
    with pytest.raises(StoredRecordError, match="older than one"):
        PausedRecords(store, lambda: KEY).read()


# -- 5: what a resume writes to disk ----------------------------------------------------------

async def test_a_resume_follows_no_link_keeps_no_setuid_bit_and_renames_each_file(
        api, tmp_path):
    links, modes, outside = tmp_path / "extra-links", tmp_path / "extra-modes", tmp_path / "out"
    (links / "sub").mkdir(parents=True)
    (links / "sub" / "data.txt").write_text("from the snapshot")
    modes.mkdir()
    outside.mkdir()
    tool, kept = modes / "tool.sh", modes / "kept.txt"
    tool.write_text("#!/bin/sh\n")
    os.chmod(tool, 0o6755)
    kept.write_text("v1")
    assert stat.S_IMODE(tool.stat().st_mode) == 0o6755
    kid = await api.new_session("nb.ipynb")
    status = await api.pause({"release": False})
    snapshot = status["last_snapshot"]["id"]

    # after the checkpoint: a link where the directory was, a second name for a file
    shutil.rmtree(links / "sub")
    (links / "sub").symlink_to(outside)
    kept.unlink()
    (outside / "alias.txt").write_text("v2, outside")
    os.link(outside / "alias.txt", kept)
    code, body = await api.call("POST", "gkeresume/api/resume",
                                {"snapshot": snapshot, "kernel": kid})
    assert code == 202, body
    status = await api.settle()
    assert status["kernels"][0]["state"] == "ready", status

    assert not (outside / "data.txt").exists()  # the link was not followed
    assert (links / "sub").is_symlink()
    assert stat.S_IMODE(tool.stat().st_mode) == 0o755  # no setuid/setgid bit came back
    assert kept.read_text() == "v1"  # renamed into place: the other name keeps its own bytes
    assert (outside / "alias.txt").read_text() == "v2, outside"
    assert not [p for p in (*links.rglob("*"), *modes.rglob("*")) if "gkeresume-" in p.name]


def tiny_10(store: SnapshotStore, site, weights: int) -> tuple[PackageRecord, dict[str, int]]:
    """``tiny`` 1.0 stored as a package blob, with ``weights`` bytes of data."""
    files = {"tiny/__init__.py": b"VERSION = '1.0'\n", "tiny/weights.bin": b"w" * weights,
             "tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n"}
    blob, size = put_blob(store, *files.values())
    record = PackageRecord("tiny", "1.0", blob, list(files), str(site),
                           f"{sys.version_info.major}.{sys.version_info.minor}", ["py3-none-any"])
    return record, {blob: size}


def test_a_failed_install_leaves_the_old_version_in_place(tmp_path, where, gk_env):
    """A write that fails midway (here the file size limit, as a full disk: EFBIG like ENOSPC)
    used to find the old version already removed; now nothing is replaced before every file is
    written. In a subprocess, the limit its own."""
    site = tmp_path / "site"
    tiny_site(site)
    store = where.store("ws")
    record, sizes = tiny_10(store, site, 2 << 20)
    script = textwrap.dedent(f"""
        import resource, sys
        sys.path.insert(0, {str(site)!r})
        from jupyter_gkeresume.snapshot import SnapshotStore
        from jupyter_gkeresume.snapshot.format import PackageRecord
        from kernel_hooks import packages
        store = SnapshotStore({where.url!r}, "ws", {where.options or None!r})
        record = PackageRecord(**{dataclasses.asdict(record)!r})
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
        print(packages.install_packages(store, [record], {sizes!r})[0])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **where.env})
    assert done.returncode == 0, done.stderr
    assert "tiny 1.0: not installed" in done.stdout and "File too large" in done.stdout
    assert (site / "tiny" / "__init__.py").read_text() == "VERSION = '0.9'\n"
    assert sorted(p.name for p in site.iterdir()) == ["tiny", "tiny-0.9.dist-info"]
    assert sorted(p.name for p in (site / "tiny").iterdir()) == ["__init__.py"]


def test_a_package_blob_is_streamed_not_read_whole(tmp_path, where, monkeypatch):
    site = tmp_path / "site"
    tiny_site(site)
    monkeypatch.setattr(sys, "path", [str(site)])
    store = where.store("ws")
    record, sizes = tiny_10(store, site, 64 << 20)
    tracemalloc.start()
    try:
        [line] = packages.install_packages(store, [record], sizes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert line.startswith(f"tiny 1.0: installed into {site}") and "replacing 0.9" in line
    assert (site / "tiny" / "weights.bin").stat().st_size == 64 << 20
    assert not (site / "tiny-0.9.dist-info").exists()
    assert peak < 32 << 20, peak  # a few read chunks, not the 64 MiB file


# -- 6: the credential filter ignores case where Azure does -----------------------------------

@pytest.mark.parametrize("value", [AZURE_LOWER, AZURE_LOWER.upper(),
                                   "endpoint=sb://x/;sharedaccesskeyname=k;"
                                   "sharedaccesskey=" + ACCOUNT_KEY])
def test_azure_connection_strings_are_credentials_in_any_case(value):
    assert env_looks_secret("STORAGE", value)


async def test_a_lower_case_connection_string_never_reaches_the_store(api, where):
    kid = await api.new_session("nb.ipynb")
    await api.run_cell(kid, f"import os\nos.environ['STORAGE'] = {AZURE_LOWER!r}\nx = 1")
    status = await api.pause({"release": False})
    assert "STORAGE" in str(status["kernels"][0]["result"]), status["kernels"][0]["result"]
    assert ACCOUNT_KEY.encode() not in where.every_byte()


# -- 7: gc goes on past a manifest it cannot parse --------------------------------------------

BAD_ID = "20261101T120000Z-000bad"


@pytest.mark.parametrize("extra_config", [{"keep_last": 1, "gc_grace_hours": 0.0}])
async def test_an_unparsable_manifest_is_skipped_and_the_rest_collected(api, where):
    store = where.store()
    kid = await api.new_session("nb.ipynb")
    await api.run_cell(kid, "import numpy as np\na = np.arange(50_000.0)")
    first = (await api.pause({"release": False}))["last_snapshot"]["id"]
    named, _ = put_blob(store, b"named only by the manifest that cannot be parsed")
    store.fs.pipe_file(store.manifest_path(BAD_ID),
                       f'{{"blobs": {{"{named}": 60}}, "cut short'.encode())
    await api.run_cell(kid, "a = a + 1")
    started = time.time()
    await api.pause({"release": False})  # retention drops the first snapshot, gc runs after

    deadline = time.monotonic() + SETTLE_TIMEOUT
    while time.monotonic() < deadline:
        retention = (await api.status())["retention"]
        if retention and retention["at"] >= started:
            break
        await asyncio.sleep(0.2)
    assert retention["error"] is None, retention
    assert first in retention["deleted"] and retention["bytes_freed"] > 0, retention
    assert list(retention["unreadable"]) == [BAD_ID]
    assert "skipped, the blobs it may name are kept" in retention["unreadable"][BAD_ID]
    store.fs.invalidate_cache()
    assert store.has_blob(named)
