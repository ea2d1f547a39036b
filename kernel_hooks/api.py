"""The kernel_hooks Python API: the same verbs as the magics, returning result objects.

Defaults: the namespace is the running IPython shell's user namespace; the store and workspace
come from ``jupyter_gkeresume.workspace`` (``GKERESUME_STORE``, ``GKERESUME_WORKSPACE``, ...);
the signing key from ``jupyter_gkeresume.snapshot.signing``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from jupyter_gkeresume.errors import InvalidInputError
from jupyter_gkeresume.snapshot import (
    SnapshotStore,
    SnapshotSummary,
    environment_fingerprint,
    load_signing_key,
)
from jupyter_gkeresume.snapshot import list_snapshots as catalog_list
from jupyter_gkeresume.snapshot.format import validate_snapshot_name
from jupyter_gkeresume.workspace import resolve_store_url, resolve_workspace_id

from .capture import take_checkpoint
from .restore import take_resume
from .results import CheckpointResult, Progress, ResumeResult


def open_store(store: str | None = None, workspace: str | None = None) -> SnapshotStore:
    """The store for this kernel: explicit values first, then the documented defaults."""
    return SnapshotStore(resolve_store_url(store), resolve_workspace_id(workspace))


def _target(namespace: dict[str, Any] | None) -> tuple[dict[str, Any], Any]:
    """The namespace to work on, and the IPython shell when it is that shell's user namespace
    (then execution count, history and IPython's hidden names apply)."""
    try:
        from IPython import get_ipython
    except ImportError:
        shell = None
    else:
        shell = get_ipython()
    if namespace is None:
        if shell is None:
            raise InvalidInputError("no IPython shell here: pass namespace=")
        namespace = shell.user_ns
    return namespace, shell if shell is not None and namespace is shell.user_ns else None


def checkpoint(
    name: str | None = None,
    *,
    namespace: dict[str, Any] | None = None,
    store: str | None = None,
    workspace: str | None = None,
    notebook: str | None = None,
    progress: Callable[[Progress], None] | None = None,
    reason: str = "checkpoint",
) -> CheckpointResult:
    """Write a snapshot of the namespace and return what was saved, skipped and written.
    ``reason`` goes into the manifest: ``checkpoint`` (a magic or a call), or the server's
    ``user`` / ``idle`` / ``shutdown``."""
    if name is not None:
        validate_snapshot_name(name)
    namespace, shell = _target(namespace)
    return take_checkpoint(
        namespace,
        open_store(store, workspace),
        load_signing_key(),
        name=name,
        notebook=notebook or os.environ.get("JPY_SESSION_NAME"),
        hidden=shell.user_ns_hidden if shell else None,
        execution_count=shell.execution_count if shell else 0,
        history=list(shell.history_manager.input_hist_raw) if shell else None,
        progress=progress,
        why=reason,
    )


def resume(
    reference: str | None = "latest",
    *,
    only: list[str] | None = None,
    namespace: dict[str, Any] | None = None,
    store: str | None = None,
    workspace: str | None = None,
    trust: bool = False,
    progress: Callable[[Progress], None] | None = None,
    continuing_cell: bool = False,
    lease_wait: float | None = None,
) -> ResumeResult:
    """Restore a snapshot (id, name or ``latest``) into the namespace; report what came back.

    ``trust=True`` accepts this one snapshot even if its signature does not verify.
    ``continuing_cell`` is for callers running inside a counted cell (the magics).
    ``lease_wait``: seconds to wait while another restore of the same snapshot runs.
    """
    namespace, shell = _target(namespace)
    return take_resume(
        namespace,
        open_store(store, workspace),
        load_signing_key(),
        reference=reference,
        only=only,
        trust=trust,
        progress=progress,
        continuing_cell=continuing_cell,
        shell=shell,
        lease_wait=lease_wait,
    )


def list_snapshots(*, store: str | None = None, workspace: str | None = None) -> list[SnapshotSummary]:
    """Committed snapshots of the workspace, newest first, each with its verdict here."""
    return catalog_list(open_store(store, workspace), load_signing_key(), environment_fingerprint())
