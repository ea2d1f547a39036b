"""The exceptions of jupyter-gkeresume: one root, one subclass per kind of failure.

Callers catch ``GkeResumeError`` to handle every domain error; the REST handlers map the
subclasses onto HTTP statuses, the magics print their message without a traceback.
"""

from __future__ import annotations

from .printable import printable


class GkeResumeError(Exception):
    """Root of every error this package raises on purpose."""


class InvalidInputError(GkeResumeError, ValueError):
    """A caller gave a value that can never work (bad id, bad name, bad option)."""


class SnapshotNotFoundError(GkeResumeError, LookupError):
    """No committed snapshot matches the reference; ``known`` lists what exists."""

    def __init__(self, reference: str, known: list[str]):
        self.reference = reference
        self.known = known
        listed = ", ".join(known[-10:]) if known else "none"
        super().__init__(f"no snapshot {reference!r} in this workspace (known: {listed})")


class ManifestError(GkeResumeError):
    """A manifest is malformed, of an unknown format version, or inconsistent."""


class StoredRecordError(GkeResumeError):
    """A record read back from the store (paused record, lease, events) is corrupt or of an
    unknown shape: not a caller's mistake, and not a manifest."""


class IntegrityError(GkeResumeError):
    """Stored bytes do not match what the manifest promises (digest, size, signature)."""


class SnapshotRefusedError(IntegrityError):
    """A snapshot with this reference exists but does not verify (unsigned, another key,
    tampered, copied from elsewhere): ``reason`` says why; it is never used (one signed with an
    earlier key of the workspace verifies with that key, named explicitly). For ``latest``: no
    snapshot verifies, and the newest was refused."""

    def __init__(self, reference: str, snapshot_id: str, reason: str):
        self.reference = reference
        self.snapshot_id = snapshot_id
        self.reason = reason
        if reference == "latest":
            super().__init__(f"no snapshot in this workspace verifies: the newest, {snapshot_id}, "
                             f"was refused: {reason}")
            return
        named = "" if reference == snapshot_id else f" named {reference!r}"
        super().__init__(f"snapshot {snapshot_id}{named} exists but was refused: {reason}")


class StoreError(GkeResumeError):
    """The snapshot store failed (permission, network, quota) after any retries."""


class NoCredentialsError(StoreError):
    """The object store refused this pod as unauthenticated (401): it has no credentials, e.g.
    gcsfs fell back to anonymous access because the metadata server could not be reached."""


class CommitConflictError(StoreError):
    """Another writer created the same object first (create-only precondition): a snapshot id
    already committed, a lease record already taken."""


class NotFoundInStore(StoreError, LookupError):
    """The object asked for is not (or no longer) in the store."""


class InvalidTransitionError(GkeResumeError):
    """A pause/resume state change that the transition table does not allow."""


class LeaseHeldError(GkeResumeError):
    """Another restore holds the single-flight lease; ``holder`` says who."""

    def __init__(self, holder: str, expires_at: float):
        self.holder = holder
        self.expires_at = expires_at
        super().__init__(f"a restore is already running (held by '{printable(holder)}')")


class ReleaseError(GkeResumeError):
    """The release backend could not give the pod back to the cluster."""


class KernelCallError(GkeResumeError):
    """A kernel did not answer a kernel_hooks call, or answered with an error."""


class KernelNotFoundError(GkeResumeError, LookupError):
    """No running kernel has this id (the REST API answers 404)."""


class ConflictError(GkeResumeError):
    """The request conflicts with what is happening now: an operation in flight, a busy kernel,
    a workspace already paused (the REST API answers 409)."""


class ServerUnreachableError(GkeResumeError):
    """A kernel cannot reach the jupyter_server that runs it (no extension, no answer)."""


class ServerRefusedError(GkeResumeError):
    """The jupyter_server answered a kernel's request with an error; ``status`` is its code."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)
