"""Packages installed in the session: found at checkpoint, stored as blobs, put back at resume.

Call order:

1. ``distributions.remember_environment()`` when the extension loads, ``distributions.baseline()``
   at checkpoint: what the image holds (see there).
2. ``capture_packages(store, write_blob)`` in ``take_checkpoint``: every distribution whose (name,
   version, location) is not in the baseline and whose location is not on the persistent volume
   (home, ``GKERESUME_ROOT_DIR``) becomes one blob, entry ``i`` the bytes of file ``i`` of its
   RECORD, written by the snapshot's ``BlobWriter`` (content-addressed, deduplicated); it returns
   the ``PackageRecord`` list for the manifest (which the signature covers) and, by name, what
   could not be stored.
3. ``install_packages(store, records, ...)`` in ``take_resume`` after the compatibility check and
   before anything is unpickled: each package not installed here at that version is streamed
   into temporary files beside its own and verified (``blob_files``: no link followed, no
   setuid/setgid bit), renamed into place (dist-info last), and only then are the other
   version's files removed: a failed install leaves that version in place. One report line per
   package.

``GKERESUME_PACKAGES=0`` (the server's ``c.GkeResume.carry_packages = False``) turns 2 and 3 off.
The scan is one ``os.scandir`` per ``sys.path`` directory (name and version come from the
dist-info directory's name); only changed distributions are opened (their unchanged blobs are
claimed, not written again: ``BlobWriter.write_views``).
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import sysconfig
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from importlib import metadata
from typing import NamedTuple

from jupyter_gkeresume.errors import GkeResumeError
from jupyter_gkeresume.snapshot import SnapshotStore
from jupyter_gkeresume.snapshot.compat import (
    package_problem,
    packages_to_install,
    top_level_names,
)
from jupyter_gkeresume.snapshot.format import PackageRecord
from jupyter_gkeresume.units import human_bytes

from .blob_files import Placement, mapped, stage_blob
from .distributions import Installed, baseline, normalize, persistent_dirs, scan, session_packages
from .results import Progress

ENABLED_ENV = "GKERESUME_PACKAGES"
#: What the line of a package that was not put back says (the resume's verdict looks for it).
NOT_INSTALLED = "not installed"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


class PackageError(GkeResumeError):
    """A package of the session cannot be stored, or put back into this environment."""


@dataclass
class Captured:
    """What ``capture_packages`` stored, and what it could not (distribution -> why)."""

    records: list[PackageRecord]
    sizes: dict[str, int]  # blob -> bytes, for the manifest's blobs
    not_stored: dict[str, str]
    new_bytes: int = 0  # of blobs written now (the others were in the store)


def enabled() -> bool:
    return os.environ.get(ENABLED_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def capture_packages(store: SnapshotStore,
                     write_blob: Callable[[list[tuple[str, object]]], tuple[str, int, bool]],
                     ) -> Captured:
    """Store the session's packages (see the module docstring); ``write_blob`` is
    ``BlobWriter.write_more``."""
    out = Captured([], {}, {})
    if not enabled():
        return out
    for dist in session_packages(baseline(), scan(sys.path), persistent_dirs()):
        try:
            record, size, new = _store_one(dist, write_blob)
        except (OSError, PackageError) as exc:
            out.not_stored[f"{dist.name} {dist.version}"] = str(exc)
            continue
        out.records.append(record)
        out.sizes[record.blob] = size
        out.new_bytes += size if new else 0
    return out


def _store_one(dist: Installed,
               write_blob: Callable[[list[tuple[str, object]]], tuple[str, int, bool]],
               ) -> tuple[PackageRecord, int, bool]:
    """One distribution's files as one blob (mapped, not read into memory first; ``write_blob``
    skips content the store has)."""
    found = _distribution(dist)
    files = [f for f in found.files or [] if "__pycache__" not in f.parts
             and os.path.isfile(found.locate_file(f))]
    with ExitStack() as stack:
        contents = [mapped(stack, found.locate_file(f)) for f in files]
        digest, size, new = write_blob([("uint8", c) for c in contents])
    return PackageRecord(found.metadata["Name"], dist.version, digest, [str(f) for f in files],
                         dist.location, PYTHON, _wheel_tags(found)), size, new


def _distribution(dist: Installed) -> metadata.Distribution:
    for found in metadata.distributions(path=[dist.location]):
        if normalize(found.metadata["Name"] or "") == dist.name and found.version == dist.version:
            if found.files is None:
                raise PackageError("it lists no files (no RECORD): reinstall it with pip")
            return found
    raise PackageError("its metadata cannot be read")


def _wheel_tags(found: metadata.Distribution) -> list[str]:
    wheel = found.read_text("WHEEL") or ""
    return [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]


def install_packages(store: SnapshotStore, records: list[PackageRecord], sizes: dict[str, int],
                     progress: Callable[[Progress], None] | None = None) -> list[str]:
    """Put back the packages of ``records`` that are not installed here at their version (see
    the module docstring); ``sizes``: the manifest's blob sizes. Returns one line per package.
    A package built for another Python or platform is not installed (its line says so; the
    compatibility verdict named it before), nor one whose blob or files fail: its line says why,
    and the objects that import it are then not restored."""
    if not enabled() or not records:
        return []
    started = time.monotonic()
    missing = packages_to_install(records)
    lines = [f"{r.name} {r.version}: already installed" for r in records if r not in missing]
    total = sum(sizes.get(r.blob, 0) for r in missing)
    done = 0
    for record in missing:
        problem = package_problem(record)
        if problem is not None:
            lines.append(f"{record.name} {record.version}: {NOT_INSTALLED}: {problem}")
            continue
        try:
            lines.append(_install_one(store, record))
        except (GkeResumeError, OSError) as exc:  # the others still go in; its objects fail
            lines.append(f"{record.name} {record.version}: {NOT_INSTALLED}: {exc}")
        done += sizes.get(record.blob, 0)
        if progress is not None:
            progress(Progress("installing", done, total, time.monotonic() - started))
    importlib.invalidate_caches()
    return lines


def _install_one(store: SnapshotStore, record: PackageRecord) -> str:
    """Stream and verify the record's blob into temporaries beside its files, rename them into
    place (metadata last), then remove what another version in the destination had and this one
    has not; returns the report line. A failure before the renames (the blob, a full disk, a
    link in the way) leaves the other version as it was."""
    destination = _destination(record)
    placements = [_placement(destination, record, relative) for relative in record.files]
    others = _other_versions(record, destination)
    _refuse_under_imported(record, others)
    staged = stage_blob(store, record.blob, placements)
    try:
        staged.commit(last=lambda p: ".dist-info/" in p.target)
    finally:
        staged.discard()
    replaced = _remove_left_over(others, {p.target for p in placements})
    imported = sorted({n for n in top_level_names(record.files) if n in sys.modules})
    line = (f"{record.name} {record.version}: installed into {destination} "
            f"({human_bytes(staged.nbytes)}"
            + (f", replacing {', '.join(replaced)}" if replaced else "") + ")")
    if imported:
        line += f"; restart the kernel to use it: {', '.join(imported)} was imported before"
    return line


def _refuse_under_imported(record: PackageRecord, others: list[_OtherVersion]) -> None:
    """Raise when a module of ``record`` is imported in this kernel from the files of another
    version about to be replaced: the live module would meet the new version's files (the
    kernel's ``packaging.version`` 26.4 and a carried 26.3's ``packaging.utils`` raised
    ``cannot import name '_TrimmedRelease'``, issue 28 item 4). That version stays in place."""
    replaced = {os.path.normpath(path): other.version for other in others for path in other.files}
    for name in sorted(top_level_names(record.files)):
        where = getattr(sys.modules.get(name), "__file__", None)
        version = replaced.get(os.path.normpath(where)) if where else None
        if version is not None:
            raise PackageError(f"{record.name} {version} is imported in this kernel ({name}): "
                               "its files stay (a live module is never mixed with another "
                               "version's); install it with %pip in a fresh kernel if needed")


def _destination(record: PackageRecord) -> str:
    """Its original location when that is on ``sys.path`` here and writable, else this
    environment's site-packages."""
    here = {os.path.abspath(p) for p in sys.path if p}
    if record.location in here and os.access(record.location, os.W_OK):
        return record.location
    paths = sysconfig.get_paths()
    pure = all(t.endswith("-none-any") for t in record.tags) and record.tags
    return paths["purelib" if pure else "platlib"]


def _placement(destination: str, record: PackageRecord, relative: str) -> Placement:
    """Where a file goes: inside ``destination`` or this environment's prefix, nowhere else
    (executables in a ``bin`` directory get 0o755)."""
    target = os.path.normpath(os.path.join(destination, relative))
    mode = 0o755 if os.path.basename(os.path.dirname(target)) == "bin" else None
    for root in (destination, sys.prefix):
        if target.startswith(os.path.join(root, "")):
            return Placement(root, os.path.relpath(target, root), mode)
    raise PackageError(f"{record.name} {record.version}: file {relative!r} would land "
                       f"outside {destination} and {sys.prefix}")


class _OtherVersion(NamedTuple):
    """Another version's files and metadata directories, read before anything changes."""

    version: str
    files: list[str]
    metadata_dirs: list[str]


def _other_versions(record: PackageRecord, destination: str) -> list[_OtherVersion]:
    """Other versions of the record's distribution in ``destination`` (their RECORD, as pip
    uninstalls)."""
    found = []
    for other in metadata.distributions(path=[destination]):
        if normalize(other.metadata["Name"] or "") != normalize(record.name):
            continue
        files = other.files or []
        found.append(_OtherVersion(
            other.version, [str(other.locate_file(f)) for f in files],
            [str(other.locate_file(d)) for d in {f.parts[0] for f in files
                                                 if f.parts[0].endswith(".dist-info")}]))
    return found


def _remove_left_over(others: list[_OtherVersion], written: set[str]) -> list[str]:
    """Remove the files of ``others`` that the new version did not replace; their versions."""
    for other in others:
        for path in other.files:
            if os.path.normpath(path) not in written and os.path.isfile(path):
                os.unlink(path)
        for metadata_dir in other.metadata_dirs:
            if not any(w.startswith(os.path.join(metadata_dir, "")) for w in written):
                shutil.rmtree(metadata_dir, ignore_errors=True)
    return [other.version for other in others]
