"""The distributions of this environment, and which of them the image holds (issues 21, 29, 31).

Call order: ``remember_environment()`` when the extension loads: the distributions installed
now, from their metadata directories' names (one ``os.scandir`` per ``sys.path`` directory, about
a millisecond: nothing else of this runs at a kernel's start). ``baseline()`` at checkpoint
(``packages.capture_packages``): of those, the ones the image holds, whose metadata directory
predates the session (``started``: the start of the process that launched the kernel, the
Jupyter server, else of the kernel). ``session_packages(baseline(), scan(sys.path), ...)`` is
then what the session installed or upgraded.

- What a ``%pip install`` adds or upgrades in the first cell is not in the load's scan; what one
  added before a kernel restart is in it, but newer than the server: both are the session's.
- An image upgrade brings metadata directories older than the new pod's server (an image's
  files keep their build time), so they are the image's, never the session's, whatever the
  image is called. Directories newer than the check (a builder's clock ahead of this node's)
  are the image's too.
- Nothing is stored: a record keyed by ``sys.prefix`` and the image's name (before issue 29) was
  written once and then took a new image's distributions for the session's.
- A Jupyter server restarted inside the same pod takes what the session installed before it for
  the image's (not carried: the pod keeps it).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterable, Iterator, Set
from pathlib import Path
from typing import NamedTuple

import psutil

from jupyter_gkeresume.listings import ListingCache, path_directories

from .notebooks import ROOT_DIR_ENV

#: jupyter_client's launcher sets it in a kernel's environment to the pid of the process that
#: starts the kernel (jupyter_client/launcher.py, ``launch_kernel``): the Jupyter server.
LAUNCHER_ENV = "JPY_PARENT_PID"
#: How much earlier than its real start ``psutil`` may date a process: Linux gives the boot time
#: in whole seconds (/proc/stat ``btime``), so a process's ``create_time`` can be up to a second
#: early. Metadata written in that second (an install just before the server started, as a
#: fresh pod's or CI's setup does) is the image's: no session installs anything before its
#: kernel has started, seconds after the server.
START_SLACK = 1.0
_DIST_DIR = re.compile(r"\A(?P<name>[^-]+)-(?P<version>[^-]+?)(-py\d[\d.]*)?\.(dist|egg)-info\Z")


class Installed(NamedTuple):
    """One installed distribution, as the baseline compares them."""

    name: str  # normalized (PEP 503)
    version: str
    location: str



_loaded: frozenset[Installed] | None = None  # the scan when the extension loaded
_listings = ListingCache()


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def scan(paths: Iterable[str]) -> frozenset[Installed]:
    """The distributions in ``paths`` (directories of ``sys.path``), from their metadata
    directories' names alone (kept while the directories do not change: ``listings``)."""
    locations = path_directories(paths)
    return _listings.get(("scan", locations), locations, lambda: frozenset(
        dist for dist, _ in _metadata_dirs(locations)))


def _metadata_dirs(locations: tuple[str, ...]) -> Iterator[tuple[Installed, os.DirEntry]]:
    """Each distribution in ``locations`` with its metadata directory (one ``os.scandir``
    each), except in a directory vendored inside another one's package (``vendored``)."""
    for location in locations:
        if vendored(location, locations):
            continue
        try:
            entries = list(os.scandir(location))
        except OSError:
            continue
        for entry in entries:
            match = _DIST_DIR.match(entry.name)
            if match:
                yield Installed(normalize(match["name"]), match["version"], location), entry


def vendored(location: str, paths: Iterable[str]) -> bool:
    """Whether ``location`` lies inside a package directory of another of ``paths``: a copy
    that package vendors (``setuptools/_vendor``, which setuptools >= 71 appends to
    ``sys.path`` when imported). Its files are that package's distribution's (carried with it,
    or in the image with it), never a distribution of their own: carried alone, setuptools'
    ``packaging`` was installed over the environment's (issue 28 item 4)."""
    inner = os.path.abspath(location)
    for outer in paths:
        outer = os.path.abspath(outer)
        relative = os.path.relpath(inner, outer)
        if outer == inner or relative.startswith(os.pardir):
            continue
        first = relative.split(os.sep, 1)[0]
        if os.path.isfile(os.path.join(outer, first, "__init__.py")):
            return True
    return False


def session_packages(baseline: Set[Installed], now: Set[Installed],
                     persistent: Iterable[str]) -> list[Installed]:
    """The distributions installed or changed since ``baseline``, minus those that live under a
    ``persistent`` directory (they come back with the volume)."""
    roots = [os.path.join(os.path.abspath(r), "") for r in persistent if r]
    return sorted(d for d in now - baseline
                  if not any(os.path.join(d.location, "").startswith(r) for r in roots))


def persistent_dirs() -> list[str]:
    return [str(Path.home()), os.environ.get(ROOT_DIR_ENV, "")]


def remember_environment() -> frozenset[Installed]:
    """The distributions installed when the extension loads (idempotent; see the module
    docstring)."""
    global _loaded
    if _loaded is None:
        _loaded = scan(sys.path)
    return _loaded


def started() -> float:
    """When this session began (epoch seconds): the start of the process that launched the
    kernel (``JPY_PARENT_PID``, when it is this process or one of its ancestors: a remote
    launcher's pid names some other process here), else of the kernel itself."""
    me = psutil.Process()
    launcher = os.environ.get(LAUNCHER_ENV, "")
    try:
        for process in (me, *me.parents()):
            if str(process.pid) == launcher:
                return process.create_time()
        return me.create_time()
    except psutil.Error:  # an ancestor gone meanwhile
        return me.create_time()


def baseline() -> frozenset[Installed]:
    """What the image holds: of the distributions seen at load, those whose metadata directory
    predates ``started()`` (within ``START_SLACK``; or is newer than now: another machine's
    clock). One ``stat`` each, again only where their directories changed (``listings``)."""
    loaded = remember_environment()
    locations = path_directories(d.location for d in loaded)
    return _listings.get(("baseline", frozenset(loaded)), locations,
                         lambda: _image_held(loaded, locations))


def _image_held(loaded: frozenset[Installed], locations: tuple[str, ...]) -> frozenset[Installed]:
    since, now = started() + START_SLACK, time.time()
    installed = {}
    for dist, entry in _metadata_dirs(locations):
        try:
            installed[dist] = entry.stat().st_mtime
        except OSError:  # removed meanwhile: not installed now either
            continue
    return frozenset(d for d in loaded if not since <= installed.get(d, 0.0) <= now)
