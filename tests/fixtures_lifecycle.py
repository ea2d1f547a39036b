"""Fixtures for lifecycle tests: a local store, a signing key, and committed test snapshots.

``make_snapshot(store, key, payloads=[b"..."], ...)`` writes each payload as its own blob (one
uint8 entry), a small graph blob, then a signed manifest, following the commit protocol (blobs
first, manifest last) with the snapshot package itself: the same path the kernel's capture uses.
"""

from __future__ import annotations

import itertools
import os
from datetime import datetime, timedelta, timezone

import pytest

from jupyter_gkeresume.snapshot import Manifest, ObjectRecord, SigningKey, SnapshotStore, StorageRef
from jupyter_gkeresume.snapshot.blobfile import blob_digest, layout_for
from jupyter_gkeresume.snapshot.signing import sign

BASE_TIME = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
_serial = itertools.count()


def put_blob(store: SnapshotStore, *entries: bytes) -> tuple[str, int]:
    """Write one blob made of ``entries``; returns ``(digest, size)``."""
    layout = layout_for([("uint8", len(e)) for e in entries])
    digest = blob_digest(layout, entries)
    store.write_blob(digest, [layout.header, *entries])
    return digest, layout.size


#: ``tiny`` 1.0's files, as a snapshot carries them (``put_blob(store, *TINY_1_0.values())``).
TINY_1_0 = {"tiny/__init__.py": b"VERSION = '1.0'\n",
            "tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n"}


def tiny_site(site, *extra: str) -> None:
    """``tiny`` 0.9 installed in the directory ``site`` (``extra``: more empty modules of it, in
    its RECORD)."""
    (site / "tiny").mkdir(parents=True)
    (site / "tiny" / "__init__.py").write_text("VERSION = '0.9'\n")
    for name in extra:
        (site / "tiny" / name).write_text("")
    info = site / "tiny-0.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny\nVersion: 0.9\n")
    files = ["tiny/__init__.py", *(f"tiny/{name}" for name in extra),
             "tiny-0.9.dist-info/METADATA", "tiny-0.9.dist-info/RECORD"]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))


def make_snapshot(
    store: SnapshotStore,
    key: SigningKey | None,
    payloads: list[bytes] = (b"payload",),
    *,
    name: str | None = None,
    when: datetime | None = None,
    fingerprint: dict | None = None,
    modules: dict[str, list[str]] | None = None,
    device: str = "cpu",
    history: list[str] | None = None,
    notebook: str | None = None,
) -> Manifest:
    """Commit a snapshot holding one object ``x{i}`` per payload; unsigned when ``key`` is None.

    ``when`` sets the id's timestamp (default: a fresh second after ``BASE_TIME`` per call, so
    ids sort in call order); ``modules`` maps object names to the modules their pickle needs.
    """
    when = when or BASE_TIME + timedelta(seconds=next(_serial))
    snapshot_id = f"{when:%Y%m%dT%H%M%SZ}-{next(_serial) % 0xFFFFFF:06x}"
    blobs, storages, objects = {}, {}, []
    for i, payload in enumerate(payloads):
        digest, size = put_blob(store, payload)
        blobs[digest] = size
        storages[f"s{i}"] = StorageRef(digest, 0, len(payload), "uint8", device, "numpy",
                                       f"x{i}")
        objects.append(ObjectRecord(
            name=f"x{i}", type="numpy.ndarray", status="saved", bytes=len(payload),
            device=device, modules=(modules or {}).get(f"x{i}", ["numpy"]),
        ))
    graph = b"graph:" + snapshot_id.encode()
    graph_digest, graph_size = put_blob(store, graph)
    blobs[graph_digest] = graph_size
    manifest = Manifest(
        snapshot_id=snapshot_id, workspace=store.workspace, created=when.isoformat(),
        graph_blob=graph_digest, objects=objects, storages=storages, blobs=blobs,
        records=[o.name for o in objects], graph_ends=list(range(1, len(objects) + 1)),
        name=name, fingerprint=fingerprint or {}, history=history or [], notebook=notebook,
    )
    if key is not None:
        sign(manifest, key)
    store.commit_manifest(snapshot_id, manifest.to_json())
    return manifest


@pytest.fixture
def signing_key() -> SigningKey:
    return SigningKey(b"lifecycle-test-key-0123456789abcdef")


@pytest.fixture
def local_store(tmp_path) -> SnapshotStore:
    return SnapshotStore(str(tmp_path / "store"), "ws-lifecycle")


@pytest.fixture
def advised(monkeypatch):
    """The paths ``posix_fadvise`` was asked about, and with which advice (the real call runs)."""
    calls: list[tuple[str, int]] = []
    real = os.posix_fadvise

    def recording(fd, offset, length, advice):
        calls.append((os.readlink(f"/proc/self/fd/{fd}"), advice))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", recording)
    return calls
