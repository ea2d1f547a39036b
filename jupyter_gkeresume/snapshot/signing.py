"""HMAC-SHA256 signatures on manifests, with a workspace key that never goes into the store.

Pickles run code when loaded, so a manifest (and through its digests, every blob) is trusted only
when its signature verifies with this workspace's key. The key comes from ``GKERESUME_SIGNING_KEY``
(for a Kubernetes secret mounted as an env var) or ``GKERESUME_SIGNING_KEY_FILE``, else is derived
for the workspace from the namespace secret in ``GKERESUME_NAMESPACE_KEY_FILE`` (Kubeflow: one
Secret per profile namespace), else from ``{jupyter data dir}/gkeresume/signing.key``, created on
first use with mode 0600. A key file named explicitly (argument or ``GKERESUME_SIGNING_KEY_FILE``,
``GKERESUME_NAMESPACE_KEY_FILE``, e.g. a mounted secret) must exist: silently creating another key
there would make every earlier snapshot look foreign.

Keys are per workspace, never shared (docs/security.md): whoever holds a workspace's key can make
its kernel unpickle anything. A namespace secret is never used as a key itself: each workspace's
key is HKDF-SHA256 (RFC 5869) of it with the workspace id as ``info`` (``derive_workspace_key``),
so the workspaces of a namespace have distinct keys and key ids; whoever can read the Secret (the
namespace's contributors, the trust unit on Kubeflow) can still derive every one of them.
``key_warnings`` (the server calls it once at startup) says so in the log when this key also signs
another workspace's snapshots, and loudly when a missing default key file was just replaced by a
new key while this workspace has earlier snapshots (they will be refused).

Trust: ``verify`` refuses unsigned, foreign-key and tampered manifests with a reason; no caller
skips it. Snapshots signed with a key this workspace had before (the key file was lost, the
secret rotated) are verified with that key, named explicitly (``--key-file OLD``), and only if
it is one of this workspace's own: ``remember_key`` keeps the id of every key that signed a
snapshot of a workspace, beside the default key file (``{jupyter data dir}/gkeresume/key-ids.json``,
on the user's volume, never in the bucket), and ``key_of_workspace`` refuses any other key,
whoever asks: a key from elsewhere can sign anything, including a snapshot that runs code here.
The workspace's other records that steer a restore (the paused record, the runtime settings) are
signed with the same key, binding their kind, name, workspace and
sequence (``records``). Blob digests are checked on every read
(``blobfile.read_verified``), so a verified manifest vouches for every byte a restore uses.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jupyter_core.paths import jupyter_data_dir

from ..errors import IntegrityError, InvalidInputError
from ..printable import printable
from .format import SNAPSHOT_ID_RE, Manifest

if TYPE_CHECKING:
    from .store import SnapshotStore

ALGORITHM = "HMAC-SHA256"
HKDF_SALT = b"jupyter-gkeresume workspace key v1"
DERIVED_KEY_BYTES = 32
MAX_PEERS = 32  # other workspaces whose newest manifest key_warnings reads: a bounded startup cost
NEWEST_READ = 3  # own newest manifests read to find the key that signed them
MIN_KEY_BYTES = 32  # a key read from the environment or a file (the created ones have 64)


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


def hkdf_sha256(ikm: bytes, *, salt: bytes, info: bytes, length: int) -> bytes:
    """HKDF with SHA-256 (RFC 5869): extract, then expand to ``length`` bytes."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    okm, block = b"", b""
    for counter in range(1, -(-length // 32) + 1):
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        okm += block
    return okm[:length]


def derive_workspace_key(namespace_secret: bytes, workspace: str) -> bytes:
    """A namespace secret's key for one workspace id: distinct workspaces, independent keys."""
    return hkdf_sha256(namespace_secret, salt=HKDF_SALT, info=workspace.encode(),
                       length=DERIVED_KEY_BYTES)


def load_signing_key(path: str | None = None, *, workspace: str | None = None) -> SigningKey:
    """The workspace key by the documented order; creates the key file (0600) if none exists.
    ``workspace`` (the store's workspace id) is needed only to derive from a namespace secret.

    The file appears atomically (written under a temporary name, then linked), so a concurrent
    reader never sees it empty and two creators agree on the one that was linked first.
    """
    if os.environ.get("GKERESUME_SIGNING_KEY"):
        secret = os.environ["GKERESUME_SIGNING_KEY"].encode()
        return SigningKey(_long_enough(secret, "$GKERESUME_SIGNING_KEY"), "$GKERESUME_SIGNING_KEY")
    from_env = os.environ.get("GKERESUME_SIGNING_KEY_FILE")
    namespace_file = os.environ.get("GKERESUME_NAMESPACE_KEY_FILE")
    if not (path or from_env) and namespace_file:
        return _derived_key(namespace_file, workspace)
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
    return SigningKey(_long_enough(secret, f"signing key file {path}"), path)


def _long_enough(secret: bytes, origin: str) -> bytes:
    """``secret`` when it has at least ``MIN_KEY_BYTES`` bytes (a short key can be guessed, and
    a guessed key forges snapshots that run code); else ``InvalidInputError`` naming ``origin``."""
    if len(secret) < MIN_KEY_BYTES:
        raise InvalidInputError(
            f"{origin} holds a signing key of {len(secret)} bytes; it needs at least "
            f"{MIN_KEY_BYTES}: make one with `python -c 'import secrets; print(secrets.token_hex(32))'`"
        )
    return secret


def key_history_path() -> str:
    return os.path.join(jupyter_data_dir(), "gkeresume", "key-ids.json")


def known_key_ids(workspace: str) -> list[str]:
    """Ids of the keys that signed snapshots of ``workspace`` here (``remember_key``)."""
    ids = _key_history().get(workspace)
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


def remember_key(workspace: str, key: SigningKey) -> None:
    """Add ``key``'s id to the ids of ``workspace``'s keys (a private file, replaced
    atomically). Best effort: a data dir that cannot be written costs only the later use of
    this key as an old one."""
    known = known_key_ids(workspace)
    if key.key_id in known:
        return
    write_private_json(key_history_path(), {**_key_history(), workspace: [*known, key.key_id]})


def _key_history() -> dict:
    return read_private_json(key_history_path())


def read_private_json(path: str) -> dict[str, Any]:
    """The JSON object in ``path`` (``{}`` when there is none yet, or it is unreadable)."""
    try:
        with open(path, "rb") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_private_json(path: str, data: dict[str, Any]) -> None:
    """Replace ``path`` (mode 0600, its directory made) with ``data`` as JSON, atomically. Best
    effort: a data dir that cannot be written keeps the old file."""
    tmp = f"{path}.tmp-{secrets.token_hex(8)}"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def key_of_workspace(path: str, workspace: str) -> SigningKey:
    """The key in the file ``path`` (an earlier key of ``workspace``, to verify its snapshots
    with), refused unless it signed a snapshot of ``workspace`` here (``remember_key``)."""
    try:
        with open(path, "rb") as f:
            secret = f.read().strip()
    except OSError as exc:
        raise InvalidInputError(f"cannot read key file {path}: {exc.strerror}") from None
    key = SigningKey(_long_enough(secret, f"signing key file {path}"), path)
    known = known_key_ids(workspace)
    if key.key_id not in known:
        raise InvalidInputError(
            f"key {key.key_id} from {path} never signed a snapshot of workspace {workspace} here "
            f"(its keys: {', '.join(known) or 'none recorded'}): refused, a key from elsewhere "
            "can sign anything, including a snapshot that runs code in this kernel"
        )
    return key


def _derived_key(namespace_file: str, workspace: str | None) -> SigningKey:
    if workspace is None:
        raise InvalidInputError("GKERESUME_NAMESPACE_KEY_FILE is set: the workspace id is needed "
                                "to derive this workspace's key")
    try:
        with open(namespace_file, "rb") as f:
            secret = f.read().strip()
    except FileNotFoundError:
        raise InvalidInputError(f"GKERESUME_NAMESPACE_KEY_FILE names {namespace_file}, which does "
                                "not exist") from None
    if not secret:
        raise InvalidInputError(f"namespace key file {namespace_file} is empty")
    return SigningKey(derive_workspace_key(secret, workspace),
                      f"derived for {workspace} from the namespace secret {namespace_file}")


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
    """The key id that signed the newest signed manifest among the newest few under ``root``
    (each read up to the manifest size cap: a longer one is not JSON here, so skipped)."""
    from .store import MAX_MANIFEST_BYTES

    try:
        names = [n.rsplit("/", 1)[-1].removesuffix(".json")
                 for n in store.fs.ls(f"{root}/snapshots", detail=False)]
    except Exception:  # missing, unreadable (IAM), or any backend error: nothing to say
        return None
    for snapshot_id in sorted((n for n in names if SNAPSHOT_ID_RE.match(n)), reverse=True)[:NEWEST_READ]:
        try:
            raw = store.backend.read(f"{root}/snapshots/{snapshot_id}.json", MAX_MANIFEST_BYTES)
            signature = json.loads(raw)["signature"]
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
