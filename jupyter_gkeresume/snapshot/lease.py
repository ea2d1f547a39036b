"""Single-flight restore lease: one restore of a kernel session at a time, across tabs and pods.

The lease is built on the one atomic primitive every store offers, the create-only record (GCS:
a simple upload with ``ifGenerationMatch=0``; locally: a hard link). Replacing an object only if
it is unchanged is not available everywhere (fake-gcs-server ignores non-zero generation
preconditions), so a lease is a *chain* of records ``lease-{key}.0``, ``lease-{key}.1``, ... each
created once and never modified. The newest one, the head, says who holds the lease and until
when, or that it is free. Every state change creates the record after the head:

- acquire: allowed when there is no head, or the head is free or expired (a takeover);
- renew: the holder creates the next record with a later expiry;
- release: the holder creates the next record marked free.

Two callers that both saw the same head race to create the same next record; create-only lets
exactly one win. A holder whose lease expired and was taken over therefore learns it (its renew
raises ``LeaseHeldError`` naming the new holder) and never overwrites the new holder's record.

Finding the head costs O(log n) reads (probe 1, 2, 4, ... then bisect). Records are never deleted
while a chain is in use. A chain whose head is free or expired, and was written longer ago than
gc's grace period, is finished: ``finished_chains`` lists it and gc removes its records, oldest
first (so that a restore that starts meanwhile begins a new chain at epoch 0, which gc has
already passed; what remains racy is a restore of that same key starting during those few
deletions, hours after the last one ended).
Expiry compares wall clocks of different pods (NTP-synchronised on GKE): keep ``ttl`` well above
any clock skew, and renew (``hold`` does it) during long restores.

A record's contents are not trusted (anyone who can write the prefix can plant one): its epoch is
taken from its object name, never from its body; a record that does not parse reads as an
expired hold; its expiry counts for at most ``ttl`` after this caller first saw it (a planted
``expires_at: 1e300`` blocks a restore for one ``ttl``, not forever; every caller of a store uses
the same ``ttl``, at most ``MAX_TTL``), and gc counts it for at most ``MAX_TTL`` after it was
written; its holder text is shown escaped and quoted (``LeaseHeldError``).

Call order: ``acquire`` (or ``with lease.hold():``), the restore, ``release``.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace

from ..errors import CommitConflictError, InvalidInputError, LeaseHeldError
from .store import SnapshotStore

KEY_RE = re.compile(r"\A[a-z0-9][a-z0-9_-]{0,99}\Z")
RECORD_RE = re.compile(r"\Alease-(?P<key>[a-z0-9][a-z0-9_-]{0,99})\.(?P<epoch>[0-9]{1,12})\Z")
RECORD_PREFIX = "lease-"
DEFAULT_TTL = 120.0
MAX_TTL = 24 * 3600.0  # a lease is renewed every ttl/3: a longer ttl has no use
MAX_RACE_ROUNDS = 8


def default_holder() -> str:
    """Who is asking, as shown to the loser of a race: host and process."""
    return f"{socket.gethostname()} pid {os.getpid()}"


@dataclass(frozen=True)
class LeaseRecord:
    """One link of the chain."""

    epoch: int
    state: str  # "held" or "free"
    holder: str = ""
    token: str = ""
    expires_at: float = 0.0

    def live(self, now: float) -> bool:
        return self.state == "held" and now < self.expires_at

    def capped(self, latest: float) -> LeaseRecord:
        """This record with its expiry no later than ``latest``."""
        return replace(self, expires_at=min(self.expires_at, latest))

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, epoch: int) -> LeaseRecord:
        """The record stored under epoch ``epoch`` (from its name; the body's is ignored).
        ``ValueError``, ``KeyError`` or ``TypeError`` when it is not a lease record."""
        data = json.loads(raw)
        state, expires_at = data["state"], float(data.get("expires_at", 0.0))
        if state not in ("held", "free") or not math.isfinite(expires_at):
            raise ValueError(f"not a lease record: state {state!r}, expires_at {expires_at!r}")
        return cls(epoch, state, str(data.get("holder", "")), str(data.get("token", "")),
                   expires_at)


class RestoreLease:
    """The lease on ``key`` (e.g. a kernel id) in ``store``, as ``holder`` would hold it."""

    def __init__(self, store: SnapshotStore, key: str, holder: str | None = None, *,
                 ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.time):
        if not isinstance(key, str) or not KEY_RE.match(key):
            raise InvalidInputError(f"not a valid lease key: {key!r} (lowercase, digits, _-)")
        if not 0 < ttl <= MAX_TTL:
            raise InvalidInputError(f"lease ttl must be positive and at most {MAX_TTL:g} s: "
                                    f"{ttl!r}")
        self.store, self.key, self.ttl, self.clock = store, key, float(ttl), clock
        self.holder = holder or default_holder()
        self.token = secrets.token_hex(8)
        self.epoch: int | None = None  # epoch of our newest record while we hold the lease
        self.lost: LeaseHeldError | None = None  # set when a background renewal found a takeover
        self._first_seen: dict[int, float] = {}  # epoch -> when this caller first read it

    @property
    def held(self) -> bool:
        return self.epoch is not None

    def acquire(self, wait: float = 0.0, poll: float = 0.5) -> None:
        """Take the lease, waiting up to ``wait`` seconds for the current holder to release it
        or let it expire. Raises ``LeaseHeldError`` (holder, expiry) when it stays taken."""
        deadline = time.monotonic() + wait
        while True:
            try:
                self._advance(self._is_free_or_ours, "held")
                return
            except LeaseHeldError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(poll, left))

    def renew(self) -> None:
        """Push the expiry ``ttl`` from now; ``LeaseHeldError`` if the lease was taken over."""
        self._advance(self._is_ours, "held")

    def release(self) -> bool:
        """Mark the lease free; False when it was no longer ours (expired and taken over)."""
        if self.epoch is None:
            return False
        try:
            self._advance(self._is_ours, "free")
        except LeaseHeldError:
            self.epoch = None
            return False
        self.epoch = None
        return True

    def current(self) -> LeaseRecord | None:
        """The head of the chain (None when the lease was never taken)."""
        return self._head()

    @contextmanager
    def hold(self, wait: float = 0.0) -> Iterator[RestoreLease]:
        """Acquire, renew every ``ttl/3`` in the background, release on exit."""
        self.acquire(wait)
        stop = threading.Event()

        def keep_alive() -> None:
            while not stop.wait(self.ttl / 3):
                try:
                    self.renew()
                except LeaseHeldError as exc:
                    self.lost = exc
                    return
                except Exception:  # a transient store failure: try again next period
                    continue

        renewer = threading.Thread(target=keep_alive, name=f"lease-{self.key}", daemon=True)
        renewer.start()
        try:
            yield self
        finally:
            stop.set()
            renewer.join()
            self.release()

    # -- the chain ---------------------------------------------------------------------------
    def _is_ours(self, head: LeaseRecord | None) -> bool:
        """Our hold is the head (even past its expiry: nobody took it over)."""
        return head is not None and head.token == self.token and head.state == "held"

    def _is_free_or_ours(self, head: LeaseRecord | None) -> bool:
        return head is None or not head.live(self.clock()) or self._is_ours(head)

    def _advance(self, allowed: Callable[[LeaseRecord | None], bool], state: str) -> None:
        """Create the record after the head if ``allowed(head)``; retry when a racer won."""
        for _ in range(MAX_RACE_ROUNDS):
            head = self._head()
            if not allowed(head):
                raise LeaseHeldError(head.holder if head else "nobody", head.expires_at if head else 0)
            epoch = 0 if head is None else head.epoch + 1
            record = LeaseRecord(epoch, state, self.holder, self.token,
                                 self.clock() + self.ttl if state == "held" else 0.0)
            try:
                self.store.write_record(self._name(epoch), record.to_json(), create_only=True)
            except CommitConflictError:
                continue  # another caller created this link first: look again
            self.epoch = epoch if state == "held" else None
            return
        head = self._head()
        raise LeaseHeldError(head.holder if head else "unknown", head.expires_at if head else 0.0)

    def _name(self, epoch: int) -> str:
        return f"lease-{self.key}.{epoch}"

    def _read(self, epoch: int) -> LeaseRecord | None:
        """The record of ``epoch``, its expiry capped to ``ttl`` after this caller first saw it."""
        record = read_link(self.store, self._name(epoch), epoch)
        if record is None:
            return None
        return record.capped(self._first_seen.setdefault(epoch, self.clock()) + self.ttl)

    def _head(self) -> LeaseRecord | None:
        """The newest record: gallop 0, 1, 3, 7, ... to a missing epoch, then bisect."""
        start = self.epoch or 0  # our own newest record, when we hold the lease
        found = self._read(start)
        if found is None:
            return None if start == 0 else self._bisect(-1, start, None)
        low, step = found, 1
        while True:
            probe = self._read(low.epoch + step)
            if probe is None:
                return self._bisect(low.epoch, low.epoch + step, low)
            low, step = probe, step * 2

    def _bisect(self, low: int, high: int, low_record: LeaseRecord | None) -> LeaseRecord | None:
        """``low`` exists (or is -1), ``high`` does not: the last existing epoch between them."""
        while high - low > 1:
            middle = (low + high) // 2
            record = self._read(middle)
            if record is None:
                high = middle
            else:
                low, low_record = middle, record
        return low_record


def read_link(store: SnapshotStore, name: str, epoch: int) -> LeaseRecord | None:
    """One record of a chain, None when missing; an unreadable one reads as an expired hold
    (so that it can be taken over, and collected)."""
    raw = store.read_record(name)
    if raw is None:
        return None
    try:
        return LeaseRecord.from_json(raw, epoch)
    except (ValueError, KeyError, TypeError, RecursionError):
        return LeaseRecord(epoch, "held")


def finished_chains(store: SnapshotStore, *, now: float, grace_seconds: float) -> dict[str, list[str]]:
    """Lease chains nobody holds any more: ``{key: record names, oldest first}`` for each chain
    whose head is free or expired and was written at least ``grace_seconds`` before ``now``
    (its expiry counts for at most ``MAX_TTL`` after it was written)."""
    chains: dict[str, dict[int, float | None]] = {}
    for name, mtime in store.list_records(RECORD_PREFIX).items():
        match = RECORD_RE.match(name)
        if match:
            chains.setdefault(match["key"], {})[int(match["epoch"])] = mtime
    finished = {}
    for key, links in sorted(chains.items()):
        epoch = max(links)
        mtime = links[epoch]
        if mtime is None or now - mtime < grace_seconds:
            continue
        head = read_link(store, f"{RECORD_PREFIX}{key}.{epoch}", epoch)
        if head is None or head.capped(mtime + MAX_TTL).live(now) or read_link(
                store, f"{RECORD_PREFIX}{key}.{epoch + 1}", epoch + 1) is not None:
            continue  # held, or a new link appeared since the listing
        finished[key] = [f"{RECORD_PREFIX}{key}.{e}" for e in sorted(links)]
    return finished
