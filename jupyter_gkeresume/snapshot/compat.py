"""Can this snapshot come back here? ``check_compatible`` answers with a verdict and reasons.

Levels, best first: ``exact`` (same environment), ``portable`` (tensors are remapped: another GPU
type, count, memory, compute capability or driver, no GPU, another image or machine type, other
package versions), ``partial`` (some named objects will not load here: a module their pickle needs
is not importable, a library they use changed major version, or their CUDA tensors do not fit),
``incompatible`` (nothing can be loaded: unknown format, another Python major version or
implementation).

Compared field by field (``fingerprint.environment_fingerprint`` writes them): ``format_version``,
``python`` (patch: note only; minor: partial; major: incompatible), ``implementation``,
``platform`` and ``machine`` (portable), ``packages``, ``cuda.driver_version`` and per GPU
``name``, ``memory``, ``compute_capability`` (count too), ``machine_type`` and ``image``. GPU
``uuid``/``index`` and ``node`` are ignored on purpose: a new pod almost always gets another
physical GPU of the same type on another node, and that is still ``exact``.

Packages installed in the session (``manifest.packages``) are put back at resume; one built for
another Python or platform (its wheel tags are not among this interpreter's, ``package_problem``)
cannot be, and the objects that import it are named (``partial``). A module that an installable
package of the snapshot provides counts as importable.

Module checks run in *this* environment: the server, the CLI and the kernel share one environment
on a notebook pod, so "importable here" means importable by the kernel that will restore. They
import and execute nothing in this process: see ``importable.missing_modules``. This Python's wheel
tags come from ``packaging.tags`` in a child interpreter (``child.ask_child``): a kernel gains no
module from the product's lookups (issue 28 item 4).

Every field is untrusted JSON: ``check_compatible`` answers for any value (huge numbers, endless
version strings, nested lists), and the values it quotes in reasons are shortened to one line.
"""

from __future__ import annotations

import re
import reprlib
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from ..printable import printable
from .child import ask_child
from .format import DIGESTS_BY_VERSION, Manifest, PackageRecord
from .importable import ModuleLookup

LEVELS = ("exact", "portable", "partial", "incompatible")
GIB = 1 << 30
MAX_GPU_MEMORY = 1 << 50  # bytes: a recorded GPU memory beyond this is malformed, not a GPU
SHOWN_CHARS = 80


@dataclass
class Verdict:
    """The outcome of a compatibility check: a level, human-readable reasons, objects at risk."""

    level: str
    reasons: list[str] = field(default_factory=list)
    objects_at_risk: dict[str, str] = field(default_factory=dict)

    def worsen(self, level: str, reason: str) -> None:
        """Add ``reason``; the level becomes ``level`` if that is worse (``exact`` = a note)."""
        if LEVELS.index(level) > LEVELS.index(self.level):
            self.level = level
        self.reasons.append(reason)

    def at_risk(self, name: str, why: str) -> None:
        """Name one object that will not load here (the level becomes at least ``partial``)."""
        self.objects_at_risk[name] = (
            f"{self.objects_at_risk[name]}; {why}" if name in self.objects_at_risk else why
        )
        self.worsen("partial", f"{name}: {why}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level, "reasons": self.reasons, "objects_at_risk": self.objects_at_risk
        }


def _show(value: Any) -> str:
    """A manifest value as short one-line text for a reason."""
    try:
        text = value if isinstance(value, str) else reprlib.repr(value)
    except (ValueError, RecursionError):  # an integer too long to print
        text = f"<a {type(value).__name__} too long to show>"
    shown = printable(text[:SHOWN_CHARS])
    return shown + ("..." if len(text) > SHOWN_CHARS else "")


def check_compatible(manifest: Manifest, here: dict[str, Any],
                     modules: ModuleLookup | None = None) -> Verdict:
    """Compare ``manifest.fingerprint`` with ``here`` (an ``environment_fingerprint()``);
    ``modules`` answers which of ``modules_to_check(manifest)`` are importable here (pass one
    lookup for many manifests, prefetched with all their names)."""
    verdict = Verdict("exact")
    there, malformed = _clean(manifest.fingerprint)
    here, _ = _clean(here)
    if malformed:
        verdict.worsen("exact", f"fingerprint fields ignored (malformed): {', '.join(malformed)}")
    if not there:
        verdict.worsen("exact", "the snapshot records no environment: nothing to compare")
    written = there.get("format_version", manifest.format_version)
    if manifest.format_version not in DIGESTS_BY_VERSION or written not in DIGESTS_BY_VERSION:
        verdict.worsen("incompatible", f"snapshot format {_show(written)} is unknown here")
        return verdict
    _compare_python(verdict, there, here)
    if verdict.level == "incompatible":
        return verdict
    for key in ("platform", "machine", "machine_type", "image"):
        if there.get(key) and here.get(key) and there[key] != here[key]:
            verdict.worsen("portable", f"{key} differs: {_show(there[key])} -> {_show(here[key])}")
    _compare_gpus(verdict, there.get("cuda", {}), here.get("cuda", {}), manifest)
    _compare_packages(verdict, there.get("packages", {}), here.get("packages", {}), manifest)
    _check_installable(verdict, manifest)
    not_here = set((modules or ModuleLookup()).missing(modules_to_check(manifest)))
    for obj in manifest.objects:
        missing = sorted(m for m in obj.modules if m in not_here)
        if missing and obj.status == "saved":
            shown = ", ".join(_show(m) for m in missing)
            verdict.at_risk(obj.name, f"needs {shown}, not importable here")
    return verdict


def modules_to_check(manifest: Manifest) -> set[str]:
    """The modules the saved objects need, less those of packages the snapshot carries."""
    carried = {name for record in manifest.packages if package_problem(record) is None
               for name in top_level_names(record.files)}
    return {m for obj in manifest.objects if obj.status == "saved" for m in obj.modules
            if m.split(".", 1)[0] not in carried}


def _clean(fingerprint: Any) -> tuple[dict[str, Any], list[str]]:
    """The fingerprint with only well-typed fields (it is free-form JSON in the manifest), and
    the names of the fields dropped."""
    source = fingerprint if isinstance(fingerprint, dict) else {}
    clean: dict[str, Any] = {}
    dropped = [] if isinstance(fingerprint, dict) else ["fingerprint"]
    for key, value in source.items():
        if key in ("python", "implementation", "platform", "machine", "machine_type", "image"):
            ok = isinstance(value, str)
        elif key == "format_version":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif key == "packages":
            ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
        elif key == "cuda":
            ok = isinstance(value, dict) and _cuda_ok(value)
        else:
            continue
        if ok:
            clean[key] = value
        elif value is not None:
            dropped.append(key)
    return clean, dropped


def _cuda_ok(cuda: dict) -> bool:
    gpus = cuda.get("gpus", [])
    return (
        isinstance(cuda.get("driver_version", ""), (str, type(None)))
        and isinstance(gpus, list)
        and all(
            isinstance(g, dict)
            and isinstance(g.get("memory", 0), int) and not isinstance(g.get("memory"), bool)
            and 0 <= g.get("memory", 0) <= MAX_GPU_MEMORY
            for g in gpus
        )
    )


def _compare_python(verdict: Verdict, there: dict, here: dict) -> None:
    impl_there, impl_here = there.get("implementation"), here.get("implementation")
    if impl_there and impl_here and impl_there != impl_here:
        verdict.worsen("incompatible", f"{_show(impl_there)} wrote it, this is {_show(impl_here)}")
        return
    py_there, py_here = there.get("python"), here.get("python")
    if py_there is None or py_here is None or py_there == py_here:
        return
    v_there, v_here = py_there.split("."), py_here.split(".")
    py_there, py_here = _show(py_there), _show(py_here)
    if v_there[:1] != v_here[:1]:
        verdict.worsen("incompatible", f"Python {py_there} wrote it, this is Python {py_here}")
    elif v_there[:2] != v_here[:2]:
        verdict.worsen(
            "partial", f"Python {py_there} wrote it, this is Python {py_here}: notebook-defined "
            "functions and classes (pickled as bytecode) may not load"
        )
    else:
        verdict.worsen("exact", f"Python {py_there} -> {py_here} (patch release)")


def _compare_gpus(verdict: Verdict, there: dict, here: dict, manifest: Manifest) -> None:
    gpus_there, gpus_here = there.get("gpus", []), here.get("gpus", [])
    cuda_bytes = sum(s.nbytes for s in manifest.storages.values() if s.device.startswith("cuda"))
    if not gpus_there:
        return
    if not gpus_here:
        if cuda_bytes:
            verdict.worsen("portable", "no GPU here: CUDA tensors come back on the CPU")
        return
    if len(gpus_here) < len(gpus_there):
        verdict.worsen("portable", f"{len(gpus_there)} GPUs there, {len(gpus_here)} here: remapped")
    for key, what in (("name", "GPU"), ("compute_capability", "compute capability")):
        values_there = [g.get(key) for g in gpus_there][: len(gpus_here)]
        values_here = [g.get(key) for g in gpus_here][: len(gpus_there)]
        if values_there != values_here:
            verdict.worsen(
                "portable", f"{what} {_show(values_there[0])} there, {_show(values_here[0])} here"
            )
    mem_there = sum(g.get("memory", 0) for g in gpus_there)
    mem_here = sum(g.get("memory", 0) for g in gpus_here)
    if mem_here < mem_there:
        verdict.worsen(
            "portable", f"{_gib(mem_there)} GiB of GPU memory there, {_gib(mem_here)} here"
        )
    if cuda_bytes > mem_here:
        why = (f"{_gib(cuda_bytes)} GiB of CUDA tensors do not fit in {_gib(mem_here)} GiB "
               "of GPU memory here")
        on_gpu = [o.name for o in manifest.objects
                  if o.status == "saved" and (o.device or "").startswith("cuda")]
        for name in on_gpu:
            verdict.at_risk(name, why)
        if not on_gpu:
            verdict.worsen("partial", why)
    if there.get("driver_version") != here.get("driver_version"):
        verdict.worsen(
            "portable",
            f"CUDA driver {_show(there.get('driver_version'))} -> {_show(here.get('driver_version'))}",
        )


def _compare_packages(verdict: Verdict, there: dict, here: dict, manifest: Manifest) -> None:
    """Version changes are ``portable``; a major change names the objects that use the package."""
    majors = {}
    for name, version in sorted(there.items()):
        shown = f"{_show(name)} {_show(version)}"
        if name not in here:
            verdict.worsen("portable", f"{shown} was installed there, not here")
        elif here[name] != version:
            major = _major(version) != _major(here[name])
            change = f"{shown} -> {_show(here[name])}"
            verdict.worsen("portable", change + (" (major)" if major else ""))
            if major:
                majors[_normalize(name)] = f"{change} (major change)"
    if not majors:
        return
    owners = metadata.packages_distributions()
    for obj in manifest.objects:
        if obj.status != "saved":
            continue
        for module in obj.modules:
            for dist in owners.get(module, [module]):
                if _normalize(dist) in majors:
                    verdict.at_risk(obj.name, f"pickled with {majors[_normalize(dist)]}")


def package_problem(record: PackageRecord) -> str | None:
    """Why the files of ``record`` cannot be installed here (None when they can): none of its
    wheel tags is this interpreter's, or, without tags, another Python minor installed it."""
    if not record.tags:
        if record.python == _python_minor():
            return None
        return f"installed for Python {_show(record.python)} without wheel tags, this is {_python_minor()}"
    try:
        tags = {tag for text in record.tags for tag in _parse_tag(text)}
    except ValueError:
        return f"unreadable wheel tags {_show(record.tags)}"
    supported = _supported_tags()
    if supported is None:
        return "this Python's wheel tags cannot be told (packaging.tags failed in a child interpreter)"
    if tags & supported:
        return None
    return f"built for {_show(', '.join(record.tags))}, not for Python {_python_minor()} on this platform"


def _parse_tag(text: str) -> frozenset[tuple[str, str, str]]:
    """A wheel's compressed tag (``py2.py3-none-any``) as its (interpreter, abi, platform)
    triples, lowercased, as ``packaging.tags.parse_tag`` reads it (PEP 425)."""
    parts = text.lower().split("-")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"not a wheel tag: {text!r}")
    interpreters, abis, platforms = (part.split(".") for part in parts)
    return frozenset((i, a, p) for i in interpreters for a in abis for p in platforms)


#: Asked in a child: ``packaging.tags`` is not imported into the kernel (see ``child``).
_SYS_TAGS = ("import json\nfrom packaging.tags import sys_tags\n"
             "print(json.dumps([[t.interpreter, t.abi, t.platform] for t in sys_tags()]))")


def packages_to_install(records: list[PackageRecord]) -> list[PackageRecord]:
    """The packages of a snapshot that a resume here would install: not installed at their
    version (``importlib.metadata`` finds the first of that name on ``sys.path``)."""
    missing = []
    for record in records:
        try:
            present = metadata.version(record.name)
        except (metadata.PackageNotFoundError, ValueError):
            present = None
        if present != record.version:
            missing.append(record)
    return missing


def top_level_names(files: list[str]) -> set[str]:
    """The importable top-level names among a distribution's files (RECORD paths)."""
    names = set()
    for path in files:
        first = path.split("/", 1)[0]
        if first != ".." and not first.endswith((".dist-info", ".data")):
            names.add(first if "/" in path else first.split(".", 1)[0])
    return {n for n in names if n.isidentifier()}


def _check_installable(verdict: Verdict, manifest: Manifest) -> None:
    """Each package of the session that cannot be put back here, and the objects that use it."""
    for record in manifest.packages:
        problem = package_problem(record)
        if problem is None:
            continue
        why = f"package {_show(record.name)} {_show(record.version)} cannot be installed here: {problem}"
        names = top_level_names(record.files)
        users = [o.name for o in manifest.objects
                 if o.status == "saved" and {m.split(".", 1)[0] for m in o.modules} & names]
        for name in users:
            verdict.at_risk(name, why)
        if not users:
            verdict.worsen("partial", why)


def _python_minor() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


_tags: list[frozenset[tuple[str, str, str]]] = []  # the answer, once a child gave it


def _supported_tags() -> frozenset[tuple[str, str, str]] | None:
    """This interpreter's wheel tags (``packaging.tags.sys_tags``, asked in a child once per
    process; a child that failed is asked again next time), or None."""
    if not _tags:
        found = ask_child(_SYS_TAGS)
        if not isinstance(found, list):
            return None
        _tags.append(frozenset(tuple(t) for t in found if isinstance(t, list) and len(t) == 3))
    return _tags[0]


def _gib(nbytes: int) -> str:
    try:
        return f"{nbytes / GIB:.1f}"
    except OverflowError:  # a size no machine has: the manifest is absurd, say so
        return "an absurd number of"


def _major(version: str) -> tuple[str, ...]:
    """The compatibility-breaking prefix: ``2.1.0`` -> ('2',), ``0.4.1`` -> ('0', '4'). Digit
    strings, not ints: a version is untrusted text (``int()`` refuses 5000 digits)."""
    numbers = [n.lstrip("0") or "0" for n in re.findall(r"\d+", version.split("+")[0])[:2]] or ["0"]
    return tuple(numbers[:2]) if numbers[0] == "0" else (numbers[0],)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
