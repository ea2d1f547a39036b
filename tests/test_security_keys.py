"""Signing keys are per workspace (issue 13.5): the server warns at startup when its key also signs
another workspace's snapshots (a key shared cluster-wide lets every user forge a snapshot that
runs code in another's kernel), and loudly when a fresh default key file replaces the key that
signed this workspace's earlier snapshots."""

from __future__ import annotations

import json

from fixtures_lifecycle import make_snapshot

from jupyter_gkeresume.snapshot import SnapshotStore, load_signing_key
from jupyter_gkeresume.snapshot.signing import SigningKey, key_warnings


def stores(tmp_path, *workspaces):
    return [SnapshotStore(str(tmp_path / "store"), ws) for ws in workspaces]


def test_a_key_shared_with_other_workspaces_is_warned_about(tmp_path, monkeypatch):
    monkeypatch.setenv("GKERESUME_SIGNING_KEY", "one-key-for-the-whole-cluster-0123456789")
    shared = load_signing_key()
    alice, bob, carol = stores(tmp_path, "hub-alice", "hub-bob", "hub-carol")
    make_snapshot(bob, shared)
    make_snapshot(carol, SigningKey(b"carol-own-key"))
    make_snapshot(alice, shared)
    (warning,) = key_warnings(alice, shared)
    assert "hub-bob" in warning and "hub-carol" not in warning
    assert "GKERESUME_SIGNING_KEY" in warning and "forge" in warning
    assert key_warnings(carol, SigningKey(b"carol-own-key")) == []


def test_per_workspace_keys_give_no_warning(tmp_path):
    alice, bob = stores(tmp_path, "hub-alice", "hub-bob")
    make_snapshot(alice, SigningKey(b"alice-key"))
    make_snapshot(bob, SigningKey(b"bob-key"))
    assert key_warnings(alice, SigningKey(b"alice-key")) == []
    assert key_warnings(SnapshotStore(str(tmp_path / "empty"), "ws"), SigningKey(b"k")) == []


def test_a_new_default_key_with_earlier_snapshots_is_loud(tmp_path, monkeypatch):
    monkeypatch.delenv("GKERESUME_SIGNING_KEY", raising=False)
    monkeypatch.delenv("GKERESUME_SIGNING_KEY_FILE", raising=False)
    (alice,) = stores(tmp_path, "hub-alice")
    make_snapshot(alice, SigningKey(b"the-key-that-was-lost"))
    fresh = load_signing_key(str(tmp_path / "data" / "signing.key"))
    (warning,) = key_warnings(alice, fresh)
    assert "the key changed; earlier snapshots will be refused" in warning
    assert str(tmp_path / "data" / "signing.key") in warning
    again = load_signing_key(str(tmp_path / "data" / "signing.key"))  # the next start: same key
    (warning,) = key_warnings(alice, again)
    assert "signed with another key" in warning and "refused" in warning
    nothing_before = stores(tmp_path, "hub-bob")[0]
    assert key_warnings(nothing_before, load_signing_key(str(tmp_path / "bob.key"))) == []


def test_unreadable_or_garbage_peers_are_skipped(tmp_path):
    alice, bob = stores(tmp_path, "hub-alice", "hub-bob")
    key = SigningKey(b"k")
    make_snapshot(alice, key)
    bob.commit_manifest("99991231T235959Z-ffffff", b"[" * 10_000)
    (tmp_path / "store" / "not-a-workspace..x").mkdir()
    (tmp_path / "store" / "stray-file").write_text(json.dumps({"signature": 1}))
    assert key_warnings(alice, key) == []
