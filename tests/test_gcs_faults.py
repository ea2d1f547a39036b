"""The store against a GCS API that fails: 503s, dropped connections, lost replies, a server killed
in the middle of an upload. Either the operation succeeds after bounded retries, or it fails with a
clean StoreError; a partial blob or manifest is never visible."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_gcs_store import CHUNK, make_blob, read_back

from jupyter_gkeresume.errors import CommitConflictError, StoreError
from jupyter_gkeresume.snapshot import checksum
from jupyter_gkeresume.snapshot.store import SnapshotStore

SID = "20260101T000000Z-abcdef"


def store_on(faulty) -> SnapshotStore:
    b = faulty.bucket
    return SnapshotStore(b.url, "ws", b.storage_options, chunk_bytes=CHUNK)


def content(parts) -> bytes:
    return b"".join(bytes(p) for p in parts[1:])


def test_503_for_a_while_is_retried(gcs_faulty):
    store = store_on(gcs_faulty)
    digest, parts, _ = make_blob(3 * CHUNK + 10)
    gcs_faulty.proxy.inject("status", count=2, match="uploadType=resumable", status=503)
    gcs_faulty.proxy.inject("status", count=1, match="upload_id=", status=429)
    store.write_blob(digest, parts)
    gcs_faulty.proxy.inject("status", count=2, match="GET", status=500)
    assert read_back(store, digest) == content(parts)
    outcomes = gcs_faulty.proxy.outcomes()
    assert outcomes.count("injected 503") == 2 and outcomes.count("injected 429") == 1
    assert outcomes.count("injected 500") == 2


def test_streamed_read_survives_errors_and_a_cut_download(gcs_faulty):
    """Big reads stream into the caller's buffer; a 500 is retried, and a download cut in the
    middle resumes after the bytes already received."""
    store = store_on(gcs_faulty)
    digest, parts, _ = make_blob(3 << 20, 5 << 20)
    store.write_blob(digest, parts)
    gcs_faulty.proxy.inject("status", count=1, match="GET /download", status=500)
    gcs_faulty.proxy.inject("cut_response", count=2, match="GET /download", after_bytes=700_000)
    assert read_back(store, digest) == content(parts)
    outcomes = gcs_faulty.proxy.outcomes("GET /download")
    assert outcomes.count("injected 500") == 1 and outcomes.count("cut response 206") == 2


def test_connection_dropped_mid_chunk_is_retried(gcs_faulty):
    store = store_on(gcs_faulty)
    digest, parts, _ = make_blob(3 * CHUNK)
    gcs_faulty.proxy.inject("drop_request", count=2, match="upload_id=", after_bytes=100_000)
    store.write_blob(digest, parts)
    assert read_back(store, digest) == content(parts)
    assert gcs_faulty.proxy.outcomes().count("dropped request") == 2


def test_lost_reply_to_a_chunk_never_leaves_a_corrupt_blob(gcs_faulty):
    """The chunk landed but its reply was lost; gcsfs sends it again. (fake-gcs-server then
    appends it twice: the size check catches that and the whole upload restarts.)"""
    store = store_on(gcs_faulty)
    digest, parts, size = make_blob(3 * CHUNK)
    gcs_faulty.proxy.inject("drop_response", count=1, match="upload_id=")
    store.write_blob(digest, parts)
    assert store.has_blob(digest, size)
    assert read_back(store, digest) == content(parts)


def test_lost_reply_to_the_commit_is_not_a_conflict(gcs_faulty):
    store = store_on(gcs_faulty)
    gcs_faulty.proxy.inject("drop_response", count=1, match="uploadType=multipart")
    store.commit_manifest(SID, b'{"mine": 1}')
    assert any(o.startswith("dropped response") for o in gcs_faulty.proxy.outcomes())
    assert store.read_manifest_bytes(SID) == b'{"mine": 1}'
    with pytest.raises(CommitConflictError):
        store.commit_manifest(SID, b'{"other": 2}')


def test_permanent_failure_is_a_clean_store_error_and_commits_nothing(gcs_faulty):
    store = store_on(gcs_faulty)
    digest, parts, _ = make_blob(2 * CHUNK)
    gcs_faulty.proxy.inject("status", count=10**6, match="upload", status=403)
    with pytest.raises(StoreError) as info:
        store.write_blob(digest, parts)
    message = str(info.value)
    assert message.startswith("write blob failed in SnapshotStore('gs://")
    assert "Forbidden" in message and "upload_id" not in message and "Traceback" not in message
    with pytest.raises(StoreError):
        store.commit_manifest(SID, b"{}")
    gcs_faulty.proxy.clear()
    assert store.list_snapshot_ids() == []
    assert not store.has_blob(digest)


def test_server_killed_mid_upload_then_back(gcs_faulty):
    """SIGKILL the server while a blob is halfway up, start it again: the lost upload session
    is restarted from the parts, the blob arrives whole, the earlier snapshot is intact."""
    store = store_on(gcs_faulty)
    store.commit_manifest(SID, b'{"earlier": 1}')
    digest, parts, size = make_blob(8 * CHUNK)
    outcome = gcs_faulty.kill_during_upload(lambda: store.write_blob(digest, parts), 120)
    assert outcome == [checksum.extend(0, b"".join(bytes(p) for p in parts))]  # crc32c, checked
    outcomes = gcs_faulty.proxy.outcomes("upload_id=")
    # the next chunk met the dead server, then the new server did not know the session: restart
    assert outcomes.index("upstream down") < outcomes.index("404") < outcomes.index("200")
    assert store.has_blob(digest, size)
    assert read_back(store, digest) == content(parts)
    assert store.read_manifest_bytes(SID) == b'{"earlier": 1}'


def test_server_gone_for_good_is_a_bounded_clean_failure(gcs_faulty, monkeypatch):
    """Every request is retried by gcsfs (6 attempts), then the write fails cleanly. gcsfs's
    waits between attempts (1, 2, 4, 8, 16 s plus jitter: about 35 s) are noted, not slept."""
    import gcsfs.retry

    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(gcsfs.retry, "asyncio", SimpleNamespace(sleep=no_wait))
    store = store_on(gcs_faulty)
    store.commit_manifest(SID, b'{"earlier": 1}')
    digest, parts, _ = make_blob(2 * CHUNK)
    gcs_faulty.emulator.kill()
    with pytest.raises(StoreError, match="write blob failed"):
        store.write_blob(digest, parts)
    assert gcs_faulty.proxy.outcomes().count("upstream down") == 6 and len(waits) == 5, waits
    gcs_faulty.emulator.start()
    assert not store.has_blob(digest)
    assert store.read_manifest_bytes(SID) == b'{"earlier": 1}'


# What GCS answers a request without credentials (gcsfs fell back to anonymous access because
# the metadata server was blocked): 401, not 403 (gcsfs ``retry.validate_response`` raises it as
# ``HttpError`` with ``code`` 401, and ``is_retriable`` retries a 401 only for "Invalid
# Credentials", an expired token).
ANONYMOUS_401 = ("Anonymous caller does not have storage.objects.create access to the Google "
                 "Cloud Storage object. Permission 'storage.objects.create' denied on resource "
                 "(or it may not exist).")


def test_no_credentials_is_said_with_the_fix_not_a_401_from_deep_inside(gcs_faulty):
    from jupyter_gkeresume.errors import NoCredentialsError

    store = store_on(gcs_faulty)
    gcs_faulty.proxy.inject("status", count=10, status=401, message=ANONYMOUS_401)
    with pytest.raises(NoCredentialsError) as failed:
        store.write_record("settings", b"{}")
    message = str(failed.value)
    assert message.startswith("no credentials: write record failed in"), message
    assert "egressAllowRules.cloudMetadataServer" in message and "Workload Identity" in message
    assert "Anonymous caller" in message  # GCS's own words stay, for whoever knows them
