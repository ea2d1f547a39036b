"""What a snapshot cannot carry, named at checkpoint time: the kernel's child processes (a
``multiprocessing`` child by its name), the threads the session started, the asyncio tasks it left
pending on the kernel's event loop (those of the kernel's own modules, and those pending when the
extension loaded, are the kernel's) and the callbacks of its own it scheduled there
(``call_later``), the files it has open for writing outside the persistent
volume (and outside the directories stored with each snapshot: ``extra_paths``; ``comes_back``
says what is on them).

Call order: ``remember_baseline()`` when the extension loads: the threads, child processes and open
files of that moment are the kernel's own (IPython's threads; the log file a server's stdout goes
to, which ipykernel keeps open on another descriptor when it captures output; in a plain process,
whatever ran before the API was first used); ``left_behind()`` at each checkpoint returns one
``Skipped`` per other thing that stays on this pod (``KINDS``; ``named_under`` names one that a
user's object holds under that name), which the checkpoint report,
``%checkpoint`` and the lab's pause message list beside the objects that were not saved. It
inspects, never stops anything, and what cannot be inspected (a process gone meanwhile, no
permission) is left out.

Child processes: when the kernel leads its own session (jupyter_client starts kernels with
``start_new_session``), every process of that session (``os.system("nohup script &")`` is
re-parented away from the kernel when its shell exits, but keeps the session; a child that starts a
session of its own is not seen); otherwise ``psutil``'s tree of the kernel's children.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import psutil

from .distributions import persistent_dirs
from .library_state import the_sessions
from .results import Skipped

#: Threads of jupyter-gkeresume itself and of the store's filesystem (fsspec's event loop).
OWN_THREADS = ("gkeresume", "fsspecIO")
#: Thread classes of the kernel's own machinery that may start after the extension loads
#: (ipykernel's ParentPollerUnix starts when the kernel app starts, after its extensions).
KERNEL_MODULES = ("ipykernel.", "IPython.")
#: Thread classes their library starts again whenever it needs one, as in a resumed kernel:
#: tqdm's monitor (tqdm/std.py ``tqdm.__new__`` starts a ``TMonitor`` when ``tqdm.monitor`` is
#: None or dead); a TensorBoard event writer's (tensorboard/summary/writer/event_file_writer.py,
#: tensorboardX/event_file_writer.py), which a ``SummaryWriter`` starts again at its next event
#: (``live_objects``); pyzmq's garbage collector, which the kernel's messaging starts at the
#: first message part sent without a copy (zmq/utils/garbage.py ``GarbageCollector.store``: any
#: output above jupyter_client's ``Session.copy_threshold``, 64 KiB: a big table, an image).
RESTARTED_BY_LIBRARY = ("tqdm._monitor.TMonitor",
                        "tensorboard.summary.writer.event_file_writer._AsyncWriterThread",
                        "tensorboardX.event_file_writer._EventLoggerThread",
                        "zmq.utils.garbage.GarbageCollectorThread")
#: Modules of a library's own worker pool, which the library starts again at its next job:
#: torch.compile's (inductor's ``AsyncCompile`` pool, torch/_inductor/async_compile.py; with
#: Triton, every notebook's first compile starts it: a ``SubprocPool`` sidecar process and its
#: workers, torch/_inductor/compile_worker/subproc_pool.py, with a reader and a timer thread).
#: A thread running a function of these modules is the pool's; the pools' processes and other
#: threads are found through their objects (``_library_pools``). Compiled code is compiled
#: again in the resumed kernel (its caches on disk serve).
LIBRARY_POOL_MODULES = ("torch._inductor.compile_worker.",)
#: Modules whose ``_executor`` is loky's reusable process pool (joblib's ``Parallel``,
#: scikit-learn's ``n_jobs``: joblib/externals/loky/reusable_executor.py), which keeps its
#: workers after a job and is made again by the next ``get_reusable_executor``.
REUSABLE_EXECUTORS = ("joblib.externals.loky.reusable_executor", "loky.reusable_executor")
#: Modules whose ``_resource_tracker`` runs a resource tracker process for the rest of the
#: kernel's life once a semaphore or a pool needed one (multiprocessing/resource_tracker.py and
#: loky's copy); the resumed kernel starts its own.
RESOURCE_TRACKERS = ("multiprocessing.resource_tracker",
                     "joblib.externals.loky.backend.resource_tracker",
                     "loky.backend.resource_tracker")
SHOWN_CHARS = 120

#: The ``Skipped.type`` of each kind of thing named here.
KINDS = ("child process", "thread", "open file", "asyncio task", "asyncio callback")

#: Coroutines of the kernel's machinery: its tasks, never the session's.
KERNEL_TASK_MODULES = ("ipykernel.", "IPython.", "tornado.", "zmq.", "jupyter_client.", "anyio.",
                       "kernel_hooks.", "jupyter_gkeresume.")

_baseline: dict[str, set] = {}
_kernel_tasks: weakref.WeakSet = weakref.WeakSet()  # the loop's tasks when the extension loaded


def remember_baseline() -> None:
    """Record the threads, child processes and open files of now as the kernel's own
    (idempotent)."""
    if not _baseline:
        _kernel_tasks.update(_pending_tasks())
        _baseline["threads"] = {t.ident for t in threading.enumerate() if t.ident is not None}
        _baseline["processes"] = set(_session_processes())
        _baseline["files"] = {(f.fd, f.path) for f in _files()}


def held_key(obj: object) -> tuple[str, int] | None:
    """``("thread", ident)`` of a started thread, ``("process", pid)`` of a ``Popen``: how
    ``left_behind`` knows that a user's object holds the thing it names."""
    kind = type(obj)  # never isinstance: an object may raise on ``__class__``
    if issubclass(kind, threading.Thread) and obj.ident is not None:
        return ("thread", obj.ident)
    if issubclass(kind, subprocess.Popen):
        return ("process", obj.pid)
    return None


#: A thing left behind, with its ``held_key`` (None for a file).
Found = tuple[tuple[str, int] | None, Skipped]


def left_behind() -> list[Found]:
    """Everything of the session that a snapshot does not carry (see the module docstring),
    each with its ``held_key``. Without the extension loaded (the API used in a plain process)
    the first call takes the baseline."""
    remember_baseline()
    pools = _library_pools()  # one look, so that processes and threads see the same pools
    return [*_processes(pools), *_threads(pools), *_tasks(), *_callbacks(), *_open_files()]


def named_under(found: list[Found], held: Mapping[tuple[str, int], str]) -> list[Skipped]:
    """``found`` as the user reads it: a thread or process that a user's object holds
    (``held``: its ``held_key`` -> that name) is named once, under that name (``inside``),
    never again as a thing of its own: "job", "child process", "sleep 300 (process 812): it
    keeps running ..."."""
    out = []
    for key, thing in found:
        if key not in held:
            out.append(thing)
            continue
        what, why = thing.reason.split(": ", 1) if thing.type == "child process" else (
            thing.name.split(" ", 1)[1], thing.reason)
        out.append(Skipped(held[key], thing.type, f"{what} ({thing.name}): {why}"
                           if thing.type == "child process" else f"{what}: {why}", inside=True))
    return out


def _session_processes() -> dict[int, psutil.Process]:
    """The processes of the kernel's session (see the module docstring), by pid."""
    me = psutil.Process()
    found: dict[int, psutil.Process] = {}
    if os.getsid(0) == me.pid:  # one getsid call per process: about 1 ms for 150
        for pid in psutil.pids():
            try:
                if pid != me.pid and os.getsid(pid) == me.pid:
                    found[pid] = psutil.Process(pid)
            except (OSError, psutil.Error):  # gone meanwhile, or another user's
                continue
    else:  # reads every process's parent: tens of ms on a busy machine
        found = {p.pid: p for p in me.children(recursive=True)}
    return found


def _processes(pools: list[Any]) -> list[Found]:
    out = []
    workers = _multiprocessing_children()
    helpers = _library_processes(pools)
    for pid, process in sorted(_session_processes().items()):
        if pid in _baseline["processes"] or pid in helpers:
            continue
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            command = workers.get(pid) or " ".join(process.cmdline()) or process.name()
        except psutil.Error:
            continue
        out.append((("process", pid), Skipped(
            f"process {pid}", "child process",
            f"{textwrap.shorten(command, SHOWN_CHARS)}: it keeps running on this "
            "pod only and does not come back after a resume (start it again)")))
    return out


def _library_processes(pools: list[Any]) -> set[int]:
    """The pids of the processes libraries run for themselves and start again at their next
    need: the workers of ``pools`` (``_library_pools``) with their descendants (a ``SubprocPool``'s sidecar,
    ``process``; a process pool's workers, ``_processes``); the resource trackers
    (``RESOURCE_TRACKERS``); multiprocessing's fork server (multiprocessing/forkserver.py
    ``_forkserver._forkserver_pid``), which the first process of the forkserver method starts
    (Linux's default from Python 3.14), without its descendants: the session's own processes
    are forked from it. A tracker starts with the first semaphore of the spawn method (what CUDA
    code asks for)."""
    pids: set[int] = set()
    for pool in pools:
        sidecar = getattr(getattr(pool, "process", None), "pid", None)
        pids.update(([sidecar] if sidecar else []) + list(getattr(pool, "_processes", None) or ()))
    for pid in list(pids):
        try:
            pids.update(child.pid for child in psutil.Process(pid).children(recursive=True))
        except psutil.Error:  # gone meanwhile
            continue
    helpers = [getattr(getattr(sys.modules.get(name), "_resource_tracker", None), "_pid", None)
               for name in RESOURCE_TRACKERS]
    server = getattr(sys.modules.get("multiprocessing.forkserver"), "_forkserver", None)
    pids.update(pid for pid in (*helpers, getattr(server, "_forkserver_pid", None)) if pid)
    return pids


def _library_pool_threads(pools: list[Any]) -> set[int]:
    """The idents of the manager and queue feeder threads of the process pools among ``pools``
    (``_library_pools``: ``_executor_manager_thread``, ``_call_queue._thread``); the other
    threads of a pool run a function of ``LIBRARY_POOL_MODULES``."""
    threads = [thread for pool in pools for thread in (
        getattr(pool, "_executor_manager_thread", None),
        getattr(getattr(pool, "_call_queue", None), "_thread", None))]
    return {t.ident for t in threads if t is not None}


def _library_pools() -> list[Any]:
    """The worker pools libraries keep for themselves: inductor's compile pools of this
    process (torch/_inductor/async_compile.py ``_pool_set``) and loky's reusable executor
    (``REUSABLE_EXECUTORS``) while it has no job pending (one at work is the session's work)."""
    pools = list(getattr(sys.modules.get("torch._inductor.async_compile"), "_pool_set", ()))
    for name in REUSABLE_EXECUTORS:
        executor = getattr(sys.modules.get(name), "_executor", None)
        if executor is not None and not getattr(executor, "_pending_work_items", True):
            pools.append(executor)
    return pools


def _multiprocessing_children() -> dict[int, str]:
    """What each ``multiprocessing`` child of this process is, by pid (a forked child's command
    line is the kernel's own; ``Process.start`` drops its target). A DataLoader iterator names
    its workers' pids (``live_objects``)."""
    process = sys.modules.get("multiprocessing.process")
    children = list(getattr(process, "_children", ()))  # active_children() would join them
    return {child.pid: f"multiprocessing {child.name}, a worker process this kernel started"
            for child in children if child.pid is not None}


def _threads(pools: list[Any]) -> list[Found]:
    pool_threads = _library_pool_threads(pools)
    return [(("thread", t.ident), Skipped(
                f"thread {t.name}", "thread",
                "a thread started in the session does not come back: its work stops with "
                "this kernel (start it again after resume)"))
            for t in threading.enumerate()
            if t.ident not in _baseline["threads"] and t.is_alive() and not t.name.startswith(OWN_THREADS)
            and not type(t).__module__.startswith(KERNEL_MODULES)
            and f"{type(t).__module__}.{type(t).__qualname__}" not in RESTARTED_BY_LIBRARY
            and not _idle_pool_worker(t) and t.ident not in pool_threads
            and not str(getattr(getattr(t, "_target", None), "__module__", None)
                        ).startswith(LIBRARY_POOL_MODULES)]


def _idle_pool_worker(thread: threading.Thread) -> bool:
    """A worker of a ``ThreadPoolExecutor`` with nothing queued and every worker idle
    (concurrent/futures/thread.py: ``_worker`` gets the executor by weak reference; each idle
    worker has released ``_idle_semaphore``): no work of the session stops with it. Inductor's
    compile pool (a cached executor) is one. A pool at work, or one the session holds (its
    variable is named), is not."""
    futures = sys.modules.get("concurrent.futures.thread")
    if futures is None or getattr(thread, "_target", None) is not futures._worker:
        return False
    try:
        executor = thread._args[0]()
    except (AttributeError, IndexError, TypeError):  # another Python's private names
        return False
    return executor is not None and pool_idle(executor)


def pool_idle(executor: Any) -> bool:
    """Whether a ``ThreadPoolExecutor`` has nothing queued and every worker idle."""
    try:
        return (executor._work_queue.empty()
                and executor._idle_semaphore._value >= len(executor._threads))
    except AttributeError:  # another Python's private names
        return False


def _tasks() -> list[Found]:
    """One ``Skipped`` per asyncio task the session left pending on the kernel's loop (no user's
    object holds one as ``held_key`` counts)."""
    out = []
    for task in _pending_tasks():
        module, name = _coroutine_of(task)
        if task in _kernel_tasks or f"{module}.".startswith(KERNEL_TASK_MODULES):
            continue
        out.append((None, Skipped(
            f"task {task.get_name()}", "asyncio task",
            f"{name} is pending on the kernel's event loop: it stops with this "
            "kernel and does not come back (start it again after resume)")))
    return out


def _callbacks() -> list[Found]:
    """One ``Skipped`` per callback of the session scheduled on the kernel's loop and not run
    yet (``loop.call_later(600, save)``, ``call_soon``, ``call_at``): a function of the notebook
    or its own modules (``library_state.the_sessions``); the kernel's own timers are not."""
    loop = _running_loop()
    if loop is None:
        return []
    out = []
    handles = [*getattr(loop, "_scheduled", ()), *getattr(loop, "_ready", ())]
    for handle in handles:
        callback = getattr(handle, "_callback", None)
        if handle.cancelled() or not the_sessions(callback):
            continue
        name = getattr(getattr(callback, "func", callback), "__qualname__", repr(callback))
        when = getattr(handle, "when", None)
        due = f" in {max(0.0, when() - loop.time()):.0f} s" if when is not None else ""
        out.append((None, Skipped(
            f"callback {name}", "asyncio callback",
            f"{name} is scheduled on the kernel's event loop{due}: it does not run after a "
            "resume (schedule it again)")))
    return out


def _running_loop() -> Any:
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # no loop runs in this thread: the API used in a plain process
        return None


def _pending_tasks() -> list:
    loop = _running_loop()
    if loop is None:
        return []
    return [task for task in sys.modules["asyncio"].all_tasks(loop) if not task.done()]


def _coroutine_of(task: Any) -> tuple[str, str]:
    """The module and qualified name of the coroutine a task runs."""
    coro = task.get_coro()
    frame = getattr(coro, "cr_frame", None)
    module = frame.f_globals.get("__name__", "") if frame is not None else type(coro).__module__
    return module, getattr(coro, "__qualname__", type(coro).__qualname__)


def _files() -> list:
    try:
        return psutil.Process().open_files()
    except psutil.Error:
        return []


def comes_back(path: str) -> bool:
    """Whether ``path`` is on what the next pod has: the home volume, the server root, or a
    directory stored with each snapshot (``c.GkeResume.extra_paths``)."""
    from .extra_paths import configured  # at checkpoint: the extension's load stays light

    path = os.path.abspath(path)
    return any(path.startswith(os.path.join(os.path.abspath(d), ""))
               for d in [*persistent_dirs(), *configured()] if d)


def _open_files() -> list[Found]:
    return [(None, Skipped(f"file {f.path}", "open file",
                           "open for writing outside the home volume: it stays on this pod, "
                           "the next one will not have it (write it under the home directory)"))
            for f in _files()
            if f.fd > 2  # stdout and stderr redirected by whoever started the server
            and (f.fd, f.path) not in _baseline["files"]
            and getattr(f, "mode", "r") != "r" and not comes_back(f.path)]
