"""Packages installed in the session come back on a fresh pod (issue 21 item 1).

Unit tests of the baseline and the diff (``kernel_hooks.packages``), of the manifest field
(``snapshot.format``) and of the compatibility verdict for a package that cannot be installed
here; then ONE end-to-end test: a wheel built here (no network) is ``%pip install``-ed into a
throwaway environment in which a kernel runs, an object of it is checkpointed, and a kernel of a
second fresh environment without the package resumes: the package is installed before the
graph is unpickled and the object comes back.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import time
import types
import zipfile
from pathlib import Path

import psutil
import pytest
from fixtures_kernels import SITE, throwaway_environment

from jupyter_gkeresume.errors import ManifestError
from jupyter_gkeresume.snapshot import Manifest, SnapshotStore, check_compatible
from jupyter_gkeresume.snapshot.compat import package_problem
from jupyter_gkeresume.snapshot.format import PackageRecord
from kernel_hooks import distributions, packages
from kernel_hooks.packages import Installed, scan, session_packages


def test_scan_reads_name_and_version_from_the_metadata_directories(tmp_path):
    for entry in ("Foo_Bar-1.0.dist-info", "old-2.1-py3.12.egg-info", "plain", "x.dist-info"):
        (tmp_path / entry).mkdir()
    (tmp_path / "mod.py").write_text("")
    found = scan([str(tmp_path), str(tmp_path / "missing")])
    assert found == {Installed("foo-bar", "1.0", str(tmp_path)), Installed("old", "2.1", str(tmp_path))}


def test_session_packages_are_new_or_changed_and_not_on_the_persistent_volume(tmp_path):
    env, home = str(tmp_path / "env"), str(tmp_path / "home")
    baseline = {Installed("torch", "2.13.0", env), Installed("numpy", "2.1", env)}
    now = {Installed("torch", "2.13.0", env), Installed("numpy", "2.2", env),
           Installed("tiny", "1.0", env), Installed("mine", "0.1", home + "/.local/lib")}
    assert session_packages(baseline, now, [home, ""]) == [
        Installed("numpy", "2.2", env), Installed("tiny", "1.0", env)]
    assert session_packages(now, now, []) == []



def test_a_copy_vendored_inside_another_package_is_not_a_distribution_of_its_own(tmp_path):
    """setuptools >= 71 appends its ``setuptools/_vendor`` to ``sys.path`` when imported
    (setuptools/__init__.py: ``sys.path.extend(... 'setuptools', '_vendor' ...)``); the copies
    there (packaging, wheel, ...) belong to setuptools' files and were carried as the session's,
    then installed over the environment's own ``packaging`` (issue 28 item 4)."""
    site = tmp_path / "site"
    vendor = site / "host" / "_vendor"
    (vendor / "packaging-9.0.dist-info").mkdir(parents=True)
    (site / "host" / "__init__.py").write_text("")
    (site / "host-1.0.dist-info").mkdir()
    outer = tmp_path / "opt"  # a directory above a site directory, but not a package: kept
    (outer / "lib" / "other-2.0.dist-info").mkdir(parents=True)
    found = scan([str(site), str(vendor), str(tmp_path), str(outer / "lib")])
    assert found == {Installed("host", "1.0", str(site)),
                     Installed("other", "2.0", str(outer / "lib"))}


def installed(site: Path, *names: str, seconds_ago: float = 0) -> None:
    """Metadata directories as an install leaves them; ``seconds_ago``: as an image built
    then does (a layer's files keep their build time)."""
    for name in names:
        (site / name).mkdir(parents=True)
        if seconds_ago:
            then = time.time() - seconds_ago
            os.utime(site / name, (then, then))


def test_the_baseline_is_what_the_image_holds_a_restart_keeps_the_session_and_an_upgrade_is_not_one(
        tmp_path, monkeypatch):
    """Issue 21: a package installed before a kernel restart still counts as the session's.
    Issue 29 item 8: after an image upgrade (a new pod, no image name in the environment) the
    added and upgraded distributions are the image's, not installed in the session. The
    session starts with the process that launched the kernel: jupyter_client's launcher sets
    ``JPY_PARENT_PID`` to it (jupyter_client/launcher.py, ``launch_kernel``); here, pytest."""
    site = tmp_path / "site"
    installed(site, "torch-2.13.0.dist-info", "numpy-2.1.dist-info", seconds_ago=3600)
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setenv(distributions.LAUNCHER_ENV, str(os.getpid()))
    for name in ("JUPYTER_IMAGE_SPEC", "JUPYTER_IMAGE", "GKERESUME_IMAGE"):
        monkeypatch.delenv(name, raising=False)
    image = {Installed("torch", "2.13.0", str(site)), Installed("numpy", "2.1", str(site))}

    def kernel_starts() -> set[Installed]:
        monkeypatch.setattr(distributions, "_loaded", None)
        return distributions.remember_environment()

    assert kernel_starts() == image and distributions.baseline() == image
    installed(site, "tiny-1.0.dist-info")  # %pip install tiny in the first cell
    assert session_packages(distributions.baseline(), scan(sys.path), []) == [
        Installed("tiny", "1.0", str(site))]
    assert tiny_in(kernel_starts())  # the kernel restarts: tiny is there at load ...
    assert distributions.baseline() == image  # ... and still the session's
    assert session_packages(distributions.baseline(), scan(sys.path), []) == [
        Installed("tiny", "1.0", str(site))]

    # the image upgrades: a new pod has none of the session's installs, numpy 2.2 for 2.1
    # and a new distribution, all built before its server started
    for name in ("tiny-1.0.dist-info", "numpy-2.1.dist-info"):
        (site / name).rmdir()
    installed(site, "numpy-2.2.dist-info", "pandas-3.0.dist-info", seconds_ago=600)
    upgraded = kernel_starts()
    assert distributions.baseline() == upgraded and len(upgraded) == 3
    assert session_packages(distributions.baseline(), scan(sys.path), []) == []

    # an image built where the clock is ahead of this node's has directories "from the future"
    installed(site, "skewed-1.0.dist-info", seconds_ago=-3600)
    assert Installed("skewed", "1.0", str(site)) in kernel_starts()
    assert session_packages(distributions.baseline(), scan(sys.path), []) == []


def test_an_install_in_the_second_before_the_server_started_is_the_images(tmp_path, monkeypatch):
    """psutil dates a process from the boot time, which Linux gives in whole seconds
    (/proc/stat ``btime``): a server started right after ``pip install`` (a fresh pod's setup,
    CI's ``scripts/test.sh``) can look up to a second older than the metadata the install wrote.
    Found in the full suite run at once after an install: ``jupyter-gkeresume`` itself was
    carried with every snapshot as installed in the session."""
    site = tmp_path / "site"
    (site / "late-1.0.dist-info").mkdir(parents=True)
    start = time.time() - 60
    os.utime(site / "late-1.0.dist-info", (start + 0.6, start + 0.6))
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setattr(distributions, "_loaded", None)
    monkeypatch.setattr(distributions, "started", lambda: start)
    assert distributions.baseline() == {Installed("late", "1.0", str(site))}
    assert session_packages(distributions.baseline(), scan(sys.path), []) == []


def tiny_in(found: set[Installed]) -> bool:
    return any(d.name == "tiny" for d in found)


def test_the_session_starts_with_its_launcher_or_else_with_the_kernel(monkeypatch):
    me = psutil.Process()
    monkeypatch.setenv(distributions.LAUNCHER_ENV, str(me.parent().pid))
    assert distributions.started() == me.parent().create_time()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:  # a pid that is no ancestor (a remote launcher's) says nothing here
        monkeypatch.setenv(distributions.LAUNCHER_ENV, str(other.pid))
        assert distributions.started() == me.create_time()
    finally:
        other.kill()
        other.wait()
    for unknown in ("not-a-pid", ""):
        monkeypatch.setenv(distributions.LAUNCHER_ENV, unknown)
        assert distributions.started() == me.create_time()


def test_capture_stores_a_new_distribution_by_its_record_and_can_be_turned_off(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "tiny" / "__pycache__").mkdir(parents=True)
    (site / "tiny" / "__init__.py").write_text("X = 1\n")
    (site / "tiny" / "__pycache__" / "__init__.cpython.pyc").write_bytes(b"compiled")
    meta = site / "tiny-1.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: Tiny\nVersion: 1.0\n")
    (meta / "WHEEL").write_text("Wheel-Version: 1.0\nTag: py3-none-any\n")
    (meta / "RECORD").write_text("tiny/__init__.py,,\ntiny/__pycache__/__init__.cpython.pyc,,\n"
                                 "tiny-1.0.dist-info/METADATA,,\ntiny-1.0.dist-info/WHEEL,,\n"
                                 "tiny-1.0.dist-info/RECORD,,\n")
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setattr(distributions, "_loaded", set())
    written = []

    def write_blob(entries):
        written.append([bytes(memoryview(b)) for _, b in entries])
        return "b3-" + "2" * 64, 100, True

    store = SnapshotStore(str(tmp_path / "store"), "ws")
    captured = packages.capture_packages(store, write_blob)
    [stored] = captured.records
    assert (stored.name, stored.version, stored.location, stored.tags) == (
        "Tiny", "1.0", str(site), ["py3-none-any"])
    assert stored.files == ["tiny/__init__.py", "tiny-1.0.dist-info/METADATA",
                            "tiny-1.0.dist-info/WHEEL", "tiny-1.0.dist-info/RECORD"]
    assert written[0][0] == b"X = 1\n"  # entry i holds file i; no bytecode
    assert captured.sizes == {stored.blob: 100} and captured.new_bytes == 100

    monkeypatch.setenv(packages.ENABLED_ENV, "0")  # c.GkeResume.carry_packages = False
    assert packages.capture_packages(store, write_blob).records == []


def record(**fields) -> PackageRecord:
    values = {"name": "tiny", "version": "1.0", "blob": "b3-" + "0" * 64,
              "files": ["tiny/__init__.py", "tiny-1.0.dist-info/RECORD"], "location": SITE,
              "python": f"{sys.version_info.major}.{sys.version_info.minor}",
              "tags": ["py3-none-any"], **fields}
    return PackageRecord(**values)


def test_manifest_lists_packages_and_keeps_older_manifests_as_they_were(local_store, signing_key):
    from fixtures_lifecycle import make_snapshot

    manifest = make_snapshot(local_store, signing_key)
    assert "packages" not in manifest.to_dict()  # an older manifest's signed bytes stay the same
    blob = manifest.graph_blob
    with_package = dataclasses.replace(manifest, packages=[record(blob=blob)])
    assert Manifest.from_json(with_package.to_json()).packages == [record(blob=blob)]
    for bad in (record(blob=blob, files=["/etc/passwd"]), record(blob="b3-" + "1" * 64)):
        with pytest.raises(ManifestError, match="package 'tiny'"):
            Manifest.from_json(dataclasses.replace(manifest, packages=[bad]).to_json())


def test_a_package_built_for_another_python_makes_its_users_partial(local_store, signing_key):
    from fixtures_lifecycle import make_snapshot

    manifest = make_snapshot(local_store, signing_key, modules={"x0": ["tiny.core"]})
    assert package_problem(record()) is None
    foreign = record(tags=["cp27-cp27mu-manylinux1_x86_64"])
    assert "built for cp27-cp27mu-manylinux1_x86_64" in package_problem(foreign)
    assert "Python 2.7 without wheel tags" in package_problem(record(tags=[], python="2.7"))
    verdict = check_compatible(dataclasses.replace(
        manifest, packages=[dataclasses.replace(foreign, blob=manifest.graph_blob)]), {})
    assert verdict.level == "partial"
    assert "package tiny 1.0 cannot be installed here" in verdict.objects_at_risk["x0"]
    installable = dataclasses.replace(record(), blob=manifest.graph_blob)
    verdict = check_compatible(dataclasses.replace(manifest, packages=[installable]), {})
    assert "x0" not in verdict.objects_at_risk  # the resume installs what it imports first


def test_install_replaces_another_version_and_refuses_paths_outside(tmp_path, monkeypatch):
    from fixtures_lifecycle import TINY_1_0, put_blob, tiny_site

    site = tmp_path / "site"
    tiny_site(site, "gone.py")
    old = site / "tiny-0.9.dist-info"
    store = SnapshotStore(str(tmp_path / "store"), "ws")
    blob, size = put_blob(store, *TINY_1_0.values())
    new = record(blob=blob, files=list(TINY_1_0), location=str(site))
    escaping = record(name="evil", blob=blob, files=["../../../../../../tmp/evil.py", "x"],
                      location=str(site))
    monkeypatch.setattr(sys, "path", [str(site)])  # after the blob: its hasher is imported

    lines = packages.install_packages(store, [new, escaping], {blob: size})
    assert lines[0].startswith(f"tiny 1.0: installed into {site} (")
    assert lines[0].endswith(", replacing 0.9)")
    assert "evil 1.0: not installed" in lines[1] and "would land outside" in lines[1]
    assert (site / "tiny" / "__init__.py").read_text() == "VERSION = '1.0'\n"
    assert not (site / "tiny" / "gone.py").exists() and not old.exists()
    assert sorted(p.name for p in site.iterdir()) == ["tiny", "tiny-1.0.dist-info"]



def test_an_imported_module_is_never_replaced_by_another_version_under_it(tmp_path, monkeypatch):
    """A kernel that imported ``tiny`` 0.9 keeps it: installing 1.0's files under the live
    module mixes two versions (``packaging.version`` of one, ``packaging.utils`` of the other
    raised ``cannot import name '_TrimmedRelease'``, issue 28 item 4). It is named instead."""
    from fixtures_lifecycle import TINY_1_0, put_blob, tiny_site

    site = tmp_path / "site"
    tiny_site(site)
    store = SnapshotStore(str(tmp_path / "store"), "ws")
    blob, size = put_blob(store, *TINY_1_0.values())
    monkeypatch.setattr(sys, "path", [str(site)])  # after the blob: its hasher is imported
    live = types.ModuleType("tiny")
    live.__file__ = str(site / "tiny" / "__init__.py")
    monkeypatch.setitem(sys.modules, "tiny", live)

    [line] = packages.install_packages(store, [record(blob=blob, files=list(TINY_1_0),
                                                      location=str(site))], {blob: size})
    assert line.startswith(f"tiny 1.0: {packages.NOT_INSTALLED}: ")
    assert "tiny 0.9 is imported in this kernel" in line
    assert (site / "tiny" / "__init__.py").read_text() == "VERSION = '0.9'\n"
    assert sorted(p.name for p in site.iterdir()) == ["tiny", "tiny-0.9.dist-info"]


def test_wheel_tags_are_judged_without_importing_packaging_here():
    """The kernel imports only what the session had: ``package_problem`` asks a child
    interpreter for this Python's tags (packaging.tags.sys_tags) instead of importing
    ``packaging.tags`` into the kernel (issue 28 item 4)."""
    probe = ("import sys\n"
             "from jupyter_gkeresume.snapshot.compat import package_problem\n"
             "from jupyter_gkeresume.snapshot.format import PackageRecord\n"
             "def tags(t): return PackageRecord('tiny', '1.0', 'b3-' + '0' * 64, ['x'], '/',"
             " '3.11', t)\n"
             "print(package_problem(tags(['py3-none-any'])))\n"
             "print(package_problem(tags(['cp27.cp26-cp27mu-manylinux1_x86_64'])))\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('packaging', 'setuptools', 'distutils')))\n")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    good, foreign, imported = run.stdout.strip().splitlines()
    assert good == "None"
    assert foreign.startswith("built for cp27.cp26-cp27mu-manylinux1_x86_64, not for Python")
    assert imported == "[]"


# -- end to end ---------------------------------------------------------------------------------

TINY = '''
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return (self.x, self.y) == (other.x, other.y)
'''


def build_wheel(directory: Path) -> Path:
    """A pure-Python wheel of ``tinypkg`` 1.0, written by hand (PEP 427 layout)."""
    files = {
        "tinypkg/__init__.py": TINY.encode(),
        "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
                                       b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    lines = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    files["tinypkg-1.0.dist-info/RECORD"] = "\n".join([*lines, "tinypkg-1.0.dist-info/RECORD,,"]).encode()
    wheel = directory / "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return wheel


#: The modules of the environment's build tools present in a kernel (ipykernel imports
#: ``packaging.version`` itself); what the product looks up must add none of them.
WATCHED = ("import json, sys; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] "
           "in ('packaging', 'setuptools', 'distutils', 'pkg_resources'))))")


def test_a_package_installed_in_the_session_comes_back_in_a_fresh_environment(
        tmp_path, monkeypatch, start_kernel):
    kernels = tmp_path / "jupyter" / "kernels"
    monkeypatch.setenv("JUPYTER_PATH", str(kernels.parent))
    first = throwaway_environment(tmp_path / "env-a", kernels)
    second = throwaway_environment(tmp_path / "env-b", kernels)
    wheel = build_wheel(tmp_path)

    kernel = start_kernel(kernel_name="env-a")
    kernel.run("%load_ext kernel_hooks")
    kernel.run(f"%pip install --no-index --no-deps --quiet {wheel}")
    kernel.run("import tinypkg\np = tinypkg.Point(3, 4)")
    imported = kernel.run_json(WATCHED)
    report = kernel.run("%checkpoint")
    assert "not saved" not in report
    assert kernel.run_json(WATCHED) == imported  # the capture imported none of them either

    fresh = start_kernel(kernel_name="env-b")
    fresh.run("%load_ext kernel_hooks")
    before = fresh.run_json(WATCHED)
    with pytest.raises(AssertionError, match="No module named 'tinypkg'"):
        fresh.run("import tinypkg")
    listed = fresh.run("%snapshots")
    assert "a resume here installs: tinypkg 1.0" in listed
    resumed = fresh.run("%resume --any")
    assert f"package: tinypkg 1.0: installed into {second}" in resumed
    assert "not restored" not in resumed
    back = fresh.run_json("import json, tinypkg\n"
                          "print(json.dumps([p == tinypkg.Point(3, 4), tinypkg.__file__]))")
    assert back[0] is True and back[1].startswith(str(second))
    assert not Path(back[1]).is_relative_to(first)
    assert "a resume here installs" not in fresh.run("%snapshots")  # it is installed now
    assert fresh.run_json(WATCHED) == before  # our lookups imported none of them (issue 28)


def _settled(*directories: Path) -> None:
    """As a directory nothing changed in for an hour."""
    for directory in directories:
        os.utime(directory, (time.time() - 3600, time.time() - 3600))


def test_what_the_directories_hold_is_read_again_only_when_they_changed(tmp_path):
    """``listings.ListingCache``: the value is reused while every directory keeps its (device,
    inode, mtime) and was last changed more than ``SETTLE_SECONDS`` before the value was
    computed; a new entry, a directory replaced, one made or removed, a change while the value
    is computed or a change too recent to trust (a coarse clock may hide a second one) reads
    again."""
    from jupyter_gkeresume.listings import ListingCache

    site, other = tmp_path / "site", tmp_path / "other"
    site.mkdir()
    cache, calls = ListingCache(), []

    def listing(before=lambda: None):
        def compute():
            calls.append(1)
            before()
            return sorted(os.listdir(site))
        return cache.get("k", [str(site), str(other)], compute)

    assert listing() == [] and listing() == [] and len(calls) == 2  # just made: not trusted
    _settled(site)
    assert listing() == [] and listing() == [] and len(calls) == 3
    (site / "tiny-1.0.dist-info").mkdir()  # an install: the directory's mtime moves
    assert listing() == ["tiny-1.0.dist-info"] and len(calls) == 4
    _settled(site)
    listing()
    assert listing() == ["tiny-1.0.dist-info"] and len(calls) == 5
    other.mkdir()  # a sys.path directory that appears
    _settled(other)
    assert listing() == ["tiny-1.0.dist-info"] and len(calls) == 6
    assert listing() == ["tiny-1.0.dist-info"] and len(calls) == 6
    (site / "late-1.0.dist-info").mkdir()  # installed while the value is computed
    _settled(site)
    assert listing(before=lambda: (site / "late-1.0.dist-info").rmdir()) == ["tiny-1.0.dist-info"]
    assert listing() == ["tiny-1.0.dist-info"] and len(calls) == 8  # not kept: read again
    (site / "tiny-1.0.dist-info").rmdir()
    site.rmdir()
    site.mkdir()  # a new directory under the same name (another inode, maybe the same time)
    _settled(site)
    assert listing() == [] and len(calls) == 9
    assert cache.get("another key", [str(site)], lambda: "other") == "other"


def test_a_session_install_is_seen_after_a_scan_was_kept(tmp_path, monkeypatch):
    """Issue 21 with the kept scans: the image's distributions, scanned and kept (their
    directory unchanged for an hour), then ``%pip install`` in a cell: the next checkpoint's
    scan and baseline see it as the session's, and the key packages' versions are read again."""
    from jupyter_gkeresume.snapshot import fingerprint

    site = tmp_path / "site"
    installed(site, "torch-2.13.0.dist-info")
    (site / "torch-2.13.0.dist-info" / "METADATA").write_text("Name: torch\nVersion: 2.13.0\n")
    _settled(site / "torch-2.13.0.dist-info", site)  # the image's
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setenv(distributions.LAUNCHER_ENV, str(os.getpid()))
    monkeypatch.setattr(distributions, "_loaded", None)
    distributions.remember_environment()
    for _ in range(2):
        assert session_packages(distributions.baseline(), scan(sys.path), []) == []
        assert fingerprint.package_versions() == {"torch": "2.13.0"}
    installed(site, "torch-2.14.0.dist-info")  # pip install -U torch
    (site / "torch-2.14.0.dist-info" / "METADATA").write_text("Name: torch\nVersion: 2.14.0\n")
    shutil.rmtree(site / "torch-2.13.0.dist-info")
    assert session_packages(distributions.baseline(), scan(sys.path), []) == [
        Installed("torch", "2.14.0", str(site))]
    assert fingerprint.package_versions() == {"torch": "2.14.0"}
