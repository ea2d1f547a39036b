"""Snapshot format v2 (reads v1): the manifest dataclasses and their strict JSON (de)serialization.

A snapshot is a manifest (this module) plus content-addressed blobs (``blobfile``). The versions
differ only in the digests their blobs may be named by (``DIGESTS_BY_VERSION``, from the registry
in ``digests``): v1 only sha256, v2 (written now) any known algorithm, each digest naming its own.
The manifest is written last; its presence in the store is the commit. ``Manifest.from_json``
accepts only what ``Manifest.to_json`` can produce: anything else raises ``ManifestError`` with
the offending field, never a ``KeyError`` or ``TypeError`` from deep inside.

Layout of the graph: the kernel pickles one record per name in ``records`` with one pickler (one
memo, so identity survives across names): the saved objects, then ``__session__`` (RNG, cwd,
sys.path, env, execution count) and ``__resume_hooks__``. ``graph_ends[i]`` is the offset just
past record ``i`` in the graph blob's single entry. Storages that left the pickle are named
``s0, s1, ...`` in ``storages``; each says which blob entry holds its bytes. ``blob_crc32c``
(optional, absent in older manifests) gives the crc32c of blobs on a store that keeps one per
object (GCS), so that checking a snapshot by its metadata also catches replaced bytes.

Packages installed in the session (``packages``, absent when none, so older manifests keep their
signature) each name one blob whose entry ``i`` holds the bytes of ``files[i]``, a path relative
to the distribution's location as its RECORD lists it.

Directories outside the home volume stored with the snapshot (``extra_paths``, absent when none:
the server's ``c.GkeResume.extra_paths``) each name one blob whose entry ``i`` holds the bytes of
``files[i]``, a path relative to the directory, with its permission bits ``modes[i]``.

``hash_seed`` (absent when the kernel's string hashes were random, and in older manifests) is the
``PYTHONHASHSEED`` of the kernel the snapshot was taken in: a resume starts its kernel with it.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInputError, ManifestError
from .digests import ALGORITHMS, SHA256, Digest, algorithm_of

FORMAT_NAME = "gkeresume.snapshot"
FORMAT_VERSION = 2
#: The format versions this build reads, and the digest algorithms each may name blobs by.
DIGESTS_BY_VERSION: dict[int, tuple[Digest, ...]] = {1: (SHA256,), 2: ALGORITHMS}

SNAPSHOT_ID_RE = re.compile(r"\A[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}\Z")
NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")
MAX_HASH_SEED = 4294967295  # the largest PYTHONHASHSEED Python accepts
OBJECT_STATUSES = ("saved", "skipped")


def validate_snapshot_id(value: object) -> str:
    """Return ``value`` if it is a well-formed snapshot id, else raise ``InvalidInputError``.

    Ids double as object names in the store, so this is also the path-traversal guard.
    """
    if not isinstance(value, str) or not SNAPSHOT_ID_RE.fullmatch(value):
        raise InvalidInputError(f"not a snapshot id: {value!r} (expected like 20261130T101500Z-a1b2c3)")
    return value


def validate_snapshot_name(value: object) -> str:
    """Return ``value`` if it is a usable snapshot name (letters, digits, ``._-``, max 100)."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or SNAPSHOT_ID_RE.fullmatch(value):
        raise InvalidInputError(
            f"not a usable snapshot name: {value!r} (letters, digits, '.', '_', '-'; up to 100; "
            "not shaped like an id)"
        )
    if value == "latest":
        raise InvalidInputError("'latest' is reserved: it always means the newest snapshot")
    return value


def valid_hash_seed(value: object) -> bool:
    """``value`` is a ``PYTHONHASHSEED`` a kernel can start with (decimal digits, in range)."""
    return (isinstance(value, str) and value.isascii() and value.isdigit()
            and int(value) <= MAX_HASH_SEED)


@dataclass(frozen=True)
class StorageRef:
    """Where the bytes of one out-of-pickle storage live: entry ``entry`` of blob ``blob``."""

    blob: str
    entry: int
    nbytes: int
    dtype: str
    device: str
    kind: str  # "torch" | "numpy" | "cuda_array"
    owner: str  # the top-level name that first reached it


@dataclass(frozen=True)
class PackageRecord:
    """A distribution installed in the session: its files are the entries of blob ``blob``."""

    name: str
    version: str
    blob: str
    files: list[str]
    location: str  # where it was installed (a site-packages directory)
    python: str  # major.minor of the interpreter it was installed for
    tags: list[str] = field(default_factory=list)  # its wheel tags (WHEEL), empty if unknown


@dataclass(frozen=True)
class PathRecord:
    """A directory stored with the snapshot: its regular files are the entries of blob ``blob``."""

    path: str  # absolute, normalized
    blob: str
    files: list[str]  # relative to ``path``
    modes: list[int]  # permission bits of each file


@dataclass(frozen=True)
class ObjectRecord:
    """One name of the user namespace: saved, or skipped with the reason why."""

    name: str
    type: str
    status: str
    reason: str | None = None
    bytes: int = 0
    dtype: str | None = None
    shape: list[int] | None = None
    device: str | None = None
    modules: list[str] = field(default_factory=list)


@dataclass
class Manifest:
    """Everything needed to restore (and to judge, list, verify and gc) one snapshot."""

    snapshot_id: str
    workspace: str
    created: str
    graph_blob: str
    objects: list[ObjectRecord]
    storages: dict[str, StorageRef]
    blobs: dict[str, int]
    records: list[str] = field(default_factory=list)
    graph_ends: list[int] = field(default_factory=list)
    name: str | None = None
    notebook: str | None = None
    execution_count: int = 0
    totals: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    history: list[str] = field(default_factory=list)
    reason: str | None = None  # why it was taken: user, idle, shutdown, checkpoint (optional)
    blob_crc32c: dict[str, int] = field(default_factory=dict)  # digest -> crc32c (optional)
    signature: dict[str, str] | None = None
    format_version: int = FORMAT_VERSION
    packages: list[PackageRecord] = field(default_factory=list)
    hash_seed: str | None = None  # PYTHONHASHSEED of the kernel it was taken in (None: random)
    extra_paths: list[PathRecord] = field(default_factory=list)

    @property
    def saved_names(self) -> list[str]:
        """Names pickled in the graph, in record order."""
        return [o.name for o in self.objects if o.status == "saved"]

    @property
    def total_bytes(self) -> int:
        """Bytes of every blob this snapshot references (graph included)."""
        return sum(self.blobs.values())

    def to_dict(self, *, signed: bool = True) -> dict[str, Any]:
        """The manifest as plain JSON data; ``signed=False`` leaves the signature out."""
        data = {
            "format": FORMAT_NAME,
            "format_version": self.format_version,
            "id": self.snapshot_id,
            "workspace": self.workspace,
            "name": self.name,
            "created": self.created,
            "notebook": self.notebook,
            "execution_count": self.execution_count,
            "graph_blob": self.graph_blob,
            "records": list(self.records),
            "graph_ends": list(self.graph_ends),
            "objects": [_plain(o) for o in self.objects],
            "storages": {k: _plain(v) for k, v in self.storages.items()},
            "blobs": dict(self.blobs),
            "totals": dict(self.totals),
            "timings": dict(self.timings),
            "fingerprint": self.fingerprint,
            "history": list(self.history),
        }
        if self.reason is not None:  # absent, not null: older manifests keep their signature
            data["reason"] = self.reason
        if self.packages:  # absent when none, for the same reason
            data["packages"] = [_plain(p) for p in self.packages]
        if self.blob_crc32c:  # absent when empty, as ``reason``
            data["blob_crc32c"] = dict(self.blob_crc32c)
        if self.hash_seed is not None:  # absent when random, as ``reason``
            data["hash_seed"] = self.hash_seed
        if self.extra_paths:  # absent when none, as ``packages``
            data["extra_paths"] = [_plain(p) for p in self.extra_paths]
        if signed and self.signature is not None:
            data["signature"] = dict(self.signature)
        return data

    def signing_payload(self) -> bytes:
        """Canonical bytes the HMAC signature covers (everything but the signature)."""
        return canonical_json(self.to_dict(signed=False))

    def to_json(self) -> bytes:
        """Serialized manifest, ready to commit."""
        return json.dumps(self.to_dict(), sort_keys=True).encode()  # no indent: C's encoder

    @classmethod
    def from_json(cls, raw: bytes | str) -> Manifest:
        """Parse and validate a manifest; raise ``ManifestError`` naming what is wrong."""
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ManifestError(f"manifest is not valid JSON: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        """Validate JSON data produced by ``to_dict``; raise ``ManifestError`` otherwise."""
        r = _Reader(data, "manifest")
        if r.get("format", str) != FORMAT_NAME:
            raise ManifestError("manifest: 'format' is not gkeresume.snapshot")
        version = r.get("format_version", int)
        if version not in DIGESTS_BY_VERSION:
            raise ManifestError(
                f"manifest: format_version {version} is not supported (this build reads "
                f"{', '.join(map(str, DIGESTS_BY_VERSION))}); upgrade jupyter-gkeresume to read it"
            )
        blobs = r.mapping("blobs", int)
        for digest, size in blobs.items():
            _check_digest(digest, version)
            _check(size >= 0, f"manifest: blob {digest} has a negative size")
        crcs = r.mapping("blob_crc32c", int) if "blob_crc32c" in r.data else {}
        for digest, crc in crcs.items():
            _check(digest in blobs, f"manifest: blob_crc32c names unlisted blob {digest[:16]!r}")
            _check(0 <= crc < 1 << 32, f"manifest: blob_crc32c of {digest[:16]!r} is not a crc32c")
        storages = {}
        for key, raw_ref in r.mapping("storages", dict).items():
            s = _Reader(raw_ref, f"storage {key}")
            ref = StorageRef(
                blob=s.get("blob", str), entry=s.get("entry", int), nbytes=s.get("nbytes", int),
                dtype=s.get("dtype", str), device=s.get("device", str), kind=s.get("kind", str),
                owner=s.get("owner", str),
            )
            _check(ref.blob in blobs, f"manifest: storage {key} names unlisted blob {ref.blob!r}")
            _check(ref.entry >= 0 and ref.nbytes >= 0, f"manifest: storage {key} has bad sizes")
            storages[key] = ref
        objects = []
        for i, raw_obj in enumerate(r.get("objects", list)):
            o = _Reader(raw_obj, f"object #{i}")
            rec = ObjectRecord(
                name=o.get("name", str), type=o.get("type", str), status=o.get("status", str),
                reason=o.get("reason", str, optional=True), bytes=o.get("bytes", int),
                dtype=o.get("dtype", str, optional=True),
                shape=o.get("shape", list, optional=True),
                device=o.get("device", str, optional=True),
                modules=o.get("modules", list, optional=True) or [],
            )
            _check(all(isinstance(m, str) for m in rec.modules),
                   f"manifest: object {rec.name!r} bad modules")
            _check(rec.status in OBJECT_STATUSES, f"manifest: object {rec.name!r} bad status")
            _check(rec.shape is None or all(isinstance(d, int) for d in rec.shape),
                   f"manifest: object {rec.name!r} bad shape")
            objects.append(rec)
        graph_blob = r.get("graph_blob", str)
        _check(graph_blob in blobs, "manifest: graph_blob is not among its blobs")
        snapshot_id = r.get("id", str)
        _check(SNAPSHOT_ID_RE.match(snapshot_id) is not None, "manifest: malformed id")
        signature = r.get("signature", dict, optional=True)
        if signature is not None:
            _check(all(isinstance(v, str) for v in signature.values()),
                   "manifest: signature fields must be strings")
        records = r.get("records", list)
        graph_ends = r.get("graph_ends", list)
        _check(all(isinstance(n, str) for n in records), "manifest: records must be names")
        _check(
            len(graph_ends) == len(records)
            and all(isinstance(e, int) and not isinstance(e, bool) for e in graph_ends)
            and all(a < b for a, b in zip([0, *graph_ends], graph_ends, strict=False)),
            "manifest: graph_ends must be increasing offsets, one per record",
        )
        history = r.get("history", list)
        _check(all(isinstance(h, str) for h in history), "manifest: history must hold strings")
        packages = [_package(raw, i, blobs)
                    for i, raw in enumerate(r.get("packages", list, optional=True) or [])]
        extra_paths = [_path(raw, i, blobs)
                       for i, raw in enumerate(r.get("extra_paths", list, optional=True) or [])]
        hash_seed = r.get("hash_seed", str, optional=True)
        _check(hash_seed is None or valid_hash_seed(hash_seed),
               "manifest: hash_seed is not a PYTHONHASHSEED (decimal, 0 to 4294967295)")
        return cls(
            snapshot_id=snapshot_id,
            workspace=r.get("workspace", str),
            created=r.get("created", str),
            graph_blob=graph_blob,
            objects=objects,
            storages=storages,
            blobs=blobs,
            records=records,
            graph_ends=graph_ends,
            name=r.get("name", str, optional=True),
            notebook=r.get("notebook", str, optional=True),
            execution_count=r.get("execution_count", int),
            totals=r.mapping("totals", int),
            timings=r.mapping("timings", (int, float)),
            fingerprint=r.get("fingerprint", dict),
            history=history,
            reason=r.get("reason", str, optional=True),
            blob_crc32c=crcs,
            signature=signature,
            format_version=version,
            packages=packages,
            hash_seed=hash_seed,
            extra_paths=extra_paths,
        )


def _package(data: Any, index: int, blobs: dict[str, int]) -> PackageRecord:
    """One entry of ``packages``: its blob listed, its file paths relative and plain."""
    p = _Reader(data, f"package #{index}")
    record = PackageRecord(
        name=p.get("name", str), version=p.get("version", str), blob=p.get("blob", str),
        files=p.get("files", list), location=p.get("location", str), python=p.get("python", str),
        tags=p.get("tags", list, optional=True) or [],
    )
    _check(record.blob in blobs, f"manifest: package {record.name!r} names unlisted blob")
    _check(all(isinstance(t, str) for t in record.tags), f"manifest: package {record.name!r} bad tags")
    _check(all(isinstance(f, str) and f and not f.startswith("/") and not {"\\", "\0"} & set(f)
               for f in record.files),
           f"manifest: package {record.name!r} has a file path that is not relative")
    return record


def _path(data: Any, index: int, blobs: dict[str, int]) -> PathRecord:
    """One entry of ``extra_paths``: an absolute normalized directory, its blob listed, one mode
    per file, every file path relative and inside it."""
    p = _Reader(data, f"extra path #{index}")
    record = PathRecord(path=p.get("path", str), blob=p.get("blob", str),
                        files=p.get("files", list), modes=p.get("modes", list))
    where = f"manifest: extra path {record.path!r}"
    _check(record.path.startswith("/") and posixpath.normpath(record.path) == record.path
           and "\0" not in record.path, f"{where} is not an absolute normalized path")
    _check(record.blob in blobs, f"{where} names unlisted blob")
    _check(len(record.modes) == len(record.files)
           and all(isinstance(m, int) and not isinstance(m, bool) and 0 <= m <= 0o7777
                   for m in record.modes), f"{where} has bad modes")
    _check(all(isinstance(f, str) and f and not f.startswith("/") and "\0" not in f
               and posixpath.normpath(f) == f and not f.startswith("..") for f in record.files),
           f"{where} has a file path that is not relative and inside it")
    return record


def _plain(record: Any) -> dict[str, Any]:
    """A manifest's record (a frozen dataclass of JSON values and lists of them) as a dict, its
    lists copied: what ``dataclasses.asdict`` makes, at a fraction of its cost (no deep copy
    of every value; a manifest holds thousands of records, and is encoded three times a
    commit)."""
    return {k: list(v) if type(v) is list else v for k, v in vars(record).items()}


def canonical_json(data: Any) -> bytes:
    """Deterministic JSON encoding used for signatures."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _check_digest(digest: str, version: int) -> None:
    """A blob name must be a digest of an algorithm its format version allows."""
    try:
        algorithm = algorithm_of(digest)
    except InvalidInputError:
        raise ManifestError(f"manifest: blob {digest!r} is not a digest") from None
    _check(algorithm in DIGESTS_BY_VERSION[version],
           f"manifest: blob {digest[:16]!r} is a {algorithm.name} digest, not allowed in "
           f"format_version {version}")


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ManifestError(message)


class _Reader:
    """Typed field access on untrusted JSON with ``ManifestError`` on every mismatch."""

    def __init__(self, data: Any, where: str):
        _check(isinstance(data, dict), f"{where}: expected an object")
        self.data = data
        self.where = where

    def get(self, key: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
        if key not in self.data or (optional and self.data[key] is None):
            _check(optional, f"{self.where}: missing field {key!r}")
            return None
        value = self.data[key]
        bad_bool = isinstance(value, bool) and kind is not bool
        _check(isinstance(value, kind) and not bad_bool, f"{self.where}: field {key!r} has a wrong type")
        return value

    def mapping(self, key: str, kind: type | tuple[type, ...]) -> dict[str, Any]:
        value = self.get(key, dict)
        for k, v in value.items():
            _check(isinstance(v, kind) and not isinstance(v, bool),
                   f"{self.where}: {key}[{k!r}] has a wrong type")
        return dict(value)
