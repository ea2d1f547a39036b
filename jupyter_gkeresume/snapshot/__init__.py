"""Snapshot format v1, store, signing, fingerprint and compatibility (no torch import here).

Call order for a writer: ``SnapshotWriter`` (``writer``). For a reader: ``resolve`` a reference,
then ``load_manifest`` (``manifests``: the one reader, signature checked).

The names below are loaded on first use (PEP 562): importing one light submodule (``format``,
``fingerprint``) from a kernel's start does not import the store and its GCS stack (issue 31).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each public name and the submodule that defines it.
_EXPORTS = {
    "SnapshotSummary": "catalog", "list_snapshots": "catalog", "new_snapshot_id": "catalog",
    "resolve": "catalog",
    "Verdict": "compat", "check_compatible": "compat",
    "environment_fingerprint": "fingerprint",
    "FORMAT_VERSION": "format", "Manifest": "format", "ObjectRecord": "format",
    "StorageRef": "format",
    "StoredManifest": "manifests", "load_manifest": "manifests", "newest_verified": "manifests",
    "read_manifest": "manifests", "scan_manifests": "manifests",
    "SigningKey": "signing", "load_signing_key": "signing", "sign": "signing", "verify": "signing",
    "SnapshotStore": "store",
    "VerifyReport": "verify", "verify_snapshot": "verify",
    "VERIFY_MODES": "writer", "SnapshotWriter": "writer", "verify_committed": "writer",
}

__all__ = [
    "FORMAT_VERSION", "VERIFY_MODES", "Manifest", "ObjectRecord", "SigningKey", "SnapshotStore",
    "SnapshotSummary", "SnapshotWriter", "StorageRef", "StoredManifest", "Verdict", "VerifyReport",
    "check_compatible", "environment_fingerprint", "list_snapshots", "load_manifest",
    "load_signing_key", "new_snapshot_id", "newest_verified", "read_manifest", "resolve",
    "scan_manifests", "sign", "verify", "verify_committed", "verify_snapshot",
]  # the same names as _EXPORTS (tests/test_kernel_start.py)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next look-up is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:
    from .catalog import SnapshotSummary, list_snapshots, new_snapshot_id, resolve
    from .compat import Verdict, check_compatible
    from .fingerprint import environment_fingerprint
    from .format import FORMAT_VERSION, Manifest, ObjectRecord, StorageRef
    from .manifests import (
        StoredManifest,
        load_manifest,
        newest_verified,
        read_manifest,
        scan_manifests,
    )
    from .signing import SigningKey, load_signing_key, sign, verify
    from .store import SnapshotStore
    from .verify import VerifyReport, verify_snapshot
    from .writer import VERIFY_MODES, SnapshotWriter, verify_committed
