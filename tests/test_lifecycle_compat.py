"""check_compatible: one verdict per fingerprint field that can differ, with readable reasons."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from jupyter_gkeresume.snapshot import FORMAT_VERSION, check_compatible, environment_fingerprint
from jupyter_gkeresume.snapshot.fingerprint import package_versions

GIB = 1 << 30
GPU = {"index": 0, "name": "NVIDIA L4", "memory": 24 * GIB, "compute_capability": "8.9",
       "uuid": "aa"}
BASE = {
    "format_version": FORMAT_VERSION, "python": "3.11.9", "implementation": "cpython",
    "platform": "linux", "machine": "x86_64",
    "packages": {"torch": "2.13.0", "numpy": "2.1.0", "pandas": "2.2.0"},
    "cuda": {"driver_version": "12.4", "gpus": [GPU]},
    "machine_type": "g2-standard-8", "image": "jupyter/gpu:1", "node": "node-a",
}


def changed(**edits):
    fp = copy.deepcopy(BASE)
    for path, value in edits.items():
        target = fp
        *parents, leaf = path.split("__")
        for p in parents:
            target = target[int(p)] if isinstance(target, list) else target[p]
        if isinstance(target, list):
            target[int(leaf)] = value
        elif value is None:
            del target[leaf]
        else:
            target[leaf] = value
    return fp


def other_gpu(**fields):
    return {"driver_version": "12.4", "gpus": [{**GPU, **fields}]}


CASES = [
    ("same", {}, "exact", None),
    ("gpu uuid", {"cuda": other_gpu(uuid="bb")}, "exact", None),
    ("node", {"node": "node-b"}, "exact", None),
    ("python patch", {"python": "3.11.10"}, "exact", "patch release"),
    ("python minor", {"python": "3.12.1"}, "partial", "Python 3.11.9 wrote it"),
    ("python major", {"python": "4.0.0"}, "incompatible", "Python 3.11.9 wrote it"),
    ("implementation", {"implementation": "pypy"}, "incompatible", "cpython wrote it"),
    ("platform", {"platform": "darwin"}, "portable", "platform differs"),
    ("machine", {"machine": "aarch64"}, "portable", "machine differs"),
    ("machine type", {"machine_type": "a2-highgpu-1g"}, "portable", "machine_type differs"),
    ("image", {"image": "jupyter/gpu:2"}, "portable", "image differs"),
    ("package minor", {"packages__pandas": "2.3.0"}, "portable", "pandas 2.2.0 -> 2.3.0"),
    ("package gone", {"packages__pandas": None}, "portable", "pandas 2.2.0 was installed there"),
    ("driver", {"cuda": {**other_gpu(), "driver_version": "13.0"}}, "portable", "driver 12.4"),
    ("gpu name", {"cuda": other_gpu(name="NVIDIA H100")}, "portable", "GPU NVIDIA L4 there"),
    ("compute capability", {"cuda": other_gpu(compute_capability="9.0")}, "portable",
     "compute capability 8.9"),
    ("gpu memory", {"cuda": other_gpu(memory=16 * GIB)}, "portable", "24.0 GiB of GPU memory"),
    ("gpu count", {"cuda": {"driver_version": "12.4", "gpus": []}}, "portable", "no GPU here"),
]


@pytest.mark.parametrize(("field", "here", "level", "reason"), CASES, ids=[c[0] for c in CASES])
def test_each_field_gives_its_verdict(local_store, signing_key, field, here, level, reason):
    from fixtures_lifecycle import make_snapshot

    m = make_snapshot(local_store, signing_key, [b"w" * 64], fingerprint=copy.deepcopy(BASE),
                      device="cuda:0", modules={"x0": ["json"]})
    verdict = check_compatible(m, changed(**here))
    assert verdict.level == level, verdict.reasons
    if reason:
        assert any(reason in r for r in verdict.reasons), verdict.reasons
    else:
        assert verdict.reasons == []


def test_unknown_format_is_incompatible(local_store, signing_key):
    from fixtures_lifecycle import make_snapshot

    there = changed(format_version=FORMAT_VERSION + 1)
    m = make_snapshot(local_store, signing_key, [b"w"], fingerprint=there)
    verdict = check_compatible(m, copy.deepcopy(BASE))
    assert verdict.level == "incompatible"
    assert verdict.reasons == [f"snapshot format {FORMAT_VERSION + 1} is unknown here"]


@pytest.mark.parametrize("version", [[2], {"v": 2}, True, 2.0, "2"])
def test_an_odd_recorded_format_is_ignored_not_a_crash(local_store, signing_key, version):
    from fixtures_lifecycle import make_snapshot

    m = make_snapshot(local_store, signing_key, [b"w"], fingerprint=changed(format_version=version))
    verdict = check_compatible(m, copy.deepcopy(BASE))
    assert (verdict.level, verdict.reasons) == ("exact", ["fingerprint fields ignored (malformed): "
                                                          "format_version"])


def test_a_huge_recorded_format_is_unknown(local_store, signing_key):
    from fixtures_lifecycle import make_snapshot

    m = make_snapshot(local_store, signing_key, [b"w"], fingerprint=changed(format_version=10**4000))
    verdict = check_compatible(m, copy.deepcopy(BASE))
    assert verdict.level == "incompatible" and len(verdict.reasons[0]) < 200


def test_both_readable_formats_are_compatible(local_store, signing_key):
    from fixtures_lifecycle import make_snapshot

    for version in (1, FORMAT_VERSION):
        m = make_snapshot(local_store, signing_key, [b"w"], fingerprint=changed(format_version=version))
        assert check_compatible(m, copy.deepcopy(BASE)).level == "exact"


def test_fewer_gpus_are_remapped(local_store, signing_key):
    from fixtures_lifecycle import make_snapshot

    there = changed(cuda={"driver_version": "12.4", "gpus": [GPU, {**GPU, "index": 1}]})
    m = make_snapshot(local_store, signing_key, [b"w"], fingerprint=there, device="cuda:1")
    verdict = check_compatible(m, copy.deepcopy(BASE))
    assert verdict.level == "portable"
    assert "2 GPUs there, 1 here: remapped" in verdict.reasons


def test_missing_module_names_the_object(local_store, signing_key):
    from fixtures_lifecycle import make_snapshot

    m = make_snapshot(local_store, signing_key, [b"a", b"b"], fingerprint=copy.deepcopy(BASE),
                      modules={"x0": ["json"], "x1": ["gkeresume_vanished_module"]})
    verdict = check_compatible(m, copy.deepcopy(BASE))
    assert verdict.level == "partial"
    assert list(verdict.objects_at_risk) == ["x1"]
    assert "gkeresume_vanished_module" in verdict.objects_at_risk["x1"]


def test_major_package_change_names_the_objects_using_it(local_store, signing_key):
    from fixtures_lifecycle import make_snapshot

    m = make_snapshot(local_store, signing_key, [b"a", b"b"], fingerprint=copy.deepcopy(BASE),
                      modules={"x0": ["numpy"], "x1": ["json"]})
    verdict = check_compatible(m, changed(packages__numpy="3.0.0"))
    assert verdict.level == "partial"
    assert list(verdict.objects_at_risk) == ["x0"]
    assert "numpy 2.1.0 -> 3.0.0 (major change)" in verdict.objects_at_risk["x0"]


def test_cuda_tensors_that_do_not_fit_are_partial(local_store, signing_key):
    from fixtures_lifecycle import make_snapshot

    m = make_snapshot(local_store, signing_key, [b"w" * 2048], fingerprint=copy.deepcopy(BASE),
                      device="cuda:0")
    verdict = check_compatible(m, changed(cuda=other_gpu(memory=1024)))
    assert verdict.level == "partial"
    assert "do not fit" in verdict.objects_at_risk["x0"]


def test_this_environment_matches_itself(local_store, signing_key):
    from fixtures_lifecycle import make_snapshot

    here = environment_fingerprint()
    m = make_snapshot(local_store, signing_key, [b"w"], fingerprint=here,
                      modules={"x0": list(package_versions())[:1] or ["json"]})
    verdict = check_compatible(m, environment_fingerprint())
    assert (verdict.level, verdict.reasons) == ("exact", [])


def test_missing_or_malformed_fingerprint_is_said(local_store, signing_key):
    from fixtures_lifecycle import make_snapshot

    bare = make_snapshot(local_store, signing_key, [b"w"])
    assert check_compatible(bare, copy.deepcopy(BASE)).to_dict() == {
        "level": "exact", "reasons": ["the snapshot records no environment: nothing to compare"],
        "objects_at_risk": {},
    }
    odd = make_snapshot(local_store, signing_key, [b"w"], fingerprint={**BASE, "cuda": [1]})
    verdict = check_compatible(odd, copy.deepcopy(BASE))
    assert verdict.level == "exact"
    assert verdict.reasons == ["fingerprint fields ignored (malformed): cuda"]


# Issue 13.3: a manifest names modules and versions; nothing of it is imported or evaluated, and
# no field crashes the check. Run in a fresh interpreter so nothing is imported beforehand.
PROBE = r"""
import json, sys
from jupyter_gkeresume.snapshot import Manifest, check_compatible
manifest = Manifest.from_json(sys.stdin.read())
before = set(sys.modules)
verdict = check_compatible(manifest, {"format_version": 1, "python": "3.11.9"})
print(json.dumps({"at_risk": verdict.objects_at_risk,
                  "imported": sorted(set(sys.modules) - before)}))
"""


def probe_modules(tmp_path, modules):
    import json
    import subprocess
    import sys

    from test_lifecycle_fuzz import VALID

    manifest = {**VALID, "objects": [{**VALID["objects"][0], "modules": modules}]}
    run = subprocess.run([sys.executable, "-c", PROBE], input=json.dumps(manifest), cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    *printed, last = run.stdout.strip().splitlines()
    return printed, json.loads(last), sorted(p.name for p in tmp_path.iterdir())


def test_module_checks_import_nothing_a_manifest_names(tmp_path):
    missing = ["this.x", "venv.__main__.x", "antigravity.y", "gkeresume_vanished_module.sub",
               "json.nope", "os.path.x", "", "..x", "json..decoder"]
    printed, result, created = probe_modules(tmp_path, missing)
    assert printed == [] and created == []  # no Zen of Python, no virtualenv made
    assert not {"this", "venv", "venv.__main__", "antigravity"} & set(result["imported"])
    for name in missing[:6]:
        assert name in result["at_risk"]["x"]
    printed, result, created = probe_modules(
        tmp_path, ["json.decoder", "email.mime.text", "xml.etree.ElementTree", "os", "sys"])
    assert (printed, result["at_risk"], created) == ([], {}, [])
    assert "email.mime.text" not in result["imported"]


@pytest.mark.parametrize("version", ["9" * 5000, "1." + "9" * 5000, "", "+", "x" * 100_000])
def test_absurd_versions_get_a_verdict(local_store, signing_key, version):
    from fixtures_lifecycle import make_snapshot

    there = changed(packages__numpy=version, python=version)
    m = make_snapshot(local_store, signing_key, [b"a"], fingerprint=there, modules={"x0": ["numpy"]})
    verdict = check_compatible(m, copy.deepcopy(BASE))
    assert verdict.level in ("partial", "incompatible", "portable")
    assert all(len(r) < 2000 and "\n" not in r for r in verdict.reasons)


def test_huge_sizes_and_odd_gpu_fields_get_a_verdict(local_store, signing_key):
    from fixtures_lifecycle import make_snapshot

    absurd = changed(cuda=other_gpu(memory=10**4000))
    m = make_snapshot(local_store, signing_key, [b"a"], fingerprint=absurd, device="cuda:0")
    verdict = check_compatible(m, copy.deepcopy(BASE))
    assert verdict.reasons == ["fingerprint fields ignored (malformed): cuda"]
    odd = changed(cuda=other_gpu(name="x\n" * 10_000, compute_capability=[[[]]] * 500))
    m = make_snapshot(local_store, signing_key, [b"a"], fingerprint=odd, device="cuda:0")
    m.storages["s0"] = dataclasses.replace(m.storages["s0"], nbytes=10**4000)
    verdict = check_compatible(m, copy.deepcopy(BASE))
    assert verdict.level == "partial"
    assert any("absurd number of GiB" in r for r in verdict.reasons)
    assert all(len(r) < 2000 and "\n" not in r for r in verdict.reasons)


def test_module_checks_run_no_third_party_finder(tmp_path):
    """Issue 22.11: setuptools puts ``_distutils_hack.DistutilsMetaFinder`` first on
    ``sys.meta_path``; asked for ``distutils`` it imports ``setuptools._distutils`` (97 modules
    here). The check asks the interpreter's own finders only, in this process."""
    printed, result, created = probe_modules(tmp_path, ["distutils.core", "setuptools", "pip"])
    assert (printed, result["at_risk"], created) == ([], {}, [])
    assert not [m for m in result["imported"]
                if m.split(".")[0] in ("setuptools", "_distutils_hack", "distutils", "pip")]


def test_a_listing_asks_a_child_interpreter_once(local_store, signing_key, monkeypatch):
    """A module that only a third-party finder could know (here: one that is nowhere) is asked
    in a fresh interpreter. A listing of several snapshots needing it asks once, for all of
    them, not once per snapshot (each child costs an interpreter start)."""
    from fixtures_lifecycle import make_snapshot

    from jupyter_gkeresume.snapshot import child, importable, list_snapshots

    spawned = []
    run = child.subprocess.run
    monkeypatch.setattr(child.subprocess, "run",
                        lambda args, **kw: spawned.append(args[3:]) or run(args, **kw))
    monkeypatch.setattr(importable.sys, "meta_path", [object(), *importable.sys.meta_path])
    for i in range(3):
        make_snapshot(local_store, signing_key, [b"a"], fingerprint=copy.deepcopy(BASE),
                      modules={"x0": [f"gkeresume_vanished_{i}", "json"]})
    rows = list_snapshots(local_store, signing_key, copy.deepcopy(BASE))
    assert sorted(r.verdict.objects_at_risk["x0"] for r in rows) == [
        f"needs {i}, not importable here" for i in
        ("gkeresume_vanished_0", "gkeresume_vanished_1", "gkeresume_vanished_2")]
    assert spawned == [["gkeresume_vanished_0", "gkeresume_vanished_1", "gkeresume_vanished_2"]]
