"""The paused record: the store's note that this workspace is paused, and in which snapshots.

The pause flow writes it (``make_record``) before the release; the orchestrator reads it back at
startup (``parse_record``); the resume flow brings back each kernel it lists and deletes it once
every one is ``ready``. Plain functions on plain dicts: the record is JSON in the store.

Invariants: a record is read strictly (``RECORD_VERSION``, every snapshot id valid, ``saved`` a
list of names, every notebook path safe), anything else is an ``InvalidInputError`` naming the
field; a notebook path from the record reaches the sessions API only through
``safe_notebook_path``.
"""

from __future__ import annotations

import json
import os
import posixpath
from datetime import datetime, timezone
from typing import Any

from .errors import InvalidInputError
from .snapshot.format import validate_snapshot_id

RECORD_VERSION = 1


def make_record(workspace: str, reason: str | None, release_backend: str, gpus: int,
                kernels: list[dict[str, Any]]) -> dict[str, Any]:
    """A new paused record, stamped now: ``kernels`` are the pause's items, one per kernel."""
    return {"version": RECORD_VERSION, "workspace": workspace,
            "paused_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "reason": reason, "release_backend": release_backend, "gpus": gpus, "kernels": kernels}


def parse_record(raw: bytes) -> dict[str, Any]:
    """The paused record, strictly: anything else is a ``InvalidInputError`` naming the field."""
    try:
        record = json.loads(raw)
    except ValueError as exc:
        raise InvalidInputError(f"paused record is not JSON: {exc}") from None
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
        raise InvalidInputError("paused record has an unknown version")
    kernels = record.get("kernels")
    if not isinstance(kernels, list) or not all(
        isinstance(k, dict) and isinstance(k.get("snapshot_id"), str) for k in kernels
    ):
        raise InvalidInputError("paused record: 'kernels' is not a list of kernel entries")
    for k in kernels:
        validate_snapshot_id(k["snapshot_id"])
        saved = k.get("saved", [])
        if not (isinstance(saved, list) and all(isinstance(n, str) for n in saved)):
            raise InvalidInputError("paused record: 'saved' is not a list of names")
        if k.get("notebook") is not None:
            safe_notebook_path(k["notebook"])
    return record


def safe_notebook_path(path: str) -> str:
    """A notebook path from the store, checked before it reaches the sessions API."""
    norm = posixpath.normpath(path)
    if os.path.isabs(norm) or norm.startswith("..") or "\\" in norm or any(c < " " for c in norm):
        raise InvalidInputError(f"paused record names an unsafe notebook path: {path!r}")
    return norm
