"""Signing keys are per workspace (issue 13.5): the server warns at startup when its key also signs
another workspace's snapshots (a key shared cluster-wide lets every user forge a snapshot that
runs code in another's kernel), and loudly when a fresh default key file replaces the key that
signed this workspace's earlier snapshots."""

from __future__ import annotations

import json

import pytest
from fixtures_lifecycle import make_snapshot

from jupyter_gkeresume.errors import InvalidInputError
from jupyter_gkeresume.snapshot import SnapshotStore, load_signing_key, signing
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


def test_workspaces_of_one_namespace_get_their_own_keys_from_its_secret(tmp_path, monkeypatch):
    """Kubeflow: one Secret per profile namespace (deploy/kubeflow/overlays/namespace/
    poddefault.yaml), mounted in every notebook of the namespace. Each workspace derives its own
    key from it, so two notebooks of one namespace never sign with one key and the shared-key
    warning stays for real sharing."""
    secret = tmp_path / "namespace-secret"
    secret.write_text("0123456789abcdef" * 4 + "\n")
    monkeypatch.delenv("GKERESUME_SIGNING_KEY", raising=False)
    monkeypatch.delenv("GKERESUME_SIGNING_KEY_FILE", raising=False)
    monkeypatch.setenv("GKERESUME_NAMESPACE_KEY_FILE", str(secret))
    one, two = stores(tmp_path, "kf-team-one", "kfws-team-two")
    key_one = load_signing_key(workspace=one.workspace)
    key_two = load_signing_key(workspace=two.workspace)
    assert key_one.key_id != key_two.key_id and len(key_one.secret) >= 32
    assert key_one == load_signing_key(workspace="kf-team-one")  # stable across pods
    assert secret.read_bytes().strip() not in (key_one.secret, key_two.secret)
    make_snapshot(one, key_one)
    make_snapshot(two, key_two)
    assert key_warnings(one, key_one) == [] and key_warnings(two, key_two) == []
    assert "namespace secret" in key_one.origin and "kf-team-one" in key_one.origin
    with pytest.raises(InvalidInputError, match="workspace id is needed"):
        load_signing_key()


def test_the_derivation_is_rfc_5869_hkdf_sha256():
    """RFC 5869 appendix A.1 and A.3 (SHA-256, with and without salt and info)."""
    okm = signing.hkdf_sha256(bytes([0x0B] * 22), salt=bytes(range(13)),
                              info=bytes(range(0xF0, 0xFA)), length=42)
    assert okm.hex() == ("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
                         "34007208d5b887185865")
    okm = signing.hkdf_sha256(bytes([0x0B] * 22), salt=b"", info=b"", length=42)
    assert okm.hex() == ("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"
                         "9d201395faa4b61a96c8")
    assert signing.derive_workspace_key(b"s" * 32, "kf-team-one") == signing.hkdf_sha256(
        b"s" * 32, salt=signing.HKDF_SALT, info=b"kf-team-one", length=32)
