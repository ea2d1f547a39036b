"""Checkpoint: the user namespace -> blobs + signed manifest, committed last and read back.

Call order inside ``take_checkpoint``: synchronize devices; choose the names (minus IPython's own);
capture the session record and the interpreter state (``interpreter_state``: one record per entry,
after the variables); pickle them as one graph (``graph.write_graph``) while storages are
collected; put storage blobs in parallel, then the graph blob, then the packages installed in the
session (``packages.capture_packages``), then the directories of ``c.GkeResume.extra_paths``
(``extra_paths.capture_paths``), through one ``SnapshotWriter``; build the manifest and
hand it to ``SnapshotWriter.commit`` (sign, create-only commit, read back and check, removed again
if the check fails). What no snapshot carries (child processes, threads of the session, files open
for writing outside the home volume: ``left_behind``) is reported with the skipped objects. The
kernel side captures; the writer commits. What stays behind is also carried in the session record
(``left_out``), so the resume's verdict is not ``exact`` for it. Any exception leaves no visible
snapshot and the namespace untouched (capture only reads it). The user's names
are pickled in ``record_order.pickling_order``: a name after the names its notebook code uses
(what those come back without is named under them), and names that seem to hold no storages
first (a resume then unpickles them while the blobs are still being read, not after the last
one); the namespace keeps its order (``Manifest.objects``).
"""

from __future__ import annotations

import re
import sys
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from jupyter_gkeresume.snapshot import (
    Manifest,
    ObjectRecord,
    SigningKey,
    SnapshotStore,
    environment_fingerprint,
    new_snapshot_id,
)
from jupyter_gkeresume.snapshot.fingerprint import cuda_status
from jupyter_gkeresume.snapshot.writer import SnapshotWriter
from jupyter_gkeresume.units import human_bytes

from . import interpreter_state, library_objects, registry, session_state, weak_references
from .blobwriter import BlobWriter, plan_blobs
from .cuda_engine import get_engine
from .cuda_plan import cuda_index
from .extra_paths import capture_paths
from .graph import write_graph
from .ipython_state import the_shell
from .left_behind import held_key, left_behind, named_under
from .live_objects import LiveObjects
from .packages import capture_packages
from .placeholders import type_name
from .record_order import pickling_order
from .results import CheckpointResult, Progress, Skipped
from .singletons import TheNamespace
from .storages import CollectedStorage, StorageCollector
from .torch_reduce import dynamo_globals

SESSION_RECORD = "__session__"
HOOKS_RECORD = "__resume_hooks__"
#: IPython's history names, which it rebinds at every cell (the output history entry carries
#: what they hold); its other names (``In``, ``exit``, ``get_ipython``) are the shell's while
#: they hold what the shell put there (``hidden``): ``exit = False`` is the user's.
_IPYTHON_NAMES = re.compile(r"\A(_|__|___|_i+|_i\d+|_\d+)\Z")
#: The dunders a module's namespace has of its own (the interpreter's, the kernel's); a dunder a
#: cell set (``__file__ = "train.py"``, ``__version__``) is the user's.
_NAMESPACE_DUNDERS = frozenset({"__name__", "__doc__", "__package__", "__loader__", "__spec__",
                                "__builtins__", "__builtin__", "__cached__", "__annotations__",
                                "__warningregistry__"})


def user_names(namespace: Mapping[str, Any], hidden: Mapping[str, Any]) -> list[str]:
    """Names the user made: not the namespace's own dunders (``_NAMESPACE_DUNDERS``), not
    IPython's history names, not the globals torch.compile installed
    (``torch_reduce.dynamo_globals``), not hidden ones while they hold what they held."""
    names = []
    compiled = dynamo_globals(namespace)
    for name, value in namespace.items():
        if name in _NAMESPACE_DUNDERS or _IPYTHON_NAMES.match(name) or name in compiled:
            continue
        if name in hidden and hidden[name] is value:
            continue
        names.append(name)
    return names


def synchronize_devices() -> None:
    """Wait for in-flight device work (every stream of every context, CuPy and Numba included)
    so no half-computed tensor is copied."""
    engine = get_engine()
    if engine is not None:
        engine.synchronize_all()
        return
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        for index in range(torch.cuda.device_count()):
            torch.cuda.synchronize(index)


def describe(value: object) -> dict[str, Any]:
    """dtype/shape/device of tensors and arrays, for the manifest and the report; nothing for
    an object whose attributes raise (a nested tensor's ``shape``, a dead weak proxy's all):
    a description never fails a checkpoint."""
    out: dict[str, Any] = {}
    if type(value) in weak_references.PROXIES:  # a dead one raises at any lookup
        return out
    try:
        shape = getattr(value, "shape", None)
        if shape is not None and getattr(value, "dtype", None) is not None:
            out["shape"] = [int(d) for d in shape]
            out["dtype"] = str(value.dtype).removeprefix("torch.")
            device = getattr(value, "device", None)
            out["device"] = str(device) if device is not None else "cpu"
    except Exception:  # a library's property: any error means "not described"
        return {}
    return out


def take_checkpoint(
    namespace: Mapping[str, Any],
    store: SnapshotStore,
    key: SigningKey,
    *,
    name: str | None = None,
    notebook: str | None = None,
    hidden: Mapping[str, Any] | None = None,
    execution_count: int = 0,
    history: list[str] | None = None,
    progress: Callable[[Progress], None] | None = None,
    why: str | None = None,
) -> CheckpointResult:
    """Write one snapshot of ``namespace``; see the module docstring for the order. ``why``:
    the manifest's ``reason`` (user, idle, shutdown, checkpoint)."""
    started = time.monotonic()
    timings: dict[str, float] = {}
    synchronize_devices()
    timings["sync"] = time.monotonic() - started

    objects: dict[str, ObjectRecord] = {}
    skipped: list[Skipped] = []
    items: list[tuple[str, object]] = []
    live = LiveObjects()
    shell = the_shell()
    taken = library_objects.held(
        namespace, shell.history_manager.input_hist_parsed if shell is not None else history or [])
    for var in user_names(namespace, hidden or {}):
        value = namespace[var]
        app = registry.by_name.get(var)
        try:  # a dead weakref.proxy raises on isinstance: asked by type only
            reason = (None if weak_references.is_weak(value) or registry.for_object(value)
                      else live.reason(value))
        except Exception as exc:  # a library object that breaks on inspection: itself only
            reason = f"could not be inspected: {type(exc).__name__}: {exc}"[:300]
        if app is not None:  # the user's own save/load wins over every default
            try:
                value, reason = registry.SavedByApp(app.load, app.save(value)), None
            except Exception as exc:  # the user's save hook failed: report, keep going
                reason = f"registered save() failed: {type(exc).__name__}: {exc}"
        if reason is not None:
            objects[var] = ObjectRecord(var, type_name(namespace[var]), "skipped", reason)
            skipped.append(Skipped(var, type_name(namespace[var]), reason))
            continue
        if value is namespace:  # ``g = globals()``: pickle asks no reducer about a dict
            value = TheNamespace()
        elif var in taken:  # ``from matplotlib import rcParams``: the library's own
            value = library_objects.stand_in(taken[var], value)
        items.append((var, value))
    items = pickling_order(items)  # see the docstring
    session, secret_env = session_state.capture(execution_count)
    secrets = [Skipped(f"${n}", "environment variable", "looks like a credential")
               for n in secret_env]
    # a thread or process bound to a skipped name is said once, as that name
    named = {held_key(namespace[n]) for n, o in objects.items() if o.status == "skipped"}
    found = [(key, thing) for key, thing in left_behind() if key is None or key not in named]
    # the resume's verdict names them too; the report names ``found`` below, under its holders
    session["left_out"] = [asdict(s) for s in [*secrets, *(thing for _, thing in found)]]
    skipped.extend(secrets)
    states, state_failed = interpreter_state.capture_all()
    items += [(SESSION_RECORD, session), (HOOKS_RECORD, list(registry.resume_hooks)),
              *((interpreter_state.record_name(n), state) for n, state in states.items())]

    mark = time.monotonic()
    # a state entry that does not pickle travels as NotCaptured, so that the resume names it too
    graph, records, collector, failed = write_graph(
        items, StorageCollector,
        stand_in=lambda name, why: (interpreter_state.NotCaptured(f"not saved: {why}")
                                    if interpreter_state.entry_name(name) else None),
        namespace=namespace)
    timings["pickle"] = time.monotonic() - mark
    for var, reason in failed.items():
        entry = interpreter_state.entry_name(var)
        if entry is not None:
            state_failed[entry] = reason
            continue
        value = namespace.get(var)
        objects[var] = ObjectRecord(var, type_name(value), "skipped", reason)
        skipped.append(Skipped(var, type_name(value), reason))
    for entry, reason in state_failed.items():
        skipped.append(Skipped(entry, "interpreter state", reason))
    owned: dict[str, int] = {}
    for item in collector.items:
        owned[item.owner] = owned.get(item.owner, 0) + item.nbytes
    users = [r for r in records if r.name not in (SESSION_RECORD, HOOKS_RECORD)
             and not interpreter_state.entry_name(r.name)]
    held = {key: rec.name for rec in users for key in rec.note.held}
    skipped.extend(named_under(found, held))  # what the namespace holds: under its name
    alive = {key for key, _ in found} & held.keys()
    for rec in users:
        note = rec.note
        inside = _without(note.uncaptured)
        named = {note.held[key] for key in alive & note.held.keys()}  # said by named_under
        for kind, why in note.uncaptured:
            if (kind, why) not in named:
                skipped.append(Skipped(rec.name, kind, why, inside=True))
        objects[rec.name] = ObjectRecord(
            rec.name, type_name(namespace[rec.name]), "saved",
            f"restored without: {inside}" if inside else None,
            owned.get(rec.name, 0), modules=sorted(note.modules),
            **describe(namespace[rec.name]),
        )

    mark = time.monotonic()
    snapshot = SnapshotWriter(store, key)
    writer = BlobWriter(snapshot, progress=progress, watch_new=why in (None, "checkpoint"))
    written = writer.write_all(plan_blobs(collector.items))
    graph_digest, graph_size, graph_new = writer.write_bytes(graph)
    timings["blobs"] = time.monotonic() - mark
    mark = time.monotonic()
    installed = capture_packages(store, writer.write_more)
    timings["packages"] = time.monotonic() - mark
    for package, reason in installed.not_stored.items():
        skipped.append(Skipped(package, "package installed in the session", reason))
    mark = time.monotonic()
    directories = capture_paths(writer.write_more)
    timings["extra_paths"] = time.monotonic() - mark
    skipped.extend(directories.skipped)
    new_bytes = (written.new_bytes + (graph_size if graph_new else 0) + installed.new_bytes
                 + directories.new_bytes)
    reused_bytes = (written.reused_bytes + (0 if graph_new else graph_size)
                    + sum(installed.sizes.values()) - installed.new_bytes
                    + sum(directories.sizes.values()) - directories.new_bytes)

    mark = time.monotonic()
    if progress is not None:
        progress(Progress("committing", new_bytes + reused_bytes, new_bytes + reused_bytes,
                          mark - started))
    ordered = [objects[n] for n in namespace if n in objects]
    saved = [o.name for o in ordered if o.status == "saved"]
    manifest = Manifest(
        snapshot_id=new_snapshot_id(),
        workspace=store.workspace,
        created=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        graph_blob=graph_digest,
        objects=ordered,
        storages=written.refs,
        blobs={**written.sizes, graph_digest: graph_size, **installed.sizes,
               **directories.sizes},
        records=[r.name for r in records],
        graph_ends=[r.end for r in records],
        name=name,
        notebook=notebook,
        execution_count=execution_count,
        fingerprint=environment_fingerprint(),
        history=session_state.without_credentials(list(history or [])),
        reason=why,
        packages=installed.records,
        hash_seed=session_state.hash_seed(),
        extra_paths=directories.records,
    )
    manifest.totals = {
        "objects": len(ordered), "saved": len(saved), "skipped": len(ordered) - len(saved),
        "bytes": manifest.total_bytes, "new_bytes": new_bytes, "reused_bytes": reused_bytes,
        "storages": len(written.refs),
    }
    manifest.timings = {**timings, "total_before_commit": time.monotonic() - started}
    snapshot.commit(manifest)
    timings["commit"] = time.monotonic() - mark
    seconds = time.monotonic() - started
    if progress is not None:
        progress(Progress("done", manifest.total_bytes, manifest.total_bytes, seconds))
    return CheckpointResult(
        manifest.snapshot_id, name, manifest.total_bytes, new_bytes, reused_bytes, seconds,
        saved, skipped, timings, _gpu_warnings(collector.items), manifest.hash_seed,
        [n for n in saved if weak_references.is_a(namespace.get(n), types.ModuleType)],
    )


def _without(parts: list[tuple[str, str]]) -> str:
    """What a record comes back without, one reason once: ``a, b (why); c (why)``."""
    kinds: dict[str, list[str]] = {}
    for kind, why in parts:
        kinds.setdefault(why, []).append(kind)
    return "; ".join(f"{', '.join(names)} ({why})" for why, names in kinds.items())


def _gpu_warnings(items: list[CollectedStorage]) -> list[str]:
    """Why GPU memory went through torch's own copies instead of the bounded pinned ring."""
    on_gpu = sum(i.nbytes for i in items if cuda_index(i.device) is not None)
    if not on_gpu or get_engine() is not None:
        return []
    return [f"{human_bytes(on_gpu)} of GPU memory copied by torch through host memory as large, "
            f"not through the CUDA engine's pinned ring: {cuda_status()[1]}"]
