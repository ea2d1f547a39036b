"""Full verification of one committed snapshot, without loading anything from it.

``verify_snapshot`` reads the manifest through ``manifests.read_manifest`` (which sees unsigned
ones too: this is where a user is told why a snapshot is refused), then streams every blob it
references through ``blobfile.read_verified`` (size, safetensors header, digest by the
algorithm its name says) and checks that every storage and the graph records point inside the
blobs. It never unpickles: verifying an untrusted snapshot is safe. Every problem found is
listed (not just the first); ``VerifyReport.ok`` is the verdict.

A snapshot signed with an earlier key of this workspace is verified with that key
(``signing.key_of_workspace``); no signature problem is ever waived.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import IntegrityError, NotFoundInStore
from .blobfile import BlobLayout, read_verified
from .format import Manifest
from .manifests import read_manifest
from .signing import SigningKey
from .store import SnapshotStore

#: ``progress(done_bytes, total_bytes)`` after each blob.
VerifyProgress = Callable[[int, int], None]


@dataclass
class VerifyReport:
    """``signature`` is ``valid`` or what is wrong with it."""

    snapshot_id: str
    signature: str = "not checked"
    problems: list[str] = field(default_factory=list)
    blobs_checked: int = 0
    bytes_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.snapshot_id, "ok": self.ok, "signature": self.signature,
            "problems": self.problems, "blobs_checked": self.blobs_checked,
            "bytes_checked": self.bytes_checked,
        }


def verify_snapshot(
    store: SnapshotStore,
    snapshot_id: str,
    key: SigningKey,
    *,
    progress: VerifyProgress | None = None,
) -> VerifyReport:
    """Check everything about ``snapshot_id`` (see the module docstring); never raises for a
    bad snapshot, only for a store that cannot be read (``StoreError``)."""
    report = VerifyReport(snapshot_id)
    try:
        stored = read_manifest(store, snapshot_id, key)
    except NotFoundInStore:
        report.problems.append(f"snapshot {snapshot_id} has no manifest (not committed)")
        return report
    manifest = stored.manifest
    if manifest is None:
        report.problems.append(stored.unreadable or "unreadable")
        return report
    report.problems.extend(stored.identity)
    if stored.signature is None:
        report.signature = "valid"
    else:
        report.signature = stored.signature
        report.problems.append(f"{stored.signature}: refused (if an earlier key of this "
                               "workspace signed it, verify with that key: --key-file OLD)")
    layouts = _check_blobs(store, manifest, report, progress)
    _check_references(manifest, layouts, report)
    return report


def _check_blobs(
    store: SnapshotStore, manifest: Manifest, report: VerifyReport,
    progress: VerifyProgress | None,
) -> dict[str, BlobLayout]:
    total = manifest.total_bytes
    layouts = {}
    for digest, size in sorted(manifest.blobs.items()):
        try:
            with store.open_blob(digest) as (f, stored_size):
                if stored_size != size:
                    report.problems.append(
                        f"blob {digest[:12]} holds {stored_size} bytes, the manifest says {size}"
                    )
                else:
                    layouts[digest] = read_verified(f, digest, size, lambda i, n: None)
        except NotFoundInStore:
            report.problems.append(f"blob {digest[:12]} is missing")
        except IntegrityError as exc:
            report.problems.append(str(exc))
        report.blobs_checked += 1
        report.bytes_checked += size
        if progress:
            progress(report.bytes_checked, total)
    return layouts


def _check_references(
    manifest: Manifest, layouts: dict[str, BlobLayout], report: VerifyReport
) -> None:
    """Storages and graph records must point inside their (verified) blobs."""
    for key, ref in sorted(manifest.storages.items()):
        layout = layouts.get(ref.blob)
        if layout is None:
            continue  # the blob itself was already reported
        if ref.entry >= len(layout.entry_sizes) or ref.nbytes > layout.entry_sizes[ref.entry]:
            report.problems.append(f"storage {key} points outside blob {ref.blob[:12]}")
    graph = layouts.get(manifest.graph_blob)
    ends = manifest.graph_ends
    if graph is not None and ends and ends[-1] > sum(graph.entry_sizes):
        report.problems.append("graph records point past the end of the graph blob")
