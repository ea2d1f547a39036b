"""The paused record: the store's note that this workspace is paused, and in which snapshots.

``PausedRecord`` is the format (one ``PausedKernel`` per kernel, ``from_dict``/``to_dict``);
``PausedRecords(store, key)`` is the one way to read, write and delete it (the orchestrator, the
pause and resume operations, retention/gc and ``jupyter gkeresume rm`` all go through it). The
pause writes it before the release; the server reads it at start; a resume from it deletes it once
every kernel is ``ready``.

Invariants: the stored record is signed with the workspace key over its fields, its workspace
id, its kind and name and its sequence (``records.SignedRecords``); ``PausedRecords.read``
verifies it before anything else, so an unsigned, tampered, foreign (another key, another
workspace), moved or older record never names a snapshot to restore. ``delete`` spends the
record: once a resume consumed it (or a user discarded it), it put back is refused. A record
signed by the earlier version (no kind, name or sequence) is still read until this volume sees
a newer one, so a workspace paused before the upgrade resumes. A record is read strictly
(``RECORD_VERSION``, every snapshot id valid, ``saved`` a list of names, every notebook path
safe); anything else is a ``StoredRecordError`` naming the field or the signature problem, and
its readers treat such a record as absent (``protected_ids`` protects nothing by it; the
server logs it and lets a pause write a new one). A notebook path from the record reaches the
sessions API only through ``safe_notebook_path``.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from .errors import GkeResumeError, StoredRecordError
from .snapshot.format import valid_hash_seed, validate_snapshot_id
from .snapshot.records import SignedRecords
from .snapshot.signing import SigningKey
from .snapshot.store import SnapshotStore

RECORD_VERSION = 1
RECORD_NAME = "paused"


def _require_names(value: Any, field_name: str) -> list[str]:
    """``value`` when it is a list of names, else the record is refused."""
    if not (isinstance(value, list) and all(isinstance(n, str) for n in value)):
        raise StoredRecordError(f"paused record: {field_name!r} is not a list of names")
    return value


@dataclass(frozen=True)
class PausedKernel:
    """One kernel of a pause: where its snapshot is and what it saved (``saved=None``: unknown)."""

    snapshot_id: str
    kernel_id: str | None = None
    kernel_name: str | None = None
    notebook: str | None = None
    bytes_total: int = 0
    bytes_new: int = 0
    saved: list[str] | None = None
    skipped: list[dict[str, Any]] = field(default_factory=list)
    hash_seed: str | None = None  # the snapshot's PYTHONHASHSEED (None: random, or not known)
    modules: list[str] = field(default_factory=list)  # the names in ``saved`` bound to modules

    @classmethod
    def from_dict(cls, data: Any) -> PausedKernel:
        if not isinstance(data, dict) or not isinstance(data.get("snapshot_id"), str):
            raise StoredRecordError("paused record: 'kernels' is not a list of kernel entries")
        try:
            validate_snapshot_id(data["snapshot_id"])
        except GkeResumeError as exc:
            raise StoredRecordError(f"paused record: {exc}") from None
        for name in ("kernel_id", "kernel_name", "notebook"):
            if not isinstance(data.get(name), (str, type(None))):
                raise StoredRecordError(f"paused record: {name!r} is not a string")
        for name in ("bytes_total", "bytes_new"):
            if not isinstance(data.get(name, 0), int):
                raise StoredRecordError(f"paused record: {name!r} is not a number")
        _require_names(data.get("saved", []), "saved")
        skipped = data.get("skipped", [])
        if not (isinstance(skipped, list) and all(isinstance(s, dict) for s in skipped)):
            raise StoredRecordError("paused record: 'skipped' is not a list of objects")
        if data.get("notebook") is not None:
            safe_notebook_path(data["notebook"])
        seed = data.get("hash_seed")
        if seed is not None and not valid_hash_seed(seed):
            raise StoredRecordError("paused record: 'hash_seed' is not a PYTHONHASHSEED")
        modules = _require_names(data.get("modules", []), "modules")
        return cls(data["snapshot_id"], data.get("kernel_id"), data.get("kernel_name"),
                   data.get("notebook"), data.get("bytes_total", 0), data.get("bytes_new", 0),
                   data.get("saved"), skipped, seed, modules)

    def to_dict(self) -> dict[str, Any]:
        """As stored; ``saved`` and ``hash_seed`` only when known (a record without them means
        "not known", as older records say)."""
        data = asdict(self)
        for name in ("saved", "hash_seed"):
            if data[name] is None:
                del data[name]
        return data


@dataclass(frozen=True)
class PausedRecord:
    """The record of one pause (JSON in the store, and the status's ``paused``)."""

    workspace: str
    paused_at: str
    reason: str | None
    release_backend: str
    gpus: int
    kernels: list[PausedKernel]
    version: int = RECORD_VERSION
    not_saved: list[dict[str, Any]] = field(default_factory=list)
    """Kernels the pause could not save (shutdown checkpoint): kernel_id, notebook, reason."""
    documents: dict[str, Any] | None = None
    """What the connected labs saved before the pause (``lab_saves.SaveReport.to_dict``)."""
    idle: dict[str, Any] | None = None
    """An idle pause: nobody was active ``since`` (ISO 8601 UTC) for ``seconds``, the
    ``timeout`` (``idle.IdleWatcher.note``); None for any other pause."""

    @classmethod
    def new(cls, workspace: str, reason: str | None, release_backend: str, gpus: int,
            kernels: list[PausedKernel], not_saved: list[dict[str, Any]] | None = None,
            documents: dict[str, Any] | None = None,
            idle: dict[str, Any] | None = None) -> PausedRecord:
        """A record stamped now."""
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return cls(workspace, now, reason, release_backend, gpus, kernels,
                   not_saved=list(not_saved or []), documents=documents, idle=idle)

    @property
    def bytes_total(self) -> int:
        """The bytes of every kernel's snapshot: what a resume of the whole record reads."""
        return sum(k.bytes_total for k in self.kernels)

    @classmethod
    def from_dict(cls, data: Any) -> PausedRecord:
        """The record from its stored fields (signature already checked), strictly."""
        if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
            raise StoredRecordError("paused record has an unknown version")
        for name, kind in (("workspace", str), ("paused_at", str), ("release_backend", str),
                           ("reason", (str, type(None))), ("gpus", int), ("kernels", list)):
            if not isinstance(data.get(name), kind) or isinstance(data.get(name), bool):
                raise StoredRecordError(f"paused record: {name!r} is missing or of the wrong type")
        not_saved = data.get("not_saved", [])
        if not (isinstance(not_saved, list) and all(isinstance(n, dict) for n in not_saved)):
            raise StoredRecordError("paused record: 'not_saved' is not a list of objects")
        documents = data.get("documents")
        if documents is not None and not isinstance(documents, dict):
            raise StoredRecordError("paused record: 'documents' is not an object")
        idle = data.get("idle")
        if idle is not None and not (
                isinstance(idle, dict) and set(idle) == {"since", "seconds", "timeout"}
                and isinstance(idle["since"], str)
                and all(isinstance(idle[n], (int, float)) and not isinstance(idle[n], bool)
                        for n in ("seconds", "timeout"))):
            raise StoredRecordError("paused record: 'idle' is not {since, seconds, timeout}")
        return cls(data["workspace"], data["paused_at"], data.get("reason"), data["release_backend"],
                   data["gpus"], [PausedKernel.from_dict(k) for k in data["kernels"]],
                   not_saved=not_saved, documents=documents, idle=idle)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kernels": [k.to_dict() for k in self.kernels]}

    def snapshot_ids(self) -> frozenset[str]:
        return frozenset(k.snapshot_id for k in self.kernels)

    def keeping(self, indices: set[int]) -> PausedRecord:
        """The record of the kernels at ``indices`` only (what did not come back)."""
        return replace(self, kernels=[k for i, k in enumerate(self.kernels) if i in indices])

    def carried_into(self, items: list[PausedKernel]) -> list[PausedKernel]:
        """``items`` (a new pause) and this record's kernels of the other notebooks: a pause
        after a partial resume keeps what has not come back yet."""
        notebooks = {k.notebook for k in items}
        return items + [k for k in self.kernels if k.notebook is None or k.notebook not in notebooks]

    def paused_since(self) -> datetime | None:
        try:
            return datetime.fromisoformat(self.paused_at.replace("Z", "+00:00"))
        except ValueError:
            return None


class PausedRecords:
    """The paused record of one store, signed with ``key()`` (called on first use): ``read``
    (``None`` when there is none), ``write``, ``delete`` (spends it). A corrupt, unsigned,
    tampered, foreign, moved, older or spent record raises ``StoredRecordError``; an unreachable
    store raises the store's ``StoreError``."""

    def __init__(self, store: SnapshotStore, key: Callable[[], SigningKey]):
        self.signed = SignedRecords(store, key)

    def read(self) -> PausedRecord | None:
        data = self.signed.read(RECORD_NAME, "paused record", legacy=True)
        return None if data is None else PausedRecord.from_dict(data)

    def write(self, record: PausedRecord) -> None:
        self.signed.write(RECORD_NAME, record.to_dict())

    def delete(self) -> None:
        """The record was acted on (resumed, discarded, superseded by nothing): removed, and
        refused if it comes back."""
        self.signed.spend(RECORD_NAME)

    def protected_ids(self) -> frozenset[str]:
        """The snapshot ids a paused workspace needs (empty when nothing is paused, and when the
        stored record is not valid: a planted record must not make snapshots undeletable)."""
        try:
            record = self.read()
        except StoredRecordError:
            return frozenset()
        return record.snapshot_ids() if record else frozenset()


def safe_notebook_path(path: str) -> str:
    """A notebook path from the store, checked before it reaches the sessions API."""
    norm = posixpath.normpath(path)
    if os.path.isabs(norm) or norm.startswith("..") or "\\" in norm or any(c < " " for c in norm):
        raise StoredRecordError(f"paused record names an unsafe notebook path: {path!r}")
    return norm
