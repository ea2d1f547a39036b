"""Checkpoint and resume of a multi-GB session, side by side with the peers and the disk.

Each measurement runs in a fresh process that builds the same session (a model with AdamW state
after one step, numpy arrays, many small Python objects), so peak memory and cold reads are
honest. Page cache is dropped for the files read back (posix_fadvise DONTNEED after fsync; on
tmpfs there is no disk behind it, so a "cold" read there is a memory copy).

    .venv/bin/python benchmarks/core.py --gb 1.5 --dirs /var/tmp,/dev/shm [--peers] [--out x.json]

Where the time goes (all threads, sampled; setup and imports left out):

    py-spy record -r 200 --threads --format raw -o ckpt.txt -- \
        .venv/bin/python benchmarks/core.py --case ours_save --gb 1.5 --work /dev/shm/x
    .venv/bin/python benchmarks/core.py --summarize ckpt.txt

Every directory in ``--dirs`` gets the same cases in one run (ours, the raw limits, the
tensors-only second checkpoint); ``--peers`` adds safetensors + pickle (what a user does by hand:
tensors and arrays to safetensors, the rest pickled), torch.save/load and dill (slow). Prints a
markdown table per directory with times, bytes, extra peak RSS, and the ratios the issues target.
``--session issue23 --gb 5`` is the session of issue 23 (``SHAPES``); ``--cases`` runs a subset;
``--cpus 0`` runs every case under ``taskset -c 0`` (how a figure scales with the cores);
``--busy 2`` keeps two other processes spinning on the CPU for the whole run (every core busy,
as on a node whose other pods compute: issue 31 item 5).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from jupyter_gkeresume.snapshot.backends import fsync_path

HERE = Path(__file__).resolve()


#: Session shapes: (share of the bytes in the model with its AdamW state, share in numpy arrays,
#: small records). ``default``: 75 % / 22 % / 200,000 records. ``issue23``: the session of issue
#: 23 (at --gb 5: a 1.5 GB model, 3 GB of AdamW state, 0.5 GB of arrays, 100,000 records).
SHAPES = {"default": (0.75, 0.22, 200_000), "issue23": (0.9, 0.1, 100_000)}


def build_session(gb: float, shape: str = "default") -> dict:
    import numpy as np
    import torch

    model_share, array_share, records = SHAPES[shape]
    torch.manual_seed(0)
    width = 2048
    # params P, AdamW state 2P
    layers = max(1, round(gb * model_share * 1e9 / 3 / (width * width * 4)))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(2 if shape == "issue23" else 1):  # "after training": a step count > 1
        model(torch.randn(4, width)).sum().backward()
        opt.step()
    arrays = {f"a{i}": np.random.rand(int(gb * array_share * 1e9 / 8 / 4)) for i in range(4)}
    small = {f"k{i}": [i, str(i) * 3, {"v": i / 7}] for i in range(records)}
    return {"model": model, "opt": opt, "arrays": arrays, "small": small, "note": "benchmark"}


def write_every_tensor(ns: dict) -> float:
    """Seconds to write every byte of the session's parameters, optimizer state and arrays once
    in place (a training step's writes, without its arithmetic)."""
    import torch

    tensors = [p.data for p in ns["model"].parameters()]
    tensors += [v for state in ns["opt"].state.values() for v in state.values()
                if isinstance(v, torch.Tensor) and v.numel() > 1]
    tensors += [torch.from_numpy(a) for a in ns["arrays"].values()]
    t = time.perf_counter()
    for tensor in tensors:
        tensor.mul_(1)
    return time.perf_counter() - t


def pickle_graph(ns: dict, file) -> dict:
    """The session's object graph pickled into ``file`` (protocol 5) with every tensor and numpy
    array replaced by a name (``tensor_ref``); returns those tensors by name (numpy arrays as
    tensors sharing their memory), for a tensor file beside the pickle. This is the serializing
    any checkpoint of the session does besides moving the array bytes. ``reducer_override``,
    not ``persistent_id``: pickle asks it only for objects of other than the builtin types, so
    records of lists, dicts and numbers cost no Python call each.

    Each parameter's ``.grad`` goes with it: torch pickles a Parameter without its gradient, and
    a checkpoint carries it (a cut between ``backward`` and ``step`` resumes with it), so the
    peer writes the same state, not a smaller one."""
    import pickle

    import numpy as np
    import torch

    tensors: dict[str, torch.Tensor] = {}
    names: dict[int, str] = {}

    def name_of(tensor, obj) -> str:
        if id(obj) not in names:
            names[id(obj)] = str(len(names))
            tensors[names[id(obj)]] = tensor.contiguous()
        return names[id(obj)]

    class Pickler(pickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, torch.Tensor):
                kind = "param" if isinstance(obj, torch.nn.Parameter) else "tensor"
                tensor = obj.detach()
            elif isinstance(obj, np.ndarray) and obj.dtype != object:
                kind, tensor = "numpy", torch.from_numpy(obj)
            else:
                return NotImplemented
            grad = obj.grad if kind == "param" else None
            return tensor_ref, (kind, name_of(tensor, obj),
                                obj.requires_grad if kind == "param" else False,
                                None if grad is None else name_of(grad.detach(), grad))

    Pickler(file, protocol=5).dump(ns)
    return tensors


def tensor_ref(kind: str, name: str, requires_grad: bool, grad: str | None):
    """What ``pickle_graph`` puts in place of a tensor; a load resolves it (``find_class``)."""
    raise RuntimeError("resolved by the loader's find_class, never called")


def safetensors_pickle_save(ns: dict, work: Path) -> int:
    """What a user who knows safetensors does by hand: every tensor and numpy array of the
    session into one safetensors file, the rest (modules, optimizer, records) into a pickle that
    refers to them by name (``pickle_graph``); both fsynced. Returns the bytes written."""
    from safetensors.torch import save_file

    with open(work / "rest.pkl", "wb") as f:
        tensors = pickle_graph(ns, f)
        f.flush()
        os.fsync(f.fileno())
    save_file(tensors, str(work / "tensors.safetensors"))
    fsync_path(str(work / "tensors.safetensors"))
    return tree_bytes(work / "rest.pkl") + tree_bytes(work / "tensors.safetensors")


def safetensors_pickle_load(work: Path) -> tuple[dict, dict]:
    """The restore of ``safetensors_pickle_save``: ``load_file`` as a user calls it, then the
    pickle loaded with each ``tensor_ref`` resolved (one object per name). Returns the session and
    the tensors (safetensors' default ``mmap`` backend: whatever it leaves mapped and unread
    comes in when a page is first touched, hence ``touch_pages`` after it). No digest is
    checked."""
    import pickle

    import torch
    from safetensors.torch import load_file

    tensors = load_file(str(work / "tensors.safetensors"))
    made: dict[str, object] = {}

    def resolve(kind: str, name: str, requires_grad: bool, grad: str | None):
        if name not in made:
            tensor = tensors[name]
            made[name] = (torch.nn.Parameter(tensor, requires_grad=requires_grad)
                          if kind == "param" else tensor.numpy() if kind == "numpy" else tensor)
            if grad is not None:
                made[name].grad = tensors[grad]
        return made[name]

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            return resolve if name == tensor_ref.__name__ else super().find_class(module, name)

    with open(work / "rest.pkl", "rb") as f:
        return Unpickler(f).load(), tensors


def touch_pages(tensors: dict) -> None:
    """Read one byte of every page of every tensor: what the first use of a lazily mapped
    tensor pays, so that its bytes are in memory as a resume leaves them."""
    import torch

    for tensor in tensors.values():
        if tensor.numel():
            tensor.reshape(-1).view(torch.uint8)[::4096].sum()


class PeakRss:
    """Samples this process's RSS every 5 ms; ``extra`` is the peak above the starting RSS."""

    def __enter__(self):
        self.proc = psutil.Process()
        self.start = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.extra = self.peak - self.start


def drop_cache(root: Path) -> None:
    files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def leave_memory_as_found(loaded: dict, root: Path) -> None:
    """After a load that maps its files (ours on a local store, safetensors): let go of what it
    loaded and drop the files' cached pages, so the next case does not pay to reclaim them (a
    raw write right after a 6.5 GB mapped load spent 12-15 CPU s in reclaim on this VM)."""
    loaded.clear()
    gc.collect()
    drop_cache(root)


def tree_bytes(root: Path) -> int:
    return root.stat().st_size if root.is_file() else sum(
        p.stat().st_size for p in root.rglob("*") if p.is_file())


def measure(case: str, gb: float, work: Path, shape: str = "default") -> dict:
    """Run one case in this process; returns seconds, bytes, extra peak RSS."""
    os.environ.setdefault("GKERESUME_SIGNING_KEY", "bench-key-" + "0" * 32)  # >= 32 bytes
    import numpy  # noqa: F401  (imports are not what is measured: every case pays them first)
    import torch

    import kernel_hooks
    import kernel_hooks.api  # the verbs load on first use: not inside the timings

    store = work / "store"
    out: dict = {"case": case}
    if case in ("ours_save", "ours_save_tensors", "torch_save", "dill_save", "dill_save_no_opt",
                "st_pickle_save"):
        ns = build_session(gb, shape)
    if case in ("ours_save", "ours_save_tensors"):  # a first checkpoint, in every round
        shutil.rmtree(store if case == "ours_save" else work / "store-tensors", ignore_errors=True)
    if case == "ours_save_tensors":  # without the 200,000 small objects: tensors dominate
        ns.pop("small")
        out["write_seconds"] = write_every_tensor(ns)  # the program's own write, before any
        for key in ("seconds", "again_seconds"):
            t, cpu = time.perf_counter(), time.process_time()
            r = kernel_hooks.checkpoint(namespace=ns, store=str(work / "store-tensors"), workspace="b")
            out[key] = time.perf_counter() - t
            out.setdefault("cpu_seconds", time.process_time() - cpu)  # of the first
        out.update(bytes=r.bytes_total, again_new_bytes=r.bytes_new)
        # the same write after the checkpoints: the first write to a page protected since
        # (``written_pages``) costs a fault; then a checkpoint of it all written (same values)
        out["write_after_seconds"] = write_every_tensor(ns)
        t = time.perf_counter()
        kernel_hooks.checkpoint(namespace=ns, store=str(work / "store-tensors"), workspace="b")
        out["rewritten_seconds"] = time.perf_counter() - t
    elif case == "ours_save":
        with PeakRss() as rss:
            t, cpu = time.perf_counter(), time.process_time()
            r = kernel_hooks.checkpoint(namespace=ns, store=str(store), workspace="bench")
            out["seconds"] = time.perf_counter() - t
            out["cpu_seconds"] = time.process_time() - cpu
        out.update(bytes=r.bytes_total, extra_rss=rss.extra)
        t = time.perf_counter()
        r2 = kernel_hooks.checkpoint(namespace=ns, store=str(store), workspace="bench")
        out["again_seconds"] = time.perf_counter() - t
        out["again_new_bytes"] = r2.bytes_new
    elif case == "ours_load":
        drop_cache(store)
        target: dict = {}
        with PeakRss() as rss:
            t, cpu = time.perf_counter(), time.process_time()
            r = kernel_hooks.resume("latest", namespace=target, store=str(store), workspace="bench")
            out["seconds"] = time.perf_counter() - t
            out["cpu_seconds"] = time.process_time() - cpu  # every thread, user + system
        out.update(bytes=r.bytes_read, extra_rss=rss.extra, restored=len(r.restored))
        leave_memory_as_found(target, store)
    elif case == "torch_save":
        import torch

        path = work / "torch.pt"
        with PeakRss() as rss:
            t = time.perf_counter()
            torch.save(ns, path)
            fsync_path(str(path))
            out["seconds"] = time.perf_counter() - t
        out.update(bytes=tree_bytes(path), extra_rss=rss.extra)
    elif case == "torch_load":
        import torch

        path = work / "torch.pt"
        drop_cache(path)
        with PeakRss() as rss:
            t = time.perf_counter()
            torch.load(path, weights_only=False)
            out["seconds"] = time.perf_counter() - t
        out.update(bytes=tree_bytes(path), extra_rss=rss.extra)
    elif case == "st_pickle_save":
        (work / "st").mkdir(exist_ok=True)
        with PeakRss() as rss:
            t, cpu = time.perf_counter(), time.process_time()
            nbytes = safetensors_pickle_save(ns, work / "st")
            out["seconds"] = time.perf_counter() - t
            out["cpu_seconds"] = time.process_time() - cpu
        out.update(bytes=nbytes, extra_rss=rss.extra)
    elif case == "st_pickle_load":
        drop_cache(work / "st")
        with PeakRss() as rss:
            t, cpu = time.perf_counter(), time.process_time()
            graph, tensors = safetensors_pickle_load(work / "st")
            out["untouched_seconds"] = time.perf_counter() - t
            touch_pages(tensors)
            out["seconds"] = time.perf_counter() - t
            out["cpu_seconds"] = time.process_time() - cpu
        out.update(bytes=tree_bytes(work / "st"), extra_rss=rss.extra)
        graph.clear()
        leave_memory_as_found(tensors, work / "st")
    elif case in ("dill_save", "dill_save_no_opt"):
        import dill

        main = sys.modules["__main__"]
        if case == "dill_save_no_opt":
            ns.pop("opt")
        for k, v in ns.items():
            setattr(main, k, v)
        path = work / f"{case}.pkl"
        try:
            with PeakRss() as rss:
                t = time.perf_counter()
                dill.dump_module(str(path))
                fsync_path(str(path))
                out["seconds"] = time.perf_counter() - t
            out.update(bytes=tree_bytes(path), extra_rss=rss.extra)
        except Exception as exc:  # dill cannot pickle everything: report it
            out["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    elif case == "dill_load_no_opt":
        import dill

        path = work / "dill_save_no_opt.pkl"
        drop_cache(path)
        with PeakRss() as rss:
            t = time.perf_counter()
            dill.load_module(str(path))
            out["seconds"] = time.perf_counter() - t
        out.update(bytes=tree_bytes(path), extra_rss=rss.extra)
    elif case == "fresh_memory":  # new memory for the bytes, faulted in as a resume does it
        from kernel_hooks.memory import populate

        nbytes = tree_bytes(store)
        t = time.perf_counter()
        memory = torch.empty(nbytes, dtype=torch.uint8)
        if not populate(memory.data_ptr(), nbytes):
            memory.numpy()[::4096] = 1  # no madvise here: one fault per page
        out.update(seconds=time.perf_counter() - t, bytes=nbytes)
    elif case in ("raw_write", "raw_copy", "raw_read", "raw_read_sha256", "raw_read_blake3",
                  "raw_read_fresh"):
        nbytes = tree_bytes(store)
        path = work / "raw.bin"
        chunk = os.urandom(16 << 20)
        if case in ("raw_write", "raw_copy"):
            # raw_write: one 16 MiB chunk again and again (it stays in the CPU's cache);
            # raw_copy: the bytes from memory of their own, each read once, as a checkpoint must
            source = memoryview(chunk)
            if case == "raw_copy":
                memory = torch.empty(nbytes, dtype=torch.uint8).numpy()
                memory[::4096] = 1  # faulted in before the clock starts
                source = memoryview(memory)
            t, cpu = time.perf_counter(), time.process_time()
            with open(path, "wb") as f:
                for start in range(0, nbytes, len(chunk)):
                    piece = min(len(chunk), nbytes - start)
                    f.write(source[start : start + piece] if case == "raw_copy" else source[:piece])
                f.flush()
                os.fsync(f.fileno())
            out["seconds"] = time.perf_counter() - t
            out["cpu_seconds"] = time.process_time() - cpu
        else:  # raw_read_*: the disk limit plus the digest check every resume does (v1, v2)
            drop_cache(path)
            digest = {"raw_read_sha256": hashlib.sha256, "raw_read_blake3": _blake3}.get(case, _none)()
            t = time.perf_counter()
            # raw_read_fresh: into new memory of the whole size, as a resume must land it; the
            # others into one reused buffer of a chunk
            fresh = case == "raw_read_fresh"
            buf = memoryview(torch.empty(nbytes if fresh else len(chunk), dtype=torch.uint8).numpy())
            done = 0
            with open(path, "rb", buffering=0) as f:
                while n := f.readinto(view := buf[done : done + len(chunk)]):
                    if digest is not None:
                        digest.update(view[:n])
                    if fresh:
                        done += n
            out["seconds"] = time.perf_counter() - t
        out["bytes"] = nbytes
    return out


def best_of(best: dict | None, row: dict) -> dict:
    """Each timing at its best round (a first checkpoint's lucky round need not be its unchanged
    second's); the other fields from the round with the best ``seconds``."""
    if best is None or "error" in best:
        return row
    if "error" in row:
        return best
    merged = dict(row if row["seconds"] < best["seconds"] else best)
    for key in ("seconds", "again_seconds", "rewritten_seconds", "write_seconds",
                "write_after_seconds"):
        if key in row:
            merged[key] = min(row[key], best[key])
    return merged


def run_case(case: str, gb: float, work: str, shape: str = "default",
             cpus: str | None = None) -> dict:
    """One case in a fresh process (on the CPUs ``cpus`` names, taskset's list, where given):
    its result row, or its error."""
    pin = ["taskset", "-c", cpus] if cpus else []
    proc = subprocess.run(
        [*pin, sys.executable, str(HERE), "--case", case, "--gb", str(gb), "--work", work,
         "--session", shape],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode:
        return {"case": case, "error": proc.stderr.strip().splitlines()[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def busy_cores(count: int):
    """``count`` processes spinning on the CPU (nice 0, as another tenant's work) while inside."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


def _blake3():
    from jupyter_gkeresume.snapshot.digests import BLAKE3

    return BLAKE3.new(1 << 30)


def _none():
    return None


CASES = ["ours_save", "ours_load", "raw_write", "raw_copy", "raw_read", "raw_read_blake3", "raw_read_sha256",
         "raw_read_fresh", "fresh_memory", "ours_save_tensors"]
PEERS = ["st_pickle_save", "st_pickle_load", "torch_save", "torch_load", "dill_save",
         "dill_save_no_opt", "dill_load_no_opt"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.5)
    parser.add_argument("--dirs", default=os.environ.get("BENCH_DIR") or tempfile.gettempdir(),
                        help="comma-separated directories to measure in (e.g. /var/tmp,/dev/shm)")
    parser.add_argument("--session", choices=sorted(SHAPES), default="default",
                        help="session shape (SHAPES): default, or issue23's (use --gb 5)")
    parser.add_argument("--peers", action="store_true",
                        help="also safetensors + pickle, torch.save/load and dill")
    parser.add_argument("--cpus", help="run every case under taskset -c CPUS (e.g. 0 or 0,1)")
    parser.add_argument("--busy", type=int, default=0,
                        help="processes kept spinning on the CPU during the run (e.g. 2)")
    parser.add_argument("--cases", help="comma-separated cases instead of all (e.g. "
                        "ours_save,ours_load,raw_read_fresh)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of every case; each timing is its best round")
    parser.add_argument("--case")
    parser.add_argument("--work")
    parser.add_argument("--out")
    parser.add_argument("--summarize", metavar="PYSPY_RAW", help="summarize a py-spy raw profile")
    args = parser.parse_args()
    if args.summarize:
        summarize(Path(args.summarize))
        return
    if args.case:
        print(json.dumps(measure(args.case, args.gb, Path(args.work), args.session)))
        return
    cases = args.cases.split(",") if args.cases else CASES + (PEERS if args.peers else [])
    results: dict[str, dict] = {}
    for folder in args.dirs.split(","):
        results[folder] = {}
        with tempfile.TemporaryDirectory(dir=folder) as work, busy_cores(args.busy):
            for round_ in range(args.repeat):  # rounds of every case, so noise hits them alike
                for case in cases:
                    row = run_case(case, args.gb, work, args.session, args.cpus)
                    print(f"# {folder} round {round_ + 1} {case}: {row}", file=sys.stderr)
                    results[folder][case] = best_of(results[folder].get(case), row)
        report(results[folder], args.gb, folder, cases, args)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


#: Samples whose stack holds one of these are setup, not the operation measured.
NOT_MEASURED = ("build_session", "_find_and_load", "drop_cache", "PeakRss._sample", "_sample (")


def summarize(path: Path, top: int = 14) -> None:
    """Self and inclusive shares of the sampled functions, in the operation only."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or any(m in stack for m in NOT_MEASURED):
            continue
        thread, *rest = stack.split(";")
        if "MainThread" in thread and "measure (" not in stack:  # start-up, imports, exit
            continue
        # threads without Python frames are native ones: BLAKE3's worker threads
        frames = [_frame(f) for f in rest] or [f"native thread {thread.rpartition(': ')[2]}"]
        n = int(count)
        total += n
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + n
    print(f"{total} samples in the operation (all threads)\n\n| self | function |\n|---:|---|")
    for frame, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        print(f"| {100 * n / total:.0f}% | `{frame}` |")
    print("\n| inclusive | function |\n|---:|---|")
    for frame, n in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]:
        print(f"| {100 * n / total:.0f}% | `{frame}` |")


def _frame(raw: str) -> str:
    """``func (/path/file.py:12)`` -> ``func (file.py)``."""
    name, _, where = raw.partition(" (")
    return f"{name} ({where.rsplit('/', 1)[-1].split(':')[0].rstrip(')')})"


def report(r: dict, gb: float, folder: str, cases: list[str], args: argparse.Namespace) -> None:
    def s(case, key="seconds"):
        return r.get(case, {}).get(key)

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "n/a"

    gbs = lambda case: (f"{r[case]['bytes'] / s(case) / 1e9:.2f} GB/s"  # noqa: E731
                        if s(case) and r[case].get("bytes") else "n/a")
    pinned = (f", taskset -c {args.cpus}" if args.cpus else "") + (
        f", {args.busy} other processes spinning on the CPU" if args.busy else "")
    print(f"\n### {folder}: session {args.session} of ~{gb} GB; {os.cpu_count()} CPUs{pinned}, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    print("| operation | seconds | CPU seconds (all threads) | bytes | throughput | extra peak RSS |")
    print("|---|---:|---:|---:|---:|---:|")
    for case in cases:
        row = r.get(case, {})
        if "error" in row:
            print(f"| {case} | failed: {row['error']} | | | | |")
            continue
        rss = f"{row['extra_rss'] / 2**20:.0f} MiB" if "extra_rss" in row else ""
        cpu = f"{row['cpu_seconds']:.2f}" if "cpu_seconds" in row else ""
        print(f"| {case} | {row['seconds']:.2f} | {cpu} | {row['bytes'] / 1e9:.2f} GB | {gbs(case)} "
              f"| {rss} |")
        if "untouched_seconds" in row:
            print(f"| {case}, before one byte of each page is touched | "
                  f"{row['untouched_seconds']:.2f} | | | | |")
    again = s("ours_save", "again_seconds")
    if again is not None:
        print(f"| ours_save, unchanged session again | {again:.2f} | | "
              f"{r['ours_save']['again_new_bytes'] / 1e3:.1f} kB new | | |")
    rows = [
        ("checkpoint / raw write+fsync", s("ours_save"), s("raw_write"), "<= 1.1x"),
        ("checkpoint, tensors only / raw write+fsync (per byte)", s("ours_save_tensors"),
         s("raw_write"), "<= 1.5x on tmpfs (issue 31.4)"),
        ("checkpoint, tensors only / raw copy from memory (per byte)", s("ours_save_tensors"),
         s("raw_copy"), ""),
        ("the same in CPU seconds / raw write+fsync", s("ours_save_tensors", "cpu_seconds"),
         s("raw_write", "cpu_seconds"), ""),
        ("the same in CPU seconds / raw copy from memory", s("ours_save_tensors", "cpu_seconds"),
         s("raw_copy", "cpu_seconds"), ""),
        ("resume / raw cold read (16 MiB buffer)", s("ours_load"), s("raw_read"), ""),
        ("resume / raw cold read + blake3", s("ours_load"), s("raw_read_blake3"), ""),
        ("resume / raw cold read into new memory", s("ours_load"), s("raw_read_fresh"),
         "<= 1.1x"),
        ("second checkpoint / first, tensors only", s("ours_save_tensors", "again_seconds"),
         s("ours_save_tensors"), "<= 0.05x"),
        ("checkpoint after every tensor was rewritten (same values) / first",
         s("ours_save_tensors", "rewritten_seconds"), s("ours_save_tensors"), ""),
        ("the program's write of every tensor after a checkpoint / before",
         s("ours_save_tensors", "write_after_seconds"), s("ours_save_tensors", "write_seconds"),
         "(a fault per page protected)"),
        ("second checkpoint / first, with the small records", again, s("ours_save"),
         "(pickling bounds it)"),
        ("safetensors + pickle save / checkpoint", s("st_pickle_save"), s("ours_save"), "> 1x"),
        ("safetensors + pickle load / resume", s("st_pickle_load"), s("ours_load"), "> 1x"),
        ("torch.save / checkpoint", s("torch_save"), s("ours_save"), ">= 3.5x"),
        ("torch.load / resume", s("torch_load"), s("ours_load"), ">= 3.5x"),
    ]
    for case, ours in (("dill_save_no_opt", "ours_save"), ("dill_load_no_opt", "ours_load")):
        if s(case) and s(ours):  # per byte: dill cannot pickle the optimizer
            per_byte = s(case) / r[case]["bytes"] * r[ours]["bytes"]
            rows.append((f"{case.replace('_no_opt', '')} (per byte, without the optimizer) / "
                         f"{'checkpoint' if ours == 'ours_save' else 'resume'}", per_byte, s(ours),
                         ">= 2.5x"))
    print("\n| ratio | value | target |")
    print("|---|---:|---|")
    for label, a, b, target in rows:
        if a and b:
            print(f"| {label} | {ratio(a, b)} | {target} |")
    rss = r.get("ours_save", {}).get("extra_rss")
    if rss:
        print(f"| extra peak RSS during checkpoint | {rss / 2**20:.0f} MiB | <= 512 MiB |")


if __name__ == "__main__":
    main()
