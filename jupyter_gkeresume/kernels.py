"""``KernelGateway``: what the server does with its kernels, in one place, with typed results.

It wraps jupyter_server's kernel and session managers and ``kernel_client.call_kernel``: list the
live kernels and their notebooks, tell which are busy (the one busy check: pause and the idle
watcher use it), start a kernel for a notebook (its session, reused or created), stop kernels,
checkpoint and restore (``kernel_protocol`` requests, ``CheckpointReply`` / ``RestoreReply``),
hold a kernel (refuse its cells while a pause takes its cut) and lift the hold.
``guard_kernel_starts`` wraps jupyter_server's kernel starts: refused with a 409 while a pause is
in flight, and otherwise started with the server's resolved store and workspace in their
environment (one store for the Pause button and the magics). ``seed_session_kernels`` gives the
kernels of notebook sessions their string hash seed (``HashSeeds``: the notebook's own, or the
seed of the snapshot the kernel is started to take back).

Invariants: a kernel call that does not answer ``ok`` raises ``KernelCallError`` naming the
kernel, its notebook and the action; a kernel that has gone (``KERNEL_GONE``) is not an error
where its absence is the point (listing, stopping).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from jupyter_client.multikernelmanager import DuplicateKernelError
from jupyter_core.utils import ensure_async
from tornado import web

from .cell_watch import RunningCells
from .errors import KernelCallError
from .kernel_client import call_kernel
from .kernel_protocol import (
    CheckpointReply,
    CheckpointRequest,
    HoldRequest,
    Request,
    RestoreReply,
    ResumeRequest,
)
from .notebook_sessions import Claim, NotebookKernels, notebook_key, session_notebook
from .paused_record import PausedRecord, safe_notebook_path

KERNEL_GONE = (KeyError, web.HTTPError)  # jupyter_server's kernel manager raises a 404 HTTPError
Progress = Callable[[dict[str, Any]], None]


#: How often a stopping kernel's process is polled, and for how long at most before
#: jupyter_client's own graceful stop takes over (which polls every 0.1 s: up to a third of a
#: pause's fixed cost, docs/benchmarks.md, issue 31 item 2).
EXIT_POLL_SECONDS = 0.01
EXIT_WATCH_SECONDS = 1.0


async def exited(manager: Any) -> None:
    """Ask the kernel of ``manager`` (a jupyter_client ``KernelManager``) to shut down, then
    return once its process is gone, or after ``EXIT_WATCH_SECONDS`` (the caller's
    ``shutdown_kernel`` then waits, escalates to a signal, and cleans up as always).

    As jupyter_client's own shutdown does, the manager is marked ``shutting_down`` and its
    restarter stopped before the request: a restarter that saw the exited kernel would start it
    again under the caller's shutdown (an idle pause hung in ``releasing`` that way)."""
    manager.shutting_down = True
    manager.stop_restarter()
    await ensure_async(manager.request_shutdown())
    deadline = time.monotonic() + min(EXIT_WATCH_SECONDS, manager.shutdown_wait_time / 2)
    while await ensure_async(manager.is_alive()) and time.monotonic() < deadline:
        await asyncio.sleep(EXIT_POLL_SECONDS)


class KernelGateway:
    """The kernels of one server; ``store_url``/``workspace`` go into every kernel request."""

    def __init__(self, kernel_manager: Any, session_manager: Any, *, store_url: str,
                 workspace: str, on_cell: Callable[[str], None] | None = None,
                 on_activity: Callable[[str], None] | None = None,
                 paused: Callable[[], PausedRecord | None] = lambda: None):
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.store_url = store_url
        self.workspace = workspace
        # the seeds of the notebooks' kernels (``seed_session_kernels`` gives them to sessions)
        self.seeds = HashSeeds(workspace, paused)
        # one kernel per notebook, whether the lab or a resume asks first (``install`` wraps the
        # sessions API's ``create_session``: ``serve_one_kernel_per_notebook``)
        self.notebook_kernels = NotebookKernels(session_manager, kernel_manager)
        # ``on_cell(kid)``: a user's cell started; ``on_activity(kid)``: any message of one
        self.cells = RunningCells(on_cell, on_activity)

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

    def watch_cells(self, kid: str) -> None:
        """Follow which cell ``kid`` runs (``running_cell``); called once it started."""
        self.cells.prune(set(self.live_ids()))
        try:
            self.cells.watch(kid, self.kernel_manager.get_kernel(kid))
        except KERNEL_GONE:
            return

    def running_cell(self, kid: str) -> tuple[int | None, float | None]:
        """``(execution_count, running_seconds)`` of the cell a busy kernel runs (``None``
        where the server did not see it start)."""
        cell = self.cells.current(kid)
        if cell is None:
            return None, None
        count, started = cell
        return count, max(0.0, time.time() - started)

    async def notebooks(self) -> dict[str, str]:
        """kernel id -> notebook path of every session; a session the lab created with a UUID
        path and has not renamed yet counts as its notebook's (``notebook_of_path``). Listing
        races with kernels shutting down (jupyter_server raises for a kernel that vanished
        mid-listing): try again."""
        for _ in range(3):
            try:
                sessions = await self.session_manager.list_sessions()
            except KERNEL_GONE:
                continue
            return {s["kernel"]["id"]: self.notebook_kernels.notebook_of_path(s["path"])
                    for s in sessions if s.get("kernel")}
        return {}

    # -- start, stop ------------------------------------------------------------------------
    async def claim(self, notebook: str | None) -> Claim:
        """Hold ``notebook``'s claim (``NotebookKernels.claim``): no other kernel starts for it,
        and the lab's session requests for it wait, until ``Claim.release``."""
        return await self.notebook_kernels.claim(safe_notebook_path(notebook) if notebook
                                                 else None)

    async def start_for(self, notebook: str | None, kernel_name: str | None, *,
                        hash_seed: str | None = None) -> str:
        """A kernel for ``notebook``: its live kernel (``NotebookKernels.kernel_of``: a session
        of its path, or the lab's just created for it), else a new session; without a notebook
        a bare kernel. The caller holds the notebook's ``claim``. A kernel started here gets
        ``hash_seed`` (a snapshot's; ``None``: the notebook's own). A running kernel is reused
        as it is, whatever its seed: it is the user's, never restarted behind their back (its
        restore report says in one line that the seeds differ)."""
        kernel_name = kernel_name or self.kernel_manager.default_kernel_name
        if not notebook:
            env = {"env": {**os.environ, "PYTHONHASHSEED": hash_seed}} if hash_seed else {}
            return await self.kernel_manager.start_kernel(kernel_name=kernel_name, **env)
        path = safe_notebook_path(notebook)
        live = await self.notebook_kernels.kernel_of(path)
        if live is not None:
            return live
        with self.seeds.starting(path, hash_seed):
            return await self.notebook_kernels.create(path, kernel_name)

    def close(self) -> None:
        """Stop following cells (the server stops)."""
        self.cells.close()

    async def stop(self, ids: list[str]) -> None:
        """Stop the kernels of ``ids`` at once: each stop is jupyter_client's graceful shutdown,
        mostly the kernel's own interpreter teardown (0.2-0.3 s once torch is imported), so
        several notebooks stop in the time of the slowest, not of their sum. The shutdown is
        requested first and the process watched every ``EXIT_POLL_SECONDS`` (``exited``), so
        jupyter_client's stop, which polls every 0.1 s, then finds it gone at once."""

        async def stop_one(kid: str) -> None:
            self.cells.forget(kid)
            try:
                await exited(self.kernel_manager.get_kernel(kid))
                await self.kernel_manager.shutdown_kernel(kid)
            except KERNEL_GONE:
                return

        await asyncio.gather(*(stop_one(kid) for kid in ids))

    # -- kernel calls -----------------------------------------------------------------------
    async def checkpoint(self, kid: str, *, name: str | None, notebook: str | None,
                         timeout: float, on_progress: Progress,
                         reason: str | None = None) -> CheckpointReply:
        request = CheckpointRequest(self.store_url, self.workspace, name, notebook, reason)
        return CheckpointReply.from_result(
            await self._call(kid, notebook, request, timeout, on_progress))

    async def restore(self, kid: str, *, reference: str, only: list[str] | None,
                      notebook: str | None, timeout: float, on_progress: Progress,
                      on_sent: Callable[[], None] | None = None) -> RestoreReply:
        """The request goes into the kernel's queue at once (``queue_now``: behind a cell it
        runs, before any cell sent after it), then ``on_sent()``; progress is followed."""
        request = ResumeRequest(self.store_url, self.workspace, reference, only, notebook)
        return RestoreReply.from_result(
            await self._call(kid, notebook, request, timeout, on_progress, queue_now=True,
                             on_sent=on_sent))

    async def hold(self, kid: str, *, pausing: bool, reason: str | None, timeout: float) -> None:
        """``pausing``: from now on the kernel refuses every cell (a running one ends first);
        ``pausing=False`` lifts that."""
        await self._call(kid, None, HoldRequest(pausing, reason), timeout, None, queue_now=True)

    async def _call(self, kid: str, notebook: str | None, request: Request, timeout: float,
                    on_progress: Progress | None, *, queue_now: bool = False,
                    on_sent: Callable[[], None] | None = None) -> dict[str, Any]:
        outcome = await call_kernel(self.kernel_manager, kid, request, timeout=timeout,
                                    on_progress=on_progress, queue_now=queue_now,
                                    on_sent=on_sent)
        if not outcome.ok:
            raise KernelCallError(f"kernel {kid} ({notebook or 'no notebook'}): {request.action}: "
                                  f"{outcome.error}: {outcome.message}")
        return outcome.result or {}


class KernelStartRefused(web.HTTPError, DuplicateKernelError):
    """A 409 for every REST route that starts a kernel: the kernels API passes an ``HTTPError``
    on as it is, the sessions API answers 409 with ``str(exc)`` only for a
    ``DuplicateKernelError`` (any other exception becomes a 500)."""

    def __init__(self, reason: str):
        super().__init__(409, reason)
        self.reason_text = reason

    def __str__(self) -> str:
        return self.reason_text


def guard_kernel_starts(kernel_manager: Any, refusal: Callable[[], str | None],
                        env: dict[str, str], on_start: Callable[[str], None]) -> None:
    """Make ``kernel_manager.start_kernel`` answer 409 with ``refusal()`` while that is not
    ``None``, add ``env`` to every kernel's environment and call ``on_start(kernel_id)`` once
    it started. Every start goes through it: ``POST /api/kernels``, a new session, our
    resume."""
    start = kernel_manager.start_kernel

    async def start_kernel(*args: Any, **kwargs: Any) -> str:
        reason = refusal()
        if reason is not None:
            raise KernelStartRefused(reason)
        # jupyter_client takes ``env`` as the kernel's whole environment (default: ours)
        kwargs["env"] = {**(kwargs.get("env") or os.environ), **env}
        kid = await start(*args, **kwargs)
        on_start(kid)
        return kid

    kernel_manager.start_kernel = start_kernel


class HashSeeds:
    """``PYTHONHASHSEED`` for the kernels of notebook sessions. A notebook's own seed
    (``for_notebook``) is a function of the workspace and the notebook's path (as the sessions
    API and the lab name it, as snapshots record it), so every kernel of a notebook, on every pod
    and after every restart, has the same one. A kernel started to take a snapshot back gets the
    snapshot's seed instead (``kept``): it travels in the manifest and the paused record, and
    differs from the notebook's own where the notebook was renamed or moved, the workspace id is
    another, or the server's environment set one. Sets of strings then iterate after a resume as
    in the kernel the snapshot was taken in (the kernel checks: ``kernel_hooks.session_state``).

    ``paused()`` is the workspace's paused record (``None``: nothing paused)."""

    def __init__(self, workspace: str, paused: Callable[[], PausedRecord | None] = lambda: None):
        self.workspace = workspace
        self.paused = paused
        self._starting: dict[str, str] = {}  # notebook -> the seed a resume starts it with

    def for_notebook(self, path: str) -> str:
        key = f"{self.workspace}\n{notebook_key(path)}".encode()
        return str(int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big"))

    def kept(self, path: str) -> str | None:
        """The seed a kernel of notebook ``path`` starts with to take a snapshot back: the one a
        resume starts it with (``starting``), else the paused record's for that notebook (the
        lab reopens a paused notebook's session before the user resumes); ``None``: none."""
        path = notebook_key(path)
        if path in self._starting:
            return self._starting[path]
        record = self.paused()
        for kernel in record.kernels if record else ():
            if kernel.hash_seed and kernel.notebook and notebook_key(kernel.notebook) == path:
                return kernel.hash_seed
        return None

    @contextmanager
    def starting(self, path: str, seed: str | None) -> Iterator[None]:
        """While a resume starts the session of notebook ``path``: its kernel gets ``seed``
        (``None``: the seed it would get anyway)."""
        if seed is None:
            yield
            return
        key = notebook_key(path)
        self._starting[key] = seed
        try:
            yield
        finally:
            self._starting.pop(key, None)


def seed_session_kernels(session_manager: Any, seeds: HashSeeds) -> None:
    """Add the notebook's seed to the environment of every session's kernel: jupyter_server's
    ``SessionManager.start_kernel_for_session`` takes that environment from
    ``get_kernel_env(path, name)``; the notebook is ``session_notebook(path, name)`` (JupyterLab
    asks with a UUID path and the file's name, so ``path`` alone is not the key). A snapshot's seed
    (``HashSeeds.kept``) wins; else a seed already in the server's environment is the user's
    choice and stays; else the notebook's own."""
    kernel_env = session_manager.get_kernel_env

    def get_kernel_env(path: str | None, name: Any = None) -> dict[str, str]:
        env = kernel_env(path, name)
        notebook = session_notebook(path, name)  # the lab's request has a UUID path
        if not notebook:
            return env
        seed = seeds.kept(notebook)
        if seed is None and "PYTHONHASHSEED" not in env:
            seed = seeds.for_notebook(notebook)
        return env if seed is None else {**env, "PYTHONHASHSEED": seed}

    session_manager.get_kernel_env = get_kernel_env
