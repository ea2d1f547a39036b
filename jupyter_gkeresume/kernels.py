"""``KernelGateway``: what the server does with its kernels, in one place, with typed results.

It wraps jupyter_server's kernel and session managers and ``kernel_client.call_kernel``: list the
live kernels and their notebooks, tell which are busy (the one busy check: pause and the idle
watcher use it), start a kernel for a notebook (its session, reused or created), stop kernels,
checkpoint and restore (``kernel_protocol`` requests, ``CheckpointReply`` / ``RestoreReply``).

Invariants: a kernel call that does not answer ``ok`` raises ``KernelCallError`` naming the
kernel, its notebook and the action; a kernel that has gone (``KERNEL_GONE``) is not an error
where its absence is the point (listing, stopping).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any

from tornado import web

from .errors import KernelCallError
from .kernel_client import call_kernel
from .kernel_protocol import (
    CheckpointReply,
    CheckpointRequest,
    Request,
    RestoreReply,
    ResumeRequest,
)
from .paused_record import safe_notebook_path

KERNEL_GONE = (KeyError, web.HTTPError)  # jupyter_server's kernel manager raises a 404 HTTPError
Progress = Callable[[dict[str, Any]], None]


class KernelGateway:
    """The kernels of one server; ``store_url``/``workspace`` go into every kernel request."""

    def __init__(self, kernel_manager: Any, session_manager: Any, *, store_url: str,
                 workspace: str):
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.store_url = store_url
        self.workspace = workspace

    # -- what runs --------------------------------------------------------------------------
    def live_ids(self) -> list[str]:
        return list(self.kernel_manager.list_kernel_ids())

    def info(self, kid: str) -> dict[str, Any]:
        """``kernel_name`` and ``execution_state`` of a kernel (``None`` for a gone one)."""
        try:
            kernel = self.kernel_manager.get_kernel(kid)
        except KERNEL_GONE:
            kernel = None
        return {"kernel_name": getattr(kernel, "kernel_name", None),
                "execution_state": getattr(kernel, "execution_state", None)}

    def busy(self, ids: list[str]) -> list[str]:
        """The kernels of ``ids`` busy running a cell."""
        return [k for k in ids if self.info(k)["execution_state"] == "busy"]

    async def notebooks(self) -> dict[str, str]:
        """kernel id -> notebook path of every session. Listing races with kernels shutting
        down (jupyter_server raises for a kernel that vanished mid-listing): try again."""
        for _ in range(3):
            try:
                sessions = await self.session_manager.list_sessions()
            except KERNEL_GONE:
                continue
            return {s["kernel"]["id"]: s["path"] for s in sessions if s.get("kernel")}
        return {}

    # -- start, stop ------------------------------------------------------------------------
    async def start_for(self, notebook: str | None, kernel_name: str | None) -> str:
        """A kernel for ``notebook``: its session (reused or created), else a bare kernel."""
        kernel_name = kernel_name or self.kernel_manager.default_kernel_name
        if not notebook:
            return await self.kernel_manager.start_kernel(kernel_name=kernel_name)
        path = safe_notebook_path(notebook)
        for session in await self.session_manager.list_sessions():
            if session.get("path") == path and session.get("kernel"):
                return session["kernel"]["id"]
        model = await self.session_manager.create_session(
            path=path, name=posixpath.basename(path), type="notebook", kernel_name=kernel_name,
        )
        return model["kernel"]["id"]

    async def stop(self, ids: list[str]) -> None:
        for kid in ids:
            try:
                await self.kernel_manager.shutdown_kernel(kid)
            except KERNEL_GONE:
                continue

    # -- kernel calls -----------------------------------------------------------------------
    async def checkpoint(self, kid: str, *, name: str | None, notebook: str | None,
                         timeout: float, on_progress: Progress) -> CheckpointReply:
        request = CheckpointRequest(self.store_url, self.workspace, name, notebook)
        return CheckpointReply.from_result(
            await self._call(kid, notebook, request, timeout, on_progress))

    async def restore(self, kid: str, *, reference: str, only: list[str] | None,
                      notebook: str | None, timeout: float,
                      on_progress: Progress) -> RestoreReply:
        request = ResumeRequest(self.store_url, self.workspace, reference, only)
        return RestoreReply.from_result(
            await self._call(kid, notebook, request, timeout, on_progress))

    async def _call(self, kid: str, notebook: str | None, request: Request, timeout: float,
                    on_progress: Progress) -> dict[str, Any]:
        outcome = await call_kernel(self.kernel_manager, kid, request, timeout=timeout,
                                    on_progress=on_progress)
        if not outcome.ok:
            raise KernelCallError(f"kernel {kid} ({notebook or 'no notebook'}): {request.action}: "
                                  f"{outcome.error}: {outcome.message}")
        return outcome.result or {}
