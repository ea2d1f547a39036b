"""Snapshot format v1, store, signing, fingerprint and compatibility (no torch import here)."""

from .catalog import SnapshotSummary, list_snapshots, load_manifest, new_snapshot_id, resolve
from .compat import Verdict, check_compatible
from .fingerprint import environment_fingerprint
from .format import FORMAT_VERSION, Manifest, ObjectRecord, StorageRef
from .signing import SigningKey, load_signing_key, sign, verify
from .store import SnapshotStore

__all__ = [
    "FORMAT_VERSION", "Manifest", "ObjectRecord", "SigningKey", "SnapshotStore", "SnapshotSummary",
    "StorageRef", "Verdict", "check_compatible", "environment_fingerprint", "list_snapshots",
    "load_manifest", "load_signing_key", "new_snapshot_id", "resolve", "sign", "verify",
]
