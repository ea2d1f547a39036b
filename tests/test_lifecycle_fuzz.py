"""The manifest parser, the compatibility check and the workspace records on hostile input: a
clear error, never a crash.

Anything ``Manifest.from_json`` accepts must round-trip unchanged; anything else must raise
``ManifestError``. ``check_compatible`` must give a verdict for any fingerprint a parsed manifest
can carry (the fingerprint is free-form JSON). The paused record and the runtime settings, even
signed with the workspace key, are read or refused with ``StoredRecordError`` (and an invalid
paused record protects nothing); a lease record with any contents reads as a lease whose epoch is
its name's and whose expiry is bounded, and the lease and gc still work on it (issue 22).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_gkeresume.errors import LeaseHeldError, ManifestError, StoredRecordError
from jupyter_gkeresume.paused_record import PausedRecords
from jupyter_gkeresume.server_settings import ServerSettings, SettingsRecords
from jupyter_gkeresume.snapshot import (
    Manifest,
    SigningKey,
    SnapshotStore,
    check_compatible,
    environment_fingerprint,
)
from jupyter_gkeresume.snapshot.compat import LEVELS
from jupyter_gkeresume.snapshot.lease import RestoreLease, finished_chains, read_link
from jupyter_gkeresume.snapshot.records import sequences_path, sign_record

DIGEST = "ab" * 32
VALID = {
    "format": "gkeresume.snapshot", "format_version": 1, "id": "20261130T101500Z-a1b2c3",
    "workspace": "ws", "name": None, "created": "2026-11-30T10:15:00+00:00", "notebook": None,
    "execution_count": 3, "graph_blob": DIGEST, "records": ["x"], "graph_ends": [10],
    "objects": [{"name": "x", "type": "int", "status": "saved", "reason": None, "bytes": 8,
                 "dtype": None, "shape": [2, 2], "device": "cpu", "modules": ["numpy"]}],
    "storages": {"s0": {"blob": DIGEST, "entry": 0, "nbytes": 8, "dtype": "uint8",
                        "device": "cpu", "kind": "numpy", "owner": "x"}},
    "blobs": {DIGEST: 100}, "totals": {"objects": 1}, "timings": {"total": 1.5},
    "fingerprint": {"python": "3.11.9"}, "history": ["", "x = 1"],
    "signature": {"alg": "HMAC-SHA256", "key_id": "k", "value": "v"},
}
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=4),
    max_leaves=20,
)


def parse_or_refuse(raw):
    try:
        manifest = Manifest.from_json(raw)
    except ManifestError as exc:
        assert str(exc)
        return None
    assert Manifest.from_json(manifest.to_json()).to_dict() == manifest.to_dict()
    return manifest


def paths(data, prefix=()):
    yield prefix
    if isinstance(data, dict):
        for k, v in data.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from paths(v, (*prefix, i))


ALL_PATHS = [p for p in paths(VALID) if p]


def test_the_valid_example_parses():
    assert parse_or_refuse(json.dumps(VALID)).snapshot_id == VALID["id"]


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(raw):
    parse_or_refuse(raw)


@FUZZ
@given(json_values)
def test_random_json(value):
    parse_or_refuse(json.dumps(value))


def replaced(document: dict, path: tuple, value: object) -> dict:
    """A deep copy of ``document`` with the field at ``path`` set to ``value`` (or removed,
    for ``"<delete>"``)."""
    data = copy.deepcopy(document)
    target = data
    for step in path[:-1]:
        target = target[step]
    if value == "<delete>":
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


@FUZZ
@given(st.sampled_from(ALL_PATHS), json_values | st.just("<delete>"))
def test_one_field_replaced_or_removed(path, value):
    data = replaced(VALID, path, value)
    manifest = parse_or_refuse(json.dumps(data))
    if manifest is not None:
        verdict = check_compatible(manifest, environment_fingerprint())
        assert verdict.level in LEVELS


@FUZZ
@given(st.binary(min_size=1, max_size=8), st.integers(0, 2000))
def test_corrupted_bytes_of_a_valid_manifest(patch, at):
    raw = bytearray(json.dumps(VALID).encode())
    at %= len(raw)
    raw[at : at + len(patch)] = patch
    parse_or_refuse(bytes(raw))


@FUZZ
@given(st.dictionaries(st.sampled_from(["python", "implementation", "cuda", "packages",
                                        "platform", "image", "format_version"]), json_values))
def test_any_fingerprint_gets_a_verdict(fingerprint):
    manifest = Manifest.from_dict({**VALID, "fingerprint": fingerprint})
    for here in (environment_fingerprint(), fingerprint):
        assert check_compatible(manifest, here).level in LEVELS


def test_pathological_documents():
    for raw in ("[" * 100_000, '{"a":' * 50_000, "9" * 10_000, '{"format_version": 1e999}',
                "\ud800", b"\xff\xfe"):
        parse_or_refuse(raw)


FULL_FINGERPRINT = {
    "format_version": 1, "python": "3.11.9", "implementation": "cpython", "platform": "linux",
    "machine": "x86_64", "machine_type": "g2-standard-8", "image": "jupyter/gpu:1",
    "packages": {"numpy": "2.1.0", "torch": "2.13.0"},
    "cuda": {"driver_version": "12.4", "gpus": [
        {"index": 0, "name": "NVIDIA L4", "memory": 24 << 30, "compute_capability": "8.9"}]},
}
FINGERPRINT_PATHS = [p for p in paths(FULL_FINGERPRINT) if p]
big_values = (json_values | st.integers(min_value=-(10**4000), max_value=10**4000)
              | st.text(alphabet="0123456789.+", min_size=4000, max_size=6000))


@FUZZ
@given(st.sampled_from(FINGERPRINT_PATHS), big_values | st.just("<delete>"), st.booleans(),
       st.lists(st.text(max_size=30), max_size=4), st.sampled_from(["cpu", "cuda:0", "cuda:x", ""]))
def test_every_compat_field_with_any_json_gets_a_verdict(path, value, on_this_side, modules, device):
    """Any one fingerprint field (on either side) replaced by any JSON, any module names, any
    device: a verdict, with one-line reasons, never an exception."""
    fingerprint = replaced(FULL_FINGERPRINT, path, value)
    obj = {**VALID["objects"][0], "modules": modules, "device": device}
    storage = {**VALID["storages"]["s0"], "device": device}
    manifest = Manifest.from_dict({**VALID, "objects": [obj], "storages": {"s0": storage},
                                   "fingerprint": FULL_FINGERPRINT})
    here = copy.deepcopy(FULL_FINGERPRINT)
    if on_this_side:
        manifest.fingerprint, here = here, fingerprint
    else:
        manifest.fingerprint = fingerprint
    verdict = check_compatible(manifest, here)
    assert verdict.level in LEVELS
    assert all(isinstance(r, str) and "\n" not in r for r in verdict.reasons)


# -- the workspace records (issue 22) ---------------------------------------------------------
KEY = SigningKey(b"fuzz-workspace-key-" + b"f" * 32)
STORE = SnapshotStore("memory://gkeresume-fuzz-records", "ws")
PAUSED = {"version": 1, "workspace": "ws", "paused_at": "2026-11-30T10:15:00Z", "reason": "user",
          "release_backend": "none", "gpus": 1, "not_saved": [{"kernel_id": "k0"}],
          "kernels": [{"snapshot_id": VALID["id"], "kernel_id": "k1", "kernel_name": "python3",
                       "notebook": "a.ipynb", "bytes_total": 8, "bytes_new": 8, "saved": ["x"],
                       "skipped": [{"name": "g", "reason": "r"}]}]}
SETTINGS = {"workspace": "ws", "checkpoint_on_shutdown": False}
LEASE = {"epoch": 0, "state": "held", "holder": "pod-a", "token": "t", "expires_at": 2e9}


def fresh_volume() -> None:
    """Forget the records seen (each example is read as on a new volume: this is about
    parsing; the order has its own tests, test_security_records)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(sequences_path())


def read_paused(raw: bytes):
    """Read back ``raw`` as the paused record: a record that round-trips, or the one error."""
    fresh_volume()
    STORE.write_record("paused", raw)
    records = PausedRecords(STORE, lambda: KEY)
    try:
        record = records.read()
    except StoredRecordError as exc:
        assert str(exc)
        assert records.protected_ids() == frozenset()  # an invalid record protects nothing
        return None
    records.write(record)
    assert records.read() == record
    assert records.protected_ids() == record.snapshot_ids()
    return record


def read_settings(raw: bytes):
    fresh_volume()
    STORE.write_record("settings", raw)
    try:
        settings = SettingsRecords(STORE, lambda: KEY).read(ServerSettings())
    except StoredRecordError as exc:
        assert str(exc)
        return None
    assert isinstance(settings.checkpoint_on_shutdown, bool)
    return settings


def test_the_valid_records_read_back():
    paused = read_paused(sign_record("paused", PAUSED, KEY, sequence=1))
    assert paused.kernels[0].notebook == "a.ipynb"
    assert read_settings(sign_record("settings", SETTINGS, KEY, sequence=1)) == ServerSettings(False)
    assert read_paused(json.dumps(PAUSED).encode()) is None  # unsigned
    assert read_settings(json.dumps(SETTINGS).encode()) is None


PAUSED_PATHS = [p for p in paths(PAUSED) if p]
SETTINGS_PATHS = [p for p in paths(SETTINGS) if p]


@FUZZ
@given(st.sampled_from(PAUSED_PATHS), json_values | st.just("<delete>"))
def test_a_signed_paused_record_with_one_field_replaced_or_removed(path, value):
    """Signed by the workspace key (the worst case: the signature passes), any one field."""
    read_paused(sign_record("paused", replaced(PAUSED, path, value), KEY, sequence=1))


@FUZZ
@given(st.sampled_from(SETTINGS_PATHS), json_values | st.just("<delete>"))
def test_signed_settings_with_one_field_replaced_or_removed(path, value):
    read_settings(sign_record("settings", replaced(SETTINGS, path, value), KEY, sequence=1))


@FUZZ
@given(st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()))
def test_random_records(raw):
    assert read_paused(raw) is None and read_settings(raw) is None


@FUZZ
@given(st.binary(min_size=1, max_size=8), st.integers(0, 2000), st.booleans())
def test_corrupted_bytes_of_a_valid_record(patch, at, paused):
    valid = {True: sign_record("paused", PAUSED, KEY, sequence=1),
             False: sign_record("settings", SETTINGS, KEY, sequence=1)}
    raw = bytearray(valid[paused])
    at %= len(raw)
    raw[at : at + len(patch)] = patch
    if bytes(raw) not in valid.values():
        (read_paused if paused else read_settings)(bytes(raw))


LEASE_PATHS = [p for p in paths(LEASE) if p]
lease_values = json_values | st.sampled_from([1e300, -1e300, float("inf"), float("nan"), 2**70])


class Clock:
    now = 1.9e9

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def lease_store(tmp_path_factory):
    """A local store: gc needs the records' modification times (memory:// has none)."""
    return SnapshotStore(str(tmp_path_factory.mktemp("leases")), "ws")


@FUZZ
@given(raw=st.one_of(st.binary(max_size=200),
                     st.tuples(st.sampled_from(LEASE_PATHS), lease_values | st.just("<delete>"))
                     .map(lambda pv: json.dumps(replaced(LEASE, *pv)).encode())),
       epoch=st.integers(0, 5))
def test_any_lease_record(lease_store, raw, epoch):
    """Any contents under ``lease-k.EPOCH``: the epoch is the name's, the expiry finite, a
    restore gets the lease within one ttl, gc collects the chain once it is old."""
    store = lease_store
    for name in store.list_records("lease-"):
        store.delete_record(name)
    store.write_record(f"lease-k.{epoch}", raw)
    for e in range(epoch):
        store.write_record(f"lease-k.{e}", json.dumps({**LEASE, "state": "free"}).encode())
    link = read_link(store, f"lease-k.{epoch}", epoch)
    assert link.epoch == epoch and link.state in ("held", "free")
    assert link.expires_at == link.expires_at and abs(link.expires_at) < float("inf")
    clock = Clock()
    lease = RestoreLease(store, "k", "fuzz", ttl=30, clock=clock)
    try:
        lease.acquire()
    except LeaseHeldError as exc:
        assert "\n" not in str(exc) and "\x1b" not in str(exc)
        clock.now += 31
        lease.acquire()
    assert lease.current().epoch == epoch + 1 and lease.release()
    assert "k" in finished_chains(store, now=clock.now + 2 * 86400, grace_seconds=3600)
