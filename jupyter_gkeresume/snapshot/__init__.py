"""Snapshot format v1, store, signing, fingerprint and compatibility (no torch import here).

Call order for a writer: ``SnapshotWriter`` (``writer``). For a reader: ``resolve`` a reference,
then ``load_manifest`` (``manifests``: the one reader, signature checked).
"""

from .catalog import SnapshotSummary, list_snapshots, new_snapshot_id, resolve
from .compat import Verdict, check_compatible
from .fingerprint import environment_fingerprint
from .format import FORMAT_VERSION, Manifest, ObjectRecord, StorageRef
from .manifests import StoredManifest, load_manifest, newest_verified, read_manifest, scan_manifests
from .signing import SigningKey, load_signing_key, sign, verify
from .store import SnapshotStore
from .verify import VerifyReport, verify_snapshot
from .writer import VERIFY_MODES, SnapshotWriter, verify_committed

__all__ = [
    "FORMAT_VERSION", "VERIFY_MODES", "Manifest", "ObjectRecord", "SigningKey", "SnapshotStore",
    "SnapshotSummary", "SnapshotWriter", "StorageRef", "StoredManifest", "Verdict", "VerifyReport",
    "check_compatible", "environment_fingerprint", "list_snapshots", "load_manifest",
    "load_signing_key", "new_snapshot_id", "newest_verified", "read_manifest", "resolve",
    "scan_manifests", "sign", "verify", "verify_committed", "verify_snapshot",
]
