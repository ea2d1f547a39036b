"""What cannot come back is named at pause time (issue 21 item 4), and the directories of
``c.GkeResume.extra_paths`` come back with the snapshot: a checkpoint of a real kernel
lists its child processes (a ``nohup ... &`` one included, re-parented away from the kernel),
the threads the session started and the files it holds open for writing outside the home volume,
in the result the server and the lab show and in ``%checkpoint``'s output; a kernel with none of
them reports nothing.

jupyter_client starts each kernel in its own session (``start_new_session=True`` in
jupyter_client/launcher.py ``launch_kernel``), which is how the re-parented process is found.
"""

from __future__ import annotations

import os
import re
import shutil
import signal

from fixtures_kernels import resumed_elsewhere

from jupyter_gkeresume.snapshot import SnapshotStore
from jupyter_gkeresume.snapshot.format import PathRecord
from kernel_hooks import extra_paths


def test_processes_threads_and_open_files_are_named_at_checkpoint(tmp_path, start_kernel):
    home = tmp_path / "home"
    home.mkdir()
    outside = tmp_path / "outside.log"
    kernel = start_kernel(env={"GKERESUME_ROOT_DIR": str(home)})
    quiet = kernel.run_json("import json, kernel_hooks\n"
                            "print(json.dumps(kernel_hooks.checkpoint('quiet').to_dict()['skipped']))")
    assert quiet == []

    kernel.run(f"""
import os, subprocess, threading
child = subprocess.Popen(["sleep", "300"]).pid
os.system("nohup sleep 301 > /dev/null 2>&1 &")
trainer = threading.Event()
threading.Thread(target=trainer.wait, name="trainer", daemon=True).start()
log = open({str(outside)!r}, "w")
kept = open({str(home / "kept.log")!r}, "w")
""")
    pids = []
    try:
        result = kernel.run_json("r = kernel_hooks.checkpoint('busy')\n"
                                 "print(json.dumps(r.to_dict()['skipped']))")
        named = {s["name"]: (s["type"], s["reason"]) for s in result}
        pids = [int(n.split()[1]) for n in named if n.startswith("process ")]
        commands = sorted(reason.split(":")[0] for kind, reason in named.values()
                          if kind == "child process")
        assert commands == ["sleep 300", "sleep 301"]
        assert named["thread trainer"][0] == "thread"
        assert named[f"file {outside}"][0] == "open file"
        assert not any(str(home) in n for n in named)  # the home volume comes back by itself

        printed = kernel.run("%checkpoint")
        assert re.search(r"not saved: process \d+ \[child process\]: sleep 301", printed)
        assert "not saved: thread trainer [thread]" in printed
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_extra_paths_are_stored_and_put_back_before_unpickling(tmp_path, start_kernel):
    """``c.GkeResume.extra_paths`` (kernels get GKERESUME_EXTRA_PATHS): a directory outside the
    home volume comes back on a fresh pod with its files and modes before the graph is
    unpickled (an object that opens its file as it loads comes back); a file open for writing
    there is not named as left behind; what is not a regular file, and a directory over the
    size limit, are named at checkpoint."""
    data, big = tmp_path / "data", tmp_path / "big"
    (data / "sub").mkdir(parents=True)
    big.mkdir()
    (data / "vocab.txt").write_text("alpha beta gamma")
    (data / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (data / "sub" / "run.sh").chmod(0o750)
    (data / "link").symlink_to(data / "vocab.txt")
    (big / "blob.bin").write_bytes(b"x" * 5000)
    env = {"GKERESUME_EXTRA_PATHS": f"{data}{os.pathsep}{big}",
           "GKERESUME_EXTRA_PATHS_MAX_BYTES": "4096"}
    a = start_kernel(env)
    a.run(f"""
class Vocab:
    def __init__(self, path):
        self.path = path
        with open(path) as f:
            self.words = f.read().split()

    def __reduce__(self):
        return Vocab, (self.path,)

vocab = Vocab({str(data / "vocab.txt")!r})
log = open({str(data / "train.log")!r}, "w")
log.write("epoch 1\\n")  # in its buffer: the checkpoint flushes it before storing the directory
""")
    printed = a.run("%checkpoint")
    assert (f"not saved: {big} [extra path]: not stored: its files hold 4.9 KiB, over the "
            "4.0 KiB left of the limit (c.GkeResume.extra_paths_max_bytes)") in printed, printed
    assert (f"not saved: {data} [extra path]: stored without what is not a regular file: "
            "link") in printed
    assert "train.log" not in printed  # stored with the snapshot: not left behind
    a.kill()
    shutil.rmtree(data)  # the fresh pod
    shutil.rmtree(big)

    b = start_kernel(env)
    printed = b.run("%resume")
    assert f"extra path: {data}: 3 files put back (" in printed, printed
    assert "restored: Vocab, vocab, log\n" in printed, printed  # ``log`` goes on writing
    assert b.run_json(f"import json, os\nlog.write('epoch 2\\n'); log.close()\n"
                      f"print(json.dumps([vocab.words, "
                      f"oct(os.stat({str(data / 'sub' / 'run.sh')!r}).st_mode & 0o777), "
                      f"open({str(data / 'train.log')!r}).read()]))") == [
        ["alpha", "beta", "gamma"], "0o750", "epoch 1\nepoch 2\n"]
    assert not big.exists() and not (data / "link").exists()


def test_extra_paths_go_back_only_where_this_server_names_them(tmp_path, monkeypatch):
    """A resume writes into no directory that its own server's ``extra_paths`` does not name
    (a snapshot from a pod configured otherwise); each directory gets its line."""
    store = SnapshotStore(str(tmp_path / "store"), "ws")
    record = PathRecord(str(tmp_path / "elsewhere"), "b3-" + "0" * 64, ["a.txt"], [0o644])
    monkeypatch.setenv(extra_paths.PATHS_ENV, str(tmp_path / "data"))
    assert extra_paths.restore_paths(store, [record]) == [
        f"{tmp_path / 'elsewhere'}: not put back: this server's c.GkeResume.extra_paths does "
        "not name it"]
    assert not (tmp_path / "elsewhere").exists()


def test_each_thing_is_named_once_under_the_users_name(start_kernel):
    """Issue 27.7: an object holding a running thread and a child process was listed as saved
    and again as "proc (inside)", its thread and process once more as left behind (the thread
    twice in one line: as the type and again in the reason). Each thing is now named once, under
    the user's name that holds it; the modules and IPython's ``_`` names are saved but listed
    apart (``modules``) or not at all."""
    kernel = start_kernel()
    result = kernel.run_json("""
import json, subprocess, threading, time, kernel_hooks
import numpy as np
class Job:
    def __init__(self):
        self.proc = subprocess.Popen(["sleep", "300"])
        self.worker = threading.Thread(target=time.sleep, args=(300,), name="worker", daemon=True)
        self.worker.start()
job = Job()
data = np.arange(10)
_exit_code = 0
r = kernel_hooks.checkpoint('once').to_dict()
print(json.dumps(r))
""")
    printed = kernel.run("%checkpoint\njob.proc.kill()")
    assert re.search(r"job comes back without its child process: sleep 300 \(process \d+\)", printed)
    assert "job comes back without its thread: worker:" in printed
    assert "not saved: job" not in printed and "(inside)" not in printed
    skipped = result["skipped"]
    assert all(s["name"] == "job" for s in skipped), skipped
    kinds = sorted(s["type"] for s in skipped)
    assert kinds == ["child process", "thread"], skipped
    for s in skipped:
        assert s["inside"] is True
        assert not s["reason"].startswith(s["type"]), s  # the type is not said again as the reason
    assert "sleep 300" in next(s["reason"] for s in skipped if s["type"] == "child process")
    assert "job" in result["saved"] and "data" in result["saved"]
    assert "worker" in next(s["reason"] for s in skipped if s["type"] == "thread")
    assert sorted(result["modules"]) == ["json", "kernel_hooks", "np", "subprocess", "threading",
                                         "time"]


def test_a_thread_its_library_starts_again_is_not_named():
    """tqdm's monitor thread (tqdm/_monitor.py ``TMonitor``, named ``tqdm_monitor``) is started by
    ``tqdm.__new__`` (tqdm/std.py) whenever ``tqdm.monitor`` is None or dead, as it is in a
    resumed kernel: nothing of the session is lost with it, so the verdict stays ``exact`` (every
    tqdm notebook was ``partial``, found by cut_check on tqdm's pandas example)."""
    from tqdm import tqdm

    from kernel_hooks import left_behind

    left_behind.left_behind()  # the baseline is taken before the bar's thread starts
    bar = tqdm(total=2, disable=False, file=open(os.devnull, "w"))
    try:
        assert tqdm.monitor is not None and tqdm.monitor.is_alive()
        named = [s.name for _, s in left_behind.left_behind()]
        assert "thread tqdm_monitor" not in named
    finally:
        bar.close()
        bar.fp.close()


def test_a_big_output_leaves_nothing_behind(start_kernel):
    """A cell whose output is bigger than jupyter_client's ``Session.copy_threshold`` (64 KiB: a
    wide table, an image) is sent without a copy, and pyzmq starts its garbage collector thread
    for it (zmq/utils/garbage.py ``GarbageCollector.store``). That thread was named as the
    session's ("thread Thread-3 stayed on the old pod") and the resume said ``partial`` with
    nothing lost: the resumed kernel's pyzmq starts its own."""
    a = start_kernel()
    a.run("print('.' * 100_000)")
    _, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "thread" not in out, out


COMPILE_POOL = r"""
import psutil
from torch._inductor.async_compile import AsyncCompile
AsyncCompile.warm_pool(); AsyncCompile.wakeup(); AsyncCompile.wait_pool_ready()
print(len(psutil.Process().children(recursive=True)))
"""


def test_torch_compiles_worker_pool_is_not_named(start_kernel):
    """With Triton installed (every CUDA machine), a notebook's first ``torch.compile`` starts
    inductor's compile pool (torch/_dynamo/backends/inductor.py -> ``maybe_warm_pool`` in
    torch/_inductor/async_compile.py): a ``SubprocPool`` sidecar process and its workers, a
    reader and a timer thread (torch/_inductor/compile_worker/subproc_pool.py, timer.py). Each
    was named as the session's child process or thread, and every compiling notebook on a GPU
    was ``partial`` with nothing lost: the resumed kernel's inductor starts its own pool at its
    next compile (``test_core_compile``). Without Triton here, the pool is warmed as
    ``maybe_warm_pool`` does, with two compile threads."""
    a = start_kernel(env={"TORCHINDUCTOR_COMPILE_THREADS": "2"})
    assert int(a.run(COMPILE_POOL)) >= 2  # the sidecar and its workers run
    _, out = resumed_elsewhere(a, start_kernel)
    assert "(exact)" in out.splitlines()[0] and "process" not in out and "thread" not in out, out


MULTIPROCESSING_HELPERS = r"""
import multiprocessing as mp, time
queue = mp.get_context("spawn").Queue(); queue.put(1); queue.get()  # the resource tracker starts
server = mp.get_context("forkserver")
done = server.Process(target=time.sleep, args=(0,)); done.start(); done.join()  # the fork server
keeper = server.Process(target=time.sleep, args=(300,)); keeper.start()
del queue, done
print(keeper.pid)
"""


def test_multiprocessings_helpers_are_not_named_and_a_process_they_started_is(start_kernel):
    """The first semaphore of the spawn method (what CUDA code asks for: a DataLoader's
    ``multiprocessing_context="spawn"``) starts multiprocessing's resource tracker, the first
    process of the forkserver method (Linux's default from Python 3.14) its fork server
    (multiprocessing/resource_tracker.py, forkserver.py); both stay for the process's life and
    were named as the session's child processes, so such a notebook was ``partial`` with nothing
    lost: the resumed kernel's multiprocessing starts its own. A process the fork server started
    for the session is still named."""
    a = start_kernel()
    keeper = a.run(MULTIPROCESSING_HELPERS).strip()
    out = a.run("%checkpoint")
    named = [line for line in out.splitlines() if "[child process]" in line]
    assert len(named) == 1 and f"process {keeper} " in named[0], out
    a.run("keeper.terminate(); keeper.join()")
    a.manager.shutdown_kernel()  # its resource tracker removes the semaphores in /dev/shm


LOKY = r"""
import math, time
from joblib import Parallel, delayed
from joblib.externals.loky import get_reusable_executor
print(sum(Parallel(n_jobs=2)(delayed(math.isqrt)(i) for i in range(100))))
"""


def test_joblibs_idle_worker_pool_is_not_named_and_one_at_work_is(start_kernel):
    """joblib's ``Parallel`` (scikit-learn's ``n_jobs``) leaves loky's reusable executor
    running after the job (joblib/externals/loky/reusable_executor.py): its workers, loky's
    resource tracker, a manager and a queue feeder thread. Each was named as the session's, and
    the notebook was ``partial`` with nothing lost: the next ``Parallel`` in the resumed kernel
    makes a new pool. A pool with a job still pending is named."""
    a = start_kernel()
    assert a.run(LOKY).strip() == "615"
    out = a.run("%checkpoint")
    assert "process" not in out and "thread" not in out, out
    a.run("pool = get_reusable_executor(max_workers=1)\nfuture = pool.submit(time.sleep, 60)\n"
          "while not future.running():\n    time.sleep(0.05)")
    busy = a.run("%checkpoint")
    assert "[child process]" in busy, busy
    a.run("pool.shutdown(kill_workers=True)")
    a.manager.shutdown_kernel()  # its exit handlers remove joblib's folder in /dev/shm


def test_an_idle_pool_is_not_named_and_one_at_work_is():
    """Workers of a ``ThreadPoolExecutor`` with nothing queued and nothing running lose no work
    at a pause (inductor's cached compile pool after ``torch.compile`` made every compiling
    session ``partial``); a pool still running a task is named."""
    import concurrent.futures
    import threading

    from kernel_hooks import left_behind

    left_behind.left_behind()  # the baseline is taken before the pool's threads start
    release = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="pool") as pool:
        pool.submit(lambda: None).result()
        assert [s.name for _, s in left_behind.left_behind() if s.name.startswith("thread pool")] == []
        busy = pool.submit(release.wait)
        try:
            named = [s.name for _, s in left_behind.left_behind()]
            assert "thread pool_0" in named, named
        finally:
            release.set()
            busy.result()
