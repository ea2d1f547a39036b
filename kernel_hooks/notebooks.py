"""The notebook a kernel belongs to, spelled one way everywhere, and that notebook's snapshots.

A notebook is named by its path relative to the server root, "/"-separated, as the lab shows it
(``sub/a.ipynb``). Where it comes from, first that applies: what the caller passes (the server
sends the session path); ``JPY_SESSION_NAME`` (jupyter_server sets it to the notebook's absolute
path for the kernels of its sessions), made relative to ``GKERESUME_ROOT_DIR`` (the server root,
which the server extension sets for the kernels it starts), else to the directory the kernel
started in. Paths stored by older snapshots are read through the same function, so an absolute
path and its relative form name one notebook.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from jupyter_gkeresume.errors import GkeResumeError

from .errors import NoNotebookSnapshotError

if TYPE_CHECKING:
    from jupyter_gkeresume.snapshot import SigningKey, SnapshotStore

ROOT_DIR_ENV = "GKERESUME_ROOT_DIR"
SESSION_ENV = "JPY_SESSION_NAME"
_START_DIR = os.getcwd()  # the kernel's directory at start (this module loads with the extension)


def notebook_path(path: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """``path`` as the lab shows it: relative to the server root when inside it (an absolute
    path outside stays absolute); None for no path."""
    if not path:
        return None
    env = os.environ if env is None else env
    path = os.path.normpath(path)
    if os.path.isabs(path):
        root = os.path.normpath(env.get(ROOT_DIR_ENV) or _START_DIR)
        inside = os.path.relpath(path, root)
        if not inside.startswith(os.pardir + os.sep) and inside != os.pardir:
            path = inside
    return path.replace(os.sep, "/")


def this_notebook(explicit: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """This kernel's notebook: ``explicit`` if given, else ``JPY_SESSION_NAME``; None outside a
    notebook session (plain IPython)."""
    env = os.environ if env is None else env
    return notebook_path(explicit or env.get(SESSION_ENV), env)


def shorten(path: str, width: int) -> str:
    """``path`` in at most ``width`` characters, cut from the left behind an ellipsis."""
    return path if len(path) <= width else "…" + path[len(path) - width + 1:]


def newest_snapshot(store: SnapshotStore, key: SigningKey, notebook: str | None) -> str:
    """The newest snapshot whose signature verifies, of ``notebook`` (None: of any notebook).

    Unsigned, foreign or unreadable manifests never count. Raises ``NoNotebookSnapshotError``
    naming the newest refused one and the newest of another notebook, if any."""
    from jupyter_gkeresume.snapshot.manifests import load_manifest  # not at kernel start

    ids = store.list_snapshot_ids()
    other: tuple[str, str] | None = None
    refused: tuple[str, str] | None = None
    for snapshot_id in reversed(ids):
        try:
            manifest = load_manifest(store, snapshot_id, key)
        except GkeResumeError as exc:
            refused = refused or (snapshot_id, str(exc))
            continue
        stored = notebook_path(manifest.notebook)
        if notebook is None or stored == notebook:
            return snapshot_id
        other = other or (snapshot_id, stored or "no notebook")
    raise NoNotebookSnapshotError(notebook, ids, other, refused)
