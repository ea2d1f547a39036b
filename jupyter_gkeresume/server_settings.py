"""Runtime settings of one workspace's server, kept in the store (``records/settings.json``).

The lab sets them (``PUT /gkeresume/api/settings``, e.g. "Do not checkpoint on shutdown" in
the first resume dialog); they live in the store so that a restarted server, with no lab open,
honours them. A setting never stored takes its ``c.GkeResume`` trait as default.
``SettingsRecords`` owns the format: ``read`` (the defaults when there is none; a
``StoredRecordError`` when it is corrupt, unsigned, tampered, another workspace's, moved, signed
by the earlier version or older than one seen here: the caller logs it and keeps the defaults),
``write`` (signed with the workspace key over the settings, the workspace id, its kind, name and
sequence, ``records.SignedRecords``: neither a planted record nor an older one put back can turn
the shutdown checkpoint off). ``parse_changes`` checks what a client sends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from .errors import InvalidInputError, StoredRecordError
from .snapshot import SigningKey, SnapshotStore
from .snapshot.records import SignedRecords

SETTINGS_RECORD = "settings"
FIELDS: dict[str, type] = {"checkpoint_on_shutdown": bool}


@dataclass(frozen=True)
class ServerSettings:
    checkpoint_on_shutdown: bool = True

    def with_changes(self, changes: dict[str, Any]) -> ServerSettings:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_changes(body: Any) -> dict[str, Any]:
    """The settings a client changes: at least one known field, each of its type."""
    if not isinstance(body, dict) or not body:
        raise InvalidInputError(f"settings: give one or more of {', '.join(FIELDS)}")
    for name, value in body.items():
        if name not in FIELDS:
            raise InvalidInputError(f"settings: unknown field {name!r} (known: "
                                    f"{', '.join(FIELDS)})")
        if not isinstance(value, FIELDS[name]):
            raise InvalidInputError(f"settings: {name!r} must be a {FIELDS[name].__name__}")
    return dict(body)


class SettingsRecords:
    """The stored settings of one store, signed with ``key()`` (called on first use)."""

    def __init__(self, store: SnapshotStore, key: Callable[[], SigningKey]):
        self.store = store
        self.signed = SignedRecords(store, key)

    def read(self, defaults: ServerSettings) -> ServerSettings:
        data = self.signed.read(SETTINGS_RECORD, "settings record")
        if data is None:
            return defaults
        del data["workspace"]
        try:
            return defaults.with_changes(parse_changes(data))
        except InvalidInputError as exc:
            raise StoredRecordError(f"settings record: {exc}") from None

    def write(self, settings: ServerSettings) -> None:
        data = {"workspace": self.store.workspace, **settings.to_dict()}
        self.signed.write(SETTINGS_RECORD, data)
