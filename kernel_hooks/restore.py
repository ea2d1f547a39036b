"""Resume: a signed manifest + blobs -> objects back in the namespace, with a full report.

Call order inside ``take_resume``: resolve the reference; take the snapshot's single-flight
``RestoreLease``; load and verify the manifest; judge compatibility (``incompatible`` stops
here); put back the packages installed in the session (``packages.install_packages``) and the
directories of ``c.GkeResume.extra_paths`` (``extra_paths.restore_paths``); then the
stages, each once and in order: plan where every storage goes
(``resume_plan.make_plan``), allocate (``StorageLoader``), read every blob in parallel, each
verified against its digest (``start``), unpickle the graph record by record with storages
arriving through ``rebuild``, finish (``finish``: every read and device copy landed). Then find
what a damaged blob or a failed record cost and, only then, assign the names in one step and
apply the session state, then the interpreter state (``interpreter_state``), then start what
the session had running and its library starts only on use (``rebuild.Loading.after``: a
DataLoader's persistent workers). A failure before the names are assigned leaves the namespace
as it was. Last, the verdict is judged again on what came
back (``_judge_left_out``): ``exact`` only when nothing the session held was left out (an object,
a placeholder inside one, a state entry, part of the session state, what stayed on the old pod,
a package or an extra path).
"""

from __future__ import annotations

import gc
import os
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from jupyter_gkeresume.errors import GkeResumeError, InvalidInputError
from jupyter_gkeresume.snapshot import (
    Manifest,
    SigningKey,
    SnapshotStore,
    check_compatible,
    environment_fingerprint,
    load_manifest,
    resolve,
)
from jupyter_gkeresume.snapshot.compat import Verdict
from jupyter_gkeresume.snapshot.lease import RestoreLease

from . import interpreter_state, rebuild, session_state, singletons, weak_references
from .capture import HOOKS_RECORD, SESSION_RECORD
from .cuda_engine import DeviceAllocation, get_engine
from .errors import OtherNotebookError
from .extra_paths import NOT_PUT_BACK, restore_paths
from .graph import read_graph
from .loader import StorageLoader
from .notebooks import notebook_path
from .packages import NOT_INSTALLED, install_packages
from .placeholders import Uncaptured
from .progress import PhaseBytes
from .results import Progress, ResumeResult, Skipped
from .resume_plan import make_plan

MAX_WALK = 2_000_000
DEFAULT_LEASE_WAIT = 600.0


#: Not walked into: plain values, and what leads out of the user's data into the whole process
#: (modules, classes, functions, the CUDA engine behind restored device memory).
_WALK_LEAVES = (str, bytes, int, float, type(None), types.ModuleType, type, types.FunctionType,
                types.BuiltinFunctionType, DeviceAllocation)


def _reaches(value: object, storages: set[int], objects: set[int]) -> bool:
    """Whether ``value`` reaches one of ``objects`` (by id) or a tensor/array whose storage is in
    ``storages`` (untyped storage handles, buffer and CUDA array ids). A graph too large to walk counts as
    reaching: better reported as not restored than restored with damaged bytes."""
    torch = sys.modules.get("torch")
    numpy = sys.modules.get("numpy")
    seen: set[int] = set()
    stack = [value]
    while stack and len(seen) < MAX_WALK:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if id(obj) in objects or id(obj) in storages:
            return True
        if torch is not None and isinstance(obj, torch.Tensor):
            try:
                if obj.untyped_storage()._cdata in storages:
                    return True
            except RuntimeError:  # sparse and other storage-less layouts
                stack.extend(gc.get_referents(obj))
            continue
        if numpy is not None and isinstance(obj, numpy.ndarray):
            base = obj
            while isinstance(base, numpy.ndarray) and base.base is not None:
                base = base.base
            if id(base) in storages:
                return True
            continue
        if isinstance(obj, _WALK_LEAVES):
            continue
        stack.extend(gc.get_referents(obj))
    return bool(stack)


def take_resume(
    namespace: dict[str, Any],
    store: SnapshotStore,
    key: SigningKey,
    *,
    reference: str | None = "latest",
    only: list[str] | None = None,
    progress: Callable[[Progress], None] | None = None,
    continuing_cell: bool = False,
    shell: Any = None,
    lease_wait: float | None = None,
    into_notebook: str | None = None,
) -> ResumeResult:
    """Restore a snapshot into ``namespace``; see the module docstring for the order.
    ``into_notebook``: the notebook of ``namespace``; a snapshot that names another notebook
    raises ``OtherNotebookError`` (None: any notebook, the caller asked for it explicitly).

    One restore of a snapshot runs at a time, across kernels, tabs and pods: the others wait for
    its ``RestoreLease`` up to ``lease_wait`` seconds (``GKERESUME_LEASE_WAIT``, default 600),
    then get ``LeaseHeldError`` naming the holder."""
    started = time.monotonic()
    snapshot_id = resolve(store, reference, key)
    if lease_wait is None:
        lease_wait = float(os.environ.get("GKERESUME_LEASE_WAIT", DEFAULT_LEASE_WAIT))
    with RestoreLease(store, snapshot_id.lower()).hold(wait=lease_wait):
        return _restore(namespace, store, key, snapshot_id, only=only,
                        progress=progress, continuing_cell=continuing_cell, shell=shell,
                        started=started, into_notebook=into_notebook)


def _restore(
    namespace: dict[str, Any], store: SnapshotStore, key: SigningKey, snapshot_id: str, *,
    only: list[str] | None, progress: Callable[[Progress], None] | None,
    continuing_cell: bool, shell: Any, started: float, into_notebook: str | None,
) -> ResumeResult:
    manifest = load_manifest(store, snapshot_id, key)
    taken_in = notebook_path(manifest.notebook)
    if into_notebook is not None and taken_in is not None and taken_in != into_notebook:
        raise OtherNotebookError(snapshot_id, taken_in, into_notebook)
    verdict = check_compatible(manifest, environment_fingerprint())
    if verdict.level == "incompatible":
        raise GkeResumeError(f"snapshot {snapshot_id} cannot load here: {'; '.join(verdict.reasons)}")
    if only:
        unknown = [n for n in only if n not in manifest.saved_names]
        if unknown:
            raise InvalidInputError(
                f"not in snapshot {snapshot_id}: {', '.join(unknown)} "
                f"(it has: {', '.join(manifest.saved_names)})"
            )
    result = ResumeResult(snapshot_id)
    result.packages = install_packages(store, manifest.packages, manifest.blobs,
                                       progress)  # 0. before any unpickling
    result.paths = restore_paths(store, manifest.extra_paths)  # 0. an object may open its file
    left_out = [line for line in [*result.packages, *result.paths]
                if f": {NOT_INSTALLED}: " in line or NOT_PUT_BACK in line]
    engine = get_engine()
    priority = list(dict.fromkeys([*(only or []), *manifest.records]))
    plan = make_plan(manifest.storages, priority, engine)  # 1. plan: devices, placement
    result.warnings.extend(plan.warnings)
    loader = StorageLoader(store, manifest, plan, engine, store.concurrency, progress,
                           result.warnings)  # 2. allocate
    reading = rebuild.Loading(loader, namespace)
    unpickling = _AfterReads(loader, progress) if progress else None
    try:
        loader.start()  # 3. read
        graph = loader.read_graph_blob()
        with rebuild.loading(reading), singletons.restoring():  # 4. unpickle
            values, failures, placeholders = read_graph(
                graph, manifest.graph_ends, PhaseBytes("unpickling", len(graph), unpickling).add)
    except BaseException:
        loader.abort()
        reading.take_back()
        raise
    try:
        loader.finish()  # 5. finish: every read and device copy landed
    except BaseException:
        reading.take_back()
        raise
    if unpickling is not None:
        unpickling.flush()
    result.bytes_read = loader.bytes_read
    loaded = dict(zip(manifest.records, values, strict=True))
    reasons = {manifest.records[i]: why for i, why in failures.items()}

    damaged = loader.storage_identities(set(loader.damaged))
    lost = {id(p) for p in placeholders}
    if damaged or lost:
        why = "; ".join(sorted(set(loader.damaged.values()))) or "a record it uses failed"
        for name in manifest.saved_names:
            if name not in reasons and _reaches(loaded[name], damaged, lost):
                reasons[name] = f"uses what could not be restored: {why}"
    not_fitted = loader.storage_identities(set(loader.not_fitted))
    if not_fitted:
        for name in manifest.saved_names:
            if name not in reasons and _reaches(loaded[name], not_fitted, set()):
                result.warnings.append(
                    f"{name}: did not fit on {', '.join(sorted(set(loader.not_fitted.values())))}"
                    ": restored on the CPU"
                )
    wanted = only or manifest.saved_names
    restored = {n: loaded[n] for n in wanted if n not in reasons}
    lost_weak = weak_references.lost_referents(reading.weak)
    for name, value in restored.items() if lost_weak else ():
        if _reaches(value, set(), set(lost_weak)):
            why = "; ".join(sorted({w for i, w in lost_weak.items() if _reaches(value, set(), {i})}))
            result.warnings.append(f"{name}: {why}")
            left_out.append(f"{name} ({why})")
    for obj in manifest.objects:
        if obj.status == "skipped":
            result.not_restored.append(Skipped(obj.name, obj.type, obj.reason or "not captured"))
        elif obj.name in reasons and obj.name in wanted:
            result.not_restored.append(Skipped(obj.name, obj.type, reasons[obj.name]))
        elif obj.reason and obj.name in restored:  # back, with placeholders inside it
            result.warnings.append(f"{obj.name}: {obj.reason}")
            left_out.append(f"{obj.name} ({obj.reason})")

    namespace.update(restored)
    for name in reading.added:  # globals notebook functions needed: not those that failed
        if name not in restored and (name in reasons or weak_references.is_a(namespace[name], Uncaptured)):
            del namespace[name]
    result.restored = list(restored)
    result.modules = [n for n, v in restored.items() if weak_references.is_a(v, types.ModuleType)]
    state = loaded.get(SESSION_RECORD)
    if isinstance(state, dict):
        session_state.continue_hook_ids(state)
    if only is None:
        if isinstance(state, dict):
            lost: list[str] = []
            session_state.restore(state, lost)
            _continue_numbering(shell, manifest, state, continuing_cell)
            result.warnings.extend(lost)
            if lost:  # each said in its own warning line already
                left_out.append(f"session state ({len(lost)} of the warnings)")
            left_out += [f"{s['name']} ({s['type']}) stayed on the old pod"
                         for s in state.get("left_out", [])]
        else:
            result.warnings.append(f"session state not restored: {reasons.get(SESSION_RECORD)}")
            left_out.append(result.warnings[-1])
        named = _restore_interpreter_state(manifest, loaded, reasons, result)
        left_out += [line.split(" not restored", 1)[0] for line in named]
    for what, start in reading.after:  # the session is whole: start what it had running
        try:
            start()
        except Exception as exc:  # it starts again when the session next uses it
            result.warnings.append(f"{what} did not start again: {type(exc).__name__}: {exc}")
            left_out.append(result.warnings[-1])
    _judge_left_out(verdict, result, left_out)
    result.seconds = time.monotonic() - started
    if progress is not None:
        progress(Progress("done", loader.bytes_read, loader.bytes_read, result.seconds))
    for hook in loaded.get(HOOKS_RECORD) or []:
        try:
            hook(result)
        except Exception as exc:  # a user hook must not undo a successful restore
            result.warnings.append(f"on_resume hook {getattr(hook, '__name__', hook)} failed: {exc}")
    return result


def _judge_left_out(verdict: Verdict, result: ResumeResult, left_out: list[str]) -> None:
    """``result.verdict``: the compatibility verdict, at least ``partial`` with one reason when
    an object or any of ``left_out`` did not come back (``exact`` only when nothing did)."""
    if result.not_restored:
        names = ", ".join(s.name for s in result.not_restored)
        verdict.worsen("partial", f"not restored: {names}")
    if left_out:
        verdict.worsen("partial", f"left out: {'; '.join(left_out)}")
    result.verdict = verdict.to_dict()


def _restore_interpreter_state(manifest: Manifest, loaded: dict[str, Any],
                               reasons: dict[str, str], result: ResumeResult) -> list[str]:
    """Every interpreter-state record restored (``result.state``) or named in a warning (the
    lines returned too)."""
    states, failures = {}, {}
    for record in manifest.records:
        entry = interpreter_state.entry_name(record)
        if entry is not None and record in reasons:
            failures[entry] = reasons[record]
        elif entry is not None:
            states[entry] = loaded[record]
    result.state, named = interpreter_state.restore_all(states, failures)
    result.warnings.extend(named)
    return named


class _AfterReads:
    """Unpickling overlaps the reads and waits on them: until every storage is in, what the
    user waits for is the reading, so unpickling reports go out only then (the two would
    interleave and a bar would jump to the unpickling band and back); ``flush`` sends the last
    one held back once the reads are over."""

    def __init__(self, loader: StorageLoader, progress: Callable[[Progress], None]):
        self.loader, self.progress = loader, progress
        self.held: Progress | None = None

    def __call__(self, report: Progress) -> None:
        if self.loader.reads_done:
            self.held = None
            self.progress(report)
        else:
            self.held = report

    def flush(self) -> None:
        if self.held is not None:
            self.progress(self.held)
            self.held = None


def _continue_numbering(shell: Any, manifest: Manifest, state: dict, continuing_cell: bool) -> None:
    """Give the next cell the number it would have had (the snapshot's ``execution_count``: see
    ``api.next_cell_number``), with the input history up to it and its ``_iN`` variables.
    Inside a counted cell (a magic) that cell moves the count once more: before this runs with
    IPython 9, after with IPython 8 (when the count is one past the history, the cell has moved
    it already)."""
    if shell is None:
        return
    following = int(state.get("execution_count") or manifest.execution_count)
    history = manifest.history
    manager = shell.history_manager
    moved = shell.execution_count == len(manager.input_hist_raw)
    if history:
        # A new history session: line numbers restart at the checkpoint's, without clashing
        # with the lines this kernel already logged.
        manager.reset(new_session=True)
        padded = (list(history) + [""] * following)[:following]
        manager.input_hist_parsed[:] = padded
        manager.input_hist_raw[:] = padded
        _input_variables(shell, padded)
    shell.execution_count = following - 1 if continuing_cell and not moved else following


def _input_variables(shell: Any, history: list[str]) -> None:
    """``_i1`` ... ``_iN`` and ``_i``, ``_ii``, ``_iii`` as IPython's ``store_inputs`` leaves them
    after the history's last cell (``history[0]`` is IPython's empty line 0), on the shell's
    history manager too, so that the next cell moves them on from there."""
    manager, last = shell.history_manager, len(history) - 1
    shell.user_ns.update({f"_i{number}": history[number] for number in range(1, last + 1)})

    def before(steps: int) -> str:
        return history[last - steps] if last - steps > 0 else ""

    manager._i00, manager._i, manager._ii, manager._iii = (before(0), before(1), before(2),
                                                            before(3))
    shell.user_ns.update(_i=manager._i, _ii=manager._ii, _iii=manager._iii)
