"""One kernel per notebook: the lab's session requests and a resume converge on the same kernel.

JupyterLab asks for a notebook's session with a UUID path in the notebook's directory and the
notebook's file name as ``name``, then renames the session to the notebook's path
(``@jupyterlab/apputils`` ``SessionContext._changeKernel``; ``docregistry`` ``Context`` names the
session ``PathExt.basename(path)``). jupyter_server reuses a session only for the exact path it
is given (``SessionsHandler.post``: ``session_exists(path)``) and itself reads the session's file
as ``name`` in the directory of ``path`` (``SessionManager.get_kernel_env``). So, left alone, a
lab that opens a paused notebook while a resume starts its kernel, or after the resume, gets a
second, empty kernel for it: its cells miss the restored state and the next pause records the
notebook twice.

``NotebookKernels`` keeps one kernel per notebook for the notebook sessions created without a
kernel id (``install`` wraps ``SessionManager.create_session``): under the notebook's claim, a
request for a notebook that has a live kernel (a session of its path, or one created for it and
not yet renamed) gets a new session on that kernel; otherwise a kernel starts, and other
requests for that notebook wait for it. A resume holds the claim (``claim``) from before it
looks for the notebook's kernel until its restore request is in that kernel's queue
(``Claim.release``): a lab request that waited gets the kernel whose next cell runs after the
restore.

Call order: ``install(session_manager)`` once at startup (before any session is created); then
``claim`` / ``kernel_of`` / ``create`` from the resume, and the wrapped ``create_session`` from
the sessions API.

Invariants: while a notebook's claim is held, no kernel starts for it except the holder's; a
kernel id the client names is used as named (its choice); a session request of another type
(console, file) is not touched.
"""

from __future__ import annotations

import asyncio
import posixpath
from typing import Any

from tornado import web


def notebook_key(path: str) -> str:
    """A notebook path as the sessions API and snapshots name it (relative, normalized)."""
    return posixpath.normpath(path).lstrip("/")


def session_notebook(path: str | None, name: str | None) -> str | None:
    """The notebook a session request is for: ``name`` in the directory of ``path`` when it is
    another file's name (JupyterLab's UUID path; jupyter_server's ``get_kernel_env`` reads it
    so), else ``path`` (a client that names the session by the notebook's path or file)."""
    if not path:
        return None
    if name and name != path and posixpath.basename(path) != name:
        path = posixpath.join(posixpath.dirname(path), name)
    return notebook_key(path)


class Claim:
    """A held notebook claim; ``release`` may be called any number of times, from any task."""

    def __init__(self, lock: asyncio.Lock | None):
        self._lock = lock

    def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()


class NotebookKernels:
    """The one kernel of each notebook, for one server's session and kernel managers."""

    def __init__(self, session_manager: Any, kernel_manager: Any):
        self.session_manager = session_manager
        self.kernel_manager = kernel_manager
        self._create: Any = None  # jupyter_server's create_session, once ``install`` wrapped it
        self._locks: dict[str, asyncio.Lock] = {}
        # notebook -> (kernel id, the path its session was created with, not yet renamed)
        self._created: dict[str, tuple[str, str]] = {}

    async def claim(self, notebook: str | None) -> Claim:
        """Hold ``notebook``'s claim (``None``: nothing to hold) until ``release``."""
        if not notebook:
            return Claim(None)
        lock = self._locks.setdefault(notebook_key(notebook), asyncio.Lock())
        await lock.acquire()
        return Claim(lock)

    async def kernel_of(self, notebook: str) -> str | None:
        """The live kernel of ``notebook``: a session's of that path, else the kernel of a
        session created for it that still has the path it was created with."""
        key = notebook_key(notebook)
        sessions = await self.session_manager.list_sessions()  # culls sessions of gone kernels
        for session in sessions:
            if session.get("kernel") and notebook_key(session.get("path") or "") == key:
                return session["kernel"]["id"]
        kid, created_as = self._created.pop(key, (None, None))
        if kid is not None and any(s.get("kernel", {}).get("id") == kid
                                   and s.get("path") == created_as for s in sessions):
            self._created[key] = (kid, created_as)
            return kid
        return None

    def notebook_of_path(self, path: str) -> str:
        """The notebook a session of ``path`` is for: the notebook whose session was created
        with that (UUID) path and is not renamed yet, else ``path``."""
        for notebook, (_, created_as) in self._created.items():
            if created_as == path:
                return notebook
        return path

    async def create(self, notebook: str, kernel_name: str | None) -> str:
        """A session of ``notebook`` (path and name as the sessions API makes them) on a new
        kernel; the caller holds the claim. Returns the kernel id."""
        path = notebook_key(notebook)
        create = self._create or self.session_manager.create_session
        model = await create(path=path, name=posixpath.basename(path), type="notebook",
                             kernel_name=kernel_name)
        return model["kernel"]["id"]

    def install(self) -> None:
        """Wrap the session manager's ``create_session`` (every ``POST /api/sessions`` that
        finds no session of its exact path goes there)."""
        create = self._create = self.session_manager.create_session

        async def create_session(path: str | None = None, name: str | None = None,
                                 type: str | None = None, kernel_name: str | None = None,
                                 kernel_id: str | None = None) -> dict[str, Any]:
            notebook = session_notebook(path, name) if type == "notebook" else None
            if notebook is None or kernel_id is not None:
                return await create(path=path, name=name, type=type, kernel_name=kernel_name,
                                    kernel_id=kernel_id)
            claim = await self.claim(notebook)
            try:
                live = await self.kernel_of(notebook)
                if live is not None and not self._same_kind(live, kernel_name):
                    live = None  # the client asked for another kernel: its choice
                model = await create(path=path, name=name, type=type, kernel_name=kernel_name,
                                     kernel_id=live)
                if path is not None and notebook_key(path) != notebook:
                    self._created[notebook] = (model["kernel"]["id"], path)
                return model
            finally:
                claim.release()

        self.session_manager.create_session = create_session

    def _same_kind(self, kid: str, kernel_name: str | None) -> bool:
        if kernel_name is None:
            return True
        try:
            return self.kernel_manager.get_kernel(kid).kernel_name == kernel_name
        except (KeyError, web.HTTPError):  # gone (jupyter_server raises a 404)
            return False
