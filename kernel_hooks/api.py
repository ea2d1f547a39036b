"""The kernel_hooks Python API: the same verbs as the magics, returning result objects.

Defaults: the namespace is the running IPython shell's user namespace; the store and workspace
come from ``jupyter_gkeresume.workspace`` (``GKERESUME_STORE``, ``GKERESUME_WORKSPACE``, ...);
the signing key from ``jupyter_gkeresume.snapshot.signing``; the notebook from ``notebooks``.
"""

from __future__ import annotations

import types
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
from jupyter_gkeresume.snapshot.format import SNAPSHOT_ID_RE, validate_snapshot_name
from jupyter_gkeresume.snapshot.signing import key_of_workspace
from jupyter_gkeresume.workspace import resolve_store_url, resolve_workspace_id

from . import collector, library_state, warnings_shown
from .capture import take_checkpoint
from .notebooks import newest_snapshot, this_notebook
from .replay import ReplayPlan, plan_replay
from .results import CheckpointResult, Progress, ReplayResult, ResumeResult


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


def next_cell_number(shell: Any) -> int:
    """The number the next counted cell gets, the same from inside a cell (a magic, a call) and
    from the server's silent request (not counted): one past the input history, whose entry for
    a cell is stored before it runs. Not ``shell.execution_count``: IPython 9 moves it when a
    cell starts (IPython/core/interactiveshell.py ``run_cell``), IPython 8 when it ends."""
    return len(shell.history_manager.input_hist_raw)


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
    ``user`` / ``idle`` / ``shutdown``. The snapshot records the number the next cell gets
    (``next_cell_number``). Warnings the session has shown stay shown (``warnings_shown.kept``);
    the cyclic garbage collector waits until it is done (``collector``), and so do the
    session's trace and profile functions (``library_state.trace_functions_paused``: a
    profiler the notebook set recorded every call the checkpoint made)."""
    if name is not None:
        validate_snapshot_name(name)
    namespace, shell = _target(namespace)
    with collector.paused(), library_state.trace_functions_paused():
        snapshots = open_store(store, workspace)
        with warnings_shown.kept():
            return take_checkpoint(
                namespace,
                snapshots,
                load_signing_key(workspace=snapshots.workspace),
                name=name,
                notebook=this_notebook(notebook),
                hidden=shell.user_ns_hidden if shell else None,
                execution_count=next_cell_number(shell) if shell else 0,
                history=list(shell.history_manager.input_hist_raw) if shell else None,
                progress=progress,
                why=reason,
            )


def resume(
    reference: str | None = None,
    *,
    any_notebook: bool = False,
    notebook: str | None = None,
    only: list[str] | None = None,
    namespace: dict[str, Any] | None = None,
    store: str | None = None,
    workspace: str | None = None,
    key_file: str | None = None,
    progress: Callable[[Progress], None] | None = None,
    continuing_cell: bool = False,
    lease_wait: float | None = None,
) -> ResumeResult:
    """Restore a snapshot into the namespace; report what came back.

    ``reference``: an id or a name, or None / ``latest``: the newest snapshot of this notebook
    (``notebook``, else this kernel's: ``notebooks.this_notebook``), of the whole workspace with
    ``any_notebook`` or outside a notebook. Only signed snapshots count. A snapshot taken in
    another notebook than this one is refused (``OtherNotebookError``) unless ``any_notebook``
    asks for it explicitly: a record or reference that names it cannot put one notebook's state
    into another.
    ``key_file``: verify the snapshot with the key in that file, an earlier key of this
    workspace (after the key changed), refused unless it is one (``key_of_workspace``); it
    needs an explicit id. ``continuing_cell`` is for callers running inside a counted cell (the magics).
    ``lease_wait``: seconds to wait while another restore of the same snapshot runs. The cyclic
    garbage collector waits until it is done (``collector``).
    """
    if key_file and not (reference and SNAPSHOT_ID_RE.match(reference)):
        raise InvalidInputError("a key file verifies one snapshot named by its id, not "
                                f"{reference or 'the default'!r}: pass its id")
    namespace, shell = _target(namespace)
    with collector.paused():
        snapshots = open_store(store, workspace)
        key = (key_of_workspace(key_file, snapshots.workspace) if key_file
               else load_signing_key(workspace=snapshots.workspace))
        into = None if any_notebook else this_notebook(notebook)
        if reference is None or reference.strip() == "latest":
            reference = newest_snapshot(snapshots, key, into)
        from .restore import take_resume  # the resume's machinery: a checkpoint does not load it

        with warnings_shown.kept():
            return take_resume(namespace, snapshots, key, reference=reference, only=only,
                               progress=progress, continuing_cell=continuing_cell, shell=shell,
                               lease_wait=lease_wait, into_notebook=into)


def replay(
    missing: list[str],
    *,
    namespace: dict[str, Any] | None = None,
    history: list[str] | None = None,
    on_plan: Callable[[ReplayPlan], None] | None = None,
) -> ReplayResult:
    """Rebuild ``missing`` names by re-running the cells of the input history that define them
    (``replay.plan_replay``), on a copy of the namespace; only the missing names are taken back.

    ``history`` defaults to the shell's input history (index = execution count). ``on_plan`` is
    called with the plan before any cell runs. A cell that raises stops the replay; what came
    back before it is kept and the failure is in ``ReplayResult.failed``.
    """
    namespace, shell = _target(namespace)
    if history is None:
        if shell is None:
            raise InvalidInputError("no IPython shell here: pass history=")
        history = list(shell.history_manager.input_hist_raw)
    plan = plan_replay(history, missing)
    if on_plan is not None:
        on_plan(plan)
    result = ReplayResult(cells=plan.cells, unresolved=plan.unresolved)
    if not plan.cells:
        return result
    if shell is not None:
        transform = shell.transform_cell
    else:
        from IPython.core.inputtransformer2 import TransformerManager

        transform = TransformerManager().transform_cell
    scratch = dict(namespace)
    for number, source in zip(plan.cells, plan.sources, strict=True):
        try:
            exec(compile(transform(source), f"<replay In[{number}]>", "exec"), scratch)
        except Exception as exc:  # the user's own cell failed: say which, keep the rest
            result.failed = f"In[{number}] failed: {type(exc).__name__}: {exc}"
            break
    result.back = [n for n in missing if n in scratch]
    namespace.update({n: _bound_to(namespace, scratch[n], scratch) for n in result.back})
    return result


def _bound_to(namespace: dict[str, Any], value: Any, scratch: dict[str, Any]) -> Any:
    """A function (or the methods of a class) the replay defined, bound to ``namespace`` instead
    of the scratch copy, as if its cell had run there (redefining a global then takes effect)."""
    if isinstance(value, types.FunctionType) and value.__globals__ is scratch:
        bound = types.FunctionType(value.__code__, namespace, value.__name__, value.__defaults__,
                                   value.__closure__)
        bound.__dict__.update(value.__dict__)
        for attribute in ("__kwdefaults__", "__qualname__", "__annotations__", "__doc__",
                          "__module__"):
            setattr(bound, attribute, getattr(value, attribute))
        return bound
    if isinstance(value, type):
        for attribute, member in list(vars(value).items()):
            if isinstance(member, types.FunctionType) and member.__globals__ is scratch:
                setattr(value, attribute, _bound_to(namespace, member, scratch))
    return value


def list_snapshots(*, store: str | None = None, workspace: str | None = None) -> list[SnapshotSummary]:
    """Committed snapshots of the workspace, newest first, each with its verdict here."""
    snapshots = open_store(store, workspace)
    return catalog_list(snapshots, load_signing_key(workspace=snapshots.workspace),
                        environment_fingerprint())


def pause(name: str | None = None) -> dict[str, Any]:
    """Ask the jupyter-gkeresume server running this kernel to pause the workspace: it saves the
    notebooks open in the connected labs, checkpoints every kernel of the workspace (not only
    this one) once the running cells have ended, verifies the snapshots, then releases. Returns
    the server's answer (``{"operation": ..., "state": ...}``) at once; the pause itself runs
    after the calling cell ends. ``ServerUnreachableError`` without a server extension,
    ``ServerRefusedError`` when the server refuses (the message says why)."""
    from . import server_link

    return server_link.request_pause(name)
