"""HMAC-SHA256 signatures on manifests, with a workspace key that never goes into the store.

Pickles run code when loaded, so a manifest (and through its digests, every blob) is trusted only
when its signature verifies with this workspace's key. The key comes from ``GKERESUME_SIGNING_KEY``
(for a Kubernetes secret mounted as an env var) or ``GKERESUME_SIGNING_KEY_FILE``, else from
``{jupyter data dir}/gkeresume/signing.key``, created on first use with mode 0600. A key file
named explicitly (argument or ``GKERESUME_SIGNING_KEY_FILE``, e.g. a mounted secret) must exist:
silently creating another key there would make every earlier snapshot look foreign.

Keys are per workspace, never shared and never derived from a shared secret (docs/security.md):
whoever holds a workspace's key can make its kernel unpickle anything. ``key_warnings`` (the
server calls it once at startup) says so in the log when this key also signs another workspace's
snapshots, and loudly when a missing default key file was just replaced by a new key while this
workspace has earlier snapshots (they will be refused).

Trust: ``verify`` refuses unsigned, foreign-key and tampered manifests with a reason. The
workspace's other records that steer a restore (the paused record, the runtime settings) are
signed the same way: ``sign_record`` / ``open_record`` (the signature covers the workspace id,
so one workspace's record is refused in another's prefix). A caller that
lets the user trust one snapshot explicitly skips ``verify`` for that one snapshot only; blob
digests are still checked on every read (``blobfile.read_verified``), so trusting a manifest means
trusting what it says, never bytes that do not match it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jupyter_core.paths import jupyter_data_dir

from ..errors import IntegrityError, InvalidInputError, StoredRecordError
from ..printable import printable
from .format import SNAPSHOT_ID_RE, Manifest, canonical_json

if TYPE_CHECKING:
    from .store import SnapshotStore

ALGORITHM = "HMAC-SHA256"
MAX_PEERS = 32  # other workspaces whose newest manifest key_warnings reads: a bounded startup cost
NEWEST_READ = 3  # own newest manifests read to find the key that signed them


@dataclass(frozen=True)
class SigningKey:
    """Secret key bytes plus a public id (lets a verifier tell 'other key' from 'tampered');
    ``origin`` says where it came from, ``created`` that it was made just now."""

    secret: bytes
    origin: str = field(default="", compare=False)
    created: bool = field(default=False, compare=False)

    @property
    def key_id(self) -> str:
        return hashlib.sha256(b"gkeresume-key-id:" + self.secret).hexdigest()[:16]

    def __repr__(self) -> str:  # never show the secret
        return f"SigningKey(key_id={self.key_id!r})"


def default_key_path() -> str:
    return os.path.join(jupyter_data_dir(), "gkeresume", "signing.key")


def load_signing_key(path: str | None = None) -> SigningKey:
    """The workspace key by the documented order; creates the key file (0600) if none exists.

    The file appears atomically (written under a temporary name, then linked), so a concurrent
    reader never sees it empty and two creators agree on the one that was linked first.
    """
    if os.environ.get("GKERESUME_SIGNING_KEY"):
        return SigningKey(os.environ["GKERESUME_SIGNING_KEY"].encode(), "$GKERESUME_SIGNING_KEY")
    from_env = os.environ.get("GKERESUME_SIGNING_KEY_FILE")
    path = path or from_env or default_key_path()
    try:
        with open(path, "rb") as f:
            secret = f.read().strip()
    except FileNotFoundError:
        if path == from_env:
            raise InvalidInputError(
                f"GKERESUME_SIGNING_KEY_FILE names {path}, which does not exist"
            ) from None
        secret, created = _create_key_file(path)
        return SigningKey(secret, path, created)
    if not secret:
        raise InvalidInputError(f"signing key file {path} is empty")
    return SigningKey(secret, path)


def _create_key_file(path: str) -> tuple[bytes, bool]:
    """The key in the new file at ``path``, and whether this call created it."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    secret = secrets.token_hex(32).encode()
    tmp = f"{path}.tmp-{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secret)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:  # another process created it first: use theirs
        with open(path, "rb") as f:
            return f.read().strip(), False
    finally:
        os.unlink(tmp)
    return secret, True


def sign(manifest: Manifest, key: SigningKey) -> None:
    """Set ``manifest.signature`` over its canonical payload."""
    manifest.signature = signature_of(manifest.signing_payload(), key)


def verify(manifest: Manifest, key: SigningKey) -> None:
    """Raise ``IntegrityError`` with the reason unless the signature is valid for ``key``."""
    check_signature(manifest.signature, manifest.signing_payload(), key,
                    f"snapshot {manifest.snapshot_id}")


def signature_of(payload: bytes, key: SigningKey) -> dict[str, str]:
    """The signature object (``alg``, ``key_id``, ``value``) of ``payload`` with ``key``."""
    mac = hmac.new(key.secret, payload, hashlib.sha256).hexdigest()
    return {"alg": ALGORITHM, "key_id": key.key_id, "value": mac}


def check_signature(signature: Any, payload: bytes, key: SigningKey, what: str) -> None:
    """Raise ``IntegrityError`` ("``what`` is unsigned", "... was signed with another key", "...
    signature mismatch (tampered)") unless ``signature`` (as stored: any JSON) is ``key``'s
    signature of ``payload``."""
    if not signature:
        raise IntegrityError(f"{what} is unsigned")
    alg = signature.get("alg") if isinstance(signature, dict) else None
    if alg != ALGORITHM:
        raise IntegrityError(f"{what}: unknown signature '{printable(alg)}'")
    if signature.get("key_id") != key.key_id:
        raise IntegrityError(
            f"{what} was signed with another key ({printable(signature.get('key_id'))}, "
            f"this workspace uses {key.key_id})"
        )
    expected = hmac.new(key.secret, payload, hashlib.sha256).hexdigest()
    value = signature.get("value")
    value = value.encode("utf-8", "replace") if isinstance(value, str) else b""
    if not hmac.compare_digest(expected.encode(), value):
        raise IntegrityError(f"{what}: signature mismatch (tampered)")


def sign_record(data: dict[str, Any], key: SigningKey) -> bytes:
    """A workspace record (``data`` names its ``workspace``) as stored: its fields plus
    ``signature`` over their canonical JSON. ``open_record`` reads it back."""
    return json.dumps({**data, "signature": signature_of(canonical_json(data), key)}).encode()


def open_record(raw: bytes, key: SigningKey, workspace: str, what: str) -> dict[str, Any]:
    """The fields of a record that ``sign_record`` wrote for ``workspace`` with ``key`` (without
    ``signature``). ``StoredRecordError`` with the reason (already escaped for a log) when it is
    not JSON, unsigned, signed with another key, tampered, or another workspace's record."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise StoredRecordError(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise StoredRecordError(f"{what} is not a JSON object")
    signature = data.pop("signature", None)
    try:
        check_signature(signature, canonical_json(data), key, what)
    except IntegrityError as exc:
        raise StoredRecordError(str(exc)) from None
    if data.get("workspace") != workspace:
        raise StoredRecordError(f"{what} belongs to workspace '{printable(data.get('workspace'))}', "
                                f"not '{workspace}'")
    return data


def key_warnings(store: SnapshotStore, key: SigningKey) -> list[str]:
    """What the server should log about ``key`` at startup; never raises (a store it cannot read,
    or a prefix IAM keeps it out of, is skipped). Reads this workspace's newest manifests and the
    newest manifest of up to ``MAX_PEERS`` other workspaces of the store, as JSON only."""
    warnings = []
    own = _newest_key_id(store, store.root)
    if own is not None and own != key.key_id:
        if key.created:
            warnings.append(
                f"SIGNING KEY CHANGED: there was no key file, so a new key was created at "
                f"{key.origin}, but workspace {store.workspace} has earlier snapshots signed with "
                f"key {own}: the key changed; earlier snapshots will be refused. Put the old key "
                "file back (or point GKERESUME_SIGNING_KEY_FILE at it) to keep them."
            )
        else:
            warnings.append(
                f"the newest snapshots of workspace {store.workspace} were signed with another key "
                f"({own}; this server signs with {key.key_id} from {key.origin or 'its caller'}): "
                "they will be refused unless that key comes back"
            )
    shared = [ws for ws, key_id in _peer_key_ids(store) if key_id == key.key_id]
    if shared:
        warnings.append(
            f"the signing key from {key.origin or 'the caller'} (key id {key.key_id}) also signs "
            f"snapshots of other workspaces ({', '.join(shared)}): anyone holding it can forge a "
            "snapshot that runs code in this kernel. Give every workspace its own key, never one "
            "set cluster-wide (docs/security.md)"
        )
    return warnings


def _newest_key_id(store: SnapshotStore, root: str) -> str | None:
    """The key id that signed the newest signed manifest among the newest few under ``root``."""
    try:
        names = [n.rsplit("/", 1)[-1].removesuffix(".json")
                 for n in store.fs.ls(f"{root}/snapshots", detail=False)]
    except Exception:  # missing, unreadable (IAM), or any backend error: nothing to say
        return None
    for snapshot_id in sorted((n for n in names if SNAPSHOT_ID_RE.match(n)), reverse=True)[:NEWEST_READ]:
        try:
            signature = json.loads(store.fs.cat_file(f"{root}/snapshots/{snapshot_id}.json"))["signature"]
            if isinstance(signature.get("key_id"), str):
                return signature["key_id"]
        except Exception:  # not JSON, not an object, unsigned, unreadable: try the next one
            continue
    return None


def _peer_key_ids(store: SnapshotStore) -> list[tuple[str, str]]:
    """(workspace, key id of its newest signed manifest) for other workspaces of the store."""
    from ..workspace import WORKSPACE_RE

    base = store.root.rsplit("/", 1)[0]
    try:
        entries = store.fs.ls(base, detail=False)
    except Exception:  # an unlisted store root (IAM per prefix): no peers to compare with
        return []
    peers = sorted({e.rstrip("/").rsplit("/", 1)[-1] for e in entries} - {store.workspace})
    peers = [p for p in peers if WORKSPACE_RE.fullmatch(p) and ".." not in p][:MAX_PEERS]
    found = [(ws, _newest_key_id(store, f"{base}/{ws}")) for ws in peers]
    return [(ws, key_id) for ws, key_id in found if key_id is not None]
