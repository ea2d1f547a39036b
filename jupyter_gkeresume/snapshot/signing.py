"""HMAC-SHA256 signatures on manifests, with a workspace key that never goes into the store.

Pickles run code when loaded, so a manifest (and through its digests, every blob) is trusted only
when its signature verifies with this workspace's key. The key comes from ``GKERESUME_SIGNING_KEY``
(for a Kubernetes secret mounted as an env var) or ``GKERESUME_SIGNING_KEY_FILE``, else from
``{jupyter data dir}/gkeresume/signing.key``, created on first use with mode 0600. A key file
named explicitly (argument or ``GKERESUME_SIGNING_KEY_FILE``, e.g. a mounted secret) must exist:
silently creating another key there would make every earlier snapshot look foreign.

Trust: ``verify`` refuses unsigned, foreign-key and tampered manifests with a reason. A caller that
lets the user trust one snapshot explicitly skips ``verify`` for that one snapshot only; blob
digests are still checked on every read (``blobfile.read_verified``), so trusting a manifest means
trusting what it says, never bytes that do not match it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

from jupyter_core.paths import jupyter_data_dir

from ..errors import IntegrityError, InvalidInputError
from .format import Manifest

ALGORITHM = "HMAC-SHA256"


@dataclass(frozen=True)
class SigningKey:
    """Secret key bytes plus a public id (lets a verifier tell 'other key' from 'tampered')."""

    secret: bytes

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
        return SigningKey(os.environ["GKERESUME_SIGNING_KEY"].encode())
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
        return SigningKey(_create_key_file(path))
    if not secret:
        raise InvalidInputError(f"signing key file {path} is empty")
    return SigningKey(secret)


def _create_key_file(path: str) -> bytes:
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
            return f.read().strip()
    finally:
        os.unlink(tmp)
    return secret


def sign(manifest: Manifest, key: SigningKey) -> None:
    """Set ``manifest.signature`` over its canonical payload."""
    mac = hmac.new(key.secret, manifest.signing_payload(), hashlib.sha256).hexdigest()
    manifest.signature = {"alg": ALGORITHM, "key_id": key.key_id, "value": mac}


def verify(manifest: Manifest, key: SigningKey) -> None:
    """Raise ``IntegrityError`` with the reason unless the signature is valid for ``key``."""
    sig = manifest.signature
    if not sig:
        raise IntegrityError(f"snapshot {manifest.snapshot_id} is unsigned")
    if sig.get("alg") != ALGORITHM:
        raise IntegrityError(
            f"snapshot {manifest.snapshot_id}: unknown signature {sig.get('alg')!r}"
        )
    if sig.get("key_id") != key.key_id:
        raise IntegrityError(
            f"snapshot {manifest.snapshot_id} was signed with another key ({sig.get('key_id')}, "
            f"this workspace uses {key.key_id})"
        )
    expected = hmac.new(key.secret, manifest.signing_payload(), hashlib.sha256).hexdigest()
    value = sig.get("value", "").encode("utf-8", "replace")
    if not hmac.compare_digest(expected.encode(), value):
        raise IntegrityError(f"snapshot {manifest.snapshot_id}: signature mismatch (tampered)")
