"""The manifest parser and the compatibility check on hostile input: a clear error, never a crash.

Anything ``Manifest.from_json`` accepts must round-trip unchanged; anything else must raise
``ManifestError``. ``check_compatible`` must give a verdict for any fingerprint a parsed manifest
can carry (the fingerprint is free-form JSON).
"""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_gkeresume.errors import ManifestError
from jupyter_gkeresume.snapshot import Manifest, check_compatible, environment_fingerprint
from jupyter_gkeresume.snapshot.compat import LEVELS

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
