"""Signed workspace records (the paused record, the runtime settings): what their
signature binds, and the order of their writes kept on the user's volume.

Format: a record is a JSON object of its fields (which name their ``workspace``), ``record`` =
``{"kind", "name", "sequence"}`` and ``signature`` (``signing.signature_of``) over the canonical
JSON of all the rest. So the signature binds the record's kind, its name in the store, its
workspace and its place in the order of that record's
writes: ``open_record`` refuses one copied or moved under another name or into another
workspace, and ``RecordOrder`` one older than a record of that name seen here.

Order: ``RecordOrder(workspace)`` keeps, per record name, the highest sequence seen here, in
``{jupyter data dir}/gkeresume/record-sequences.json`` (beside ``key-ids.json``: on the user's
volume, never in the bucket; replaced atomically under a lock, as several processes of one user
share it). A record below it is a rollback: refused, with both numbers. ``spend`` (a resume
consumed the paused record, or a user discarded it) raises it past the record consumed, so that
record put back is refused too. A writer takes ``max(highest + 1, now in microseconds)``: above
every record this volume has seen and, on a new volume, above every record written before now.
A data dir that cannot be written costs the ordering only (as for ``remember_key``).

Records signed before the kind, name and sequence were bound (no ``record`` field) are read only
where the caller allows it (``legacy=True``: the paused record, so that a workspace paused by the
earlier version still resumes) and only while no record of that name was seen or spent here (its
sequence counts as 0): once a resume consumed it, it is refused like any spent record. Settings
signed the old way are refused (the defaults apply until a ``PUT settings``).

Call order: ``SignedRecords(store, key).read(name, what)`` -> fields or None; ``write(name,
fields)``; ``spend(name)`` instead of deleting a record that was acted on.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from jupyter_core.paths import jupyter_data_dir

from ..errors import IntegrityError, InvalidInputError, StoredRecordError
from ..printable import printable
from .format import canonical_json
from .signing import (
    SigningKey,
    check_signature,
    read_private_json,
    signature_of,
    write_private_json,
)

if TYPE_CHECKING:
    from .store import SnapshotStore

KINDS = ("paused", "settings")
ENVELOPE = "record"


def record_kind(name: str) -> str:
    """The kind of the record stored as ``name``: its name up to the first ``-``."""
    kind = name.split("-", 1)[0]
    if kind not in KINDS:
        raise InvalidInputError(f"not a signed record: {name!r} (kinds: {', '.join(KINDS)})")
    return kind


def now_sequence() -> int:
    """The sequence a writer with no history takes: the time in microseconds."""
    return time.time_ns() // 1000


def sign_record(name: str, data: dict[str, Any], key: SigningKey, *,
                sequence: int | None = None) -> bytes:
    """The record ``name`` as stored: ``data`` (naming its ``workspace``), the ``record``
    envelope (kind, name, ``sequence``, default ``now_sequence()``) and the signature over
    both."""
    envelope = {"kind": record_kind(name), "name": name,
                "sequence": now_sequence() if sequence is None else sequence}
    signed = {**data, ENVELOPE: envelope}
    return json.dumps({**signed, "signature": signature_of(canonical_json(signed), key)}).encode()


def open_record(raw: bytes, key: SigningKey, workspace: str, name: str, what: str, *,
                legacy: bool = False) -> tuple[dict[str, Any], int]:
    """``(fields, sequence)`` of the record ``name`` of ``workspace`` as ``sign_record`` wrote
    it with ``key`` (fields without the envelope and the signature). ``StoredRecordError``, its
    reason escaped for a log, when it is not JSON, unsigned, signed with another key, tampered,
    another workspace's, signed as another record (moved or copied), or signed the old way
    without ``legacy`` (then its sequence is 0)."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise StoredRecordError(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise StoredRecordError(f"{what} is not a JSON object")
    signature = data.pop("signature", None)
    try:
        check_signature(signature, canonical_json(data), key, what)
    except IntegrityError as exc:
        raise StoredRecordError(str(exc)) from None
    if data.get("workspace") != workspace:
        raise StoredRecordError(f"{what} belongs to workspace '{printable(data.get('workspace'))}', "
                                f"not '{workspace}'")
    envelope = data.pop(ENVELOPE, None)
    if envelope is None:
        if not legacy:
            raise StoredRecordError(f"{what} was signed by an earlier version (without its kind, "
                                    "name and sequence): refused; it is written anew")
        return data, 0
    expected = {"kind": record_kind(name), "name": name}
    signed_as = {k: envelope.get(k) for k in expected} if isinstance(envelope, dict) else None
    if signed_as != expected:
        raise StoredRecordError(f"{what} was signed as {printable(signed_as)}, found as "
                                f"{expected}: moved or copied here, refused")
    sequence = envelope.get("sequence")
    if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence < 1:
        raise StoredRecordError(f"{what} has no valid sequence")
    return data, sequence


def sequences_path() -> str:
    return os.path.join(jupyter_data_dir(), "gkeresume", "record-sequences.json")


class RecordOrder:
    """The highest sequence seen here of each record of ``workspace`` (see the module
    docstring)."""

    def __init__(self, workspace: str):
        self.workspace = workspace

    def highest(self, name: str) -> int:
        return _highest(_load().get(self.workspace), name)

    def check(self, name: str, sequence: int, what: str) -> None:
        """Accept ``sequence`` (then it is the highest seen) or raise ``StoredRecordError``:
        it is older than one seen, or already spent."""
        with self._update(name) as (highest, raise_to):
            if sequence < highest:
                raise StoredRecordError(
                    f"{what} is older than one this workspace already saw or acted on "
                    f"(sequence {sequence}, seen {highest}; kept in {sequences_path()}): a "
                    "record put back (rollback or replay), refused")
            raise_to(sequence)

    def next(self, name: str) -> int:
        """The sequence of a new record ``name`` (then the highest seen)."""
        with self._update(name) as (highest, raise_to):
            sequence = max(highest + 1, now_sequence())
            raise_to(sequence)
        return sequence

    def spend(self, name: str) -> None:
        """Every record ``name`` seen so far was acted on: refuse it from now on."""
        with self._update(name) as (highest, raise_to):
            raise_to(highest + 1)

    @contextlib.contextmanager
    def _update(self, name: str) -> Iterator[tuple[int, Callable[[int], None]]]:
        """``(highest, raise_to)`` under the file's lock; what ``raise_to`` set is written back
        (best effort) when the block ends without an error."""
        path = sequences_path()
        with _locked(path):
            table = _load()
            own = table.get(self.workspace)
            own = dict(own) if isinstance(own, dict) else {}
            highest = _highest(own, name)
            wanted = [highest]
            yield highest, lambda value: wanted.append(max(value, wanted[-1]))
            if wanted[-1] != highest:
                table[self.workspace] = {**own, name: wanted[-1]}
                write_private_json(path, table)


def _highest(own: Any, name: str) -> int:
    """The number kept for ``name`` in a workspace's entry (0: none, or not a number)."""
    value = own.get(name) if isinstance(own, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _load() -> dict[str, Any]:
    return read_private_json(sequences_path())


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """An exclusive lock beside ``path`` (none where the directory cannot be written)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class SignedRecords:
    """The signed records of one store, signed with ``key()`` (called on first use) and ordered
    by ``RecordOrder``. ``read`` is None when the record does not exist; a record that is not
    valid raises ``StoredRecordError``; an unreachable store raises the store's ``StoreError``."""

    def __init__(self, store: SnapshotStore, key: Callable[[], SigningKey]):
        self.store = store
        self.key = key
        self.order = RecordOrder(store.workspace)

    def read(self, name: str, what: str, *, legacy: bool = False) -> dict[str, Any] | None:
        raw = self.store.read_record(name)
        if raw is None:
            return None
        data, sequence = open_record(raw, self.key(), self.store.workspace, name, what,
                                     legacy=legacy)
        self.order.check(name, sequence, what)
        return data

    def write(self, name: str, data: dict[str, Any]) -> None:
        key = self.key()  # before the sequence: a key that cannot be loaded costs no number
        self.store.write_record(name, sign_record(name, data, key,
                                                  sequence=self.order.next(name)))

    def spend(self, name: str) -> None:
        """The record was acted on (a resume consumed it, a user discarded it): it is deleted,
        and it, or any older one, put back is refused."""
        self.order.spend(name)
        self.store.delete_record(name)
