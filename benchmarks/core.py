"""Checkpoint and resume of a multi-GB session, side by side with the peers and the disk.

Each measurement runs in a fresh process that builds the same session (a model with AdamW state
after one step, numpy arrays, many small Python objects), so peak memory and cold reads are
honest. Page cache is dropped for the files read back (posix_fadvise DONTNEED after fsync).

    .venv/bin/python benchmarks/core.py --gb 2 [--out docs/benchmarks-core.json]

Prints a markdown table with times, bytes, extra peak RSS, and the ratios the core issue targets.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve()


def build_session(gb: float) -> dict:
    import numpy as np
    import torch

    torch.manual_seed(0)
    width = 2048
    # params P, AdamW state 2P: spend 75% of the budget on the model, 22% on arrays.
    layers = max(1, round(gb * 0.75 * 1e9 / 3 / (width * width * 4)))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, width)).sum().backward()
    opt.step()
    arrays = {f"a{i}": np.random.rand(int(gb * 0.22e9 / 8 / 4)) for i in range(4)}
    small = {f"k{i}": [i, str(i) * 3, {"v": i / 7}] for i in range(200_000)}
    return {"model": model, "opt": opt, "arrays": arrays, "small": small, "note": "benchmark"}


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


def tree_bytes(root: Path) -> int:
    return root.stat().st_size if root.is_file() else sum(
        p.stat().st_size for p in root.rglob("*") if p.is_file())


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def measure(case: str, gb: float, work: Path) -> dict:
    """Run one case in this process; returns seconds, bytes, extra peak RSS."""
    os.environ.setdefault("GKERESUME_SIGNING_KEY", "bench-key")
    import numpy  # noqa: F401  (imports are not what is measured: every case pays them first)
    import torch

    import kernel_hooks

    store = work / "store"
    out: dict = {"case": case}
    if case in ("ours_save", "torch_save", "dill_save", "dill_save_no_opt"):
        ns = build_session(gb)
    if case == "ours_save":
        import kernel_hooks

        with PeakRss() as rss:
            t = time.perf_counter()
            r = kernel_hooks.checkpoint(namespace=ns, store=str(store), workspace="bench")
            out["seconds"] = time.perf_counter() - t
        out.update(bytes=r.bytes_total, extra_rss=rss.extra)
        t = time.perf_counter()
        r2 = kernel_hooks.checkpoint(namespace=ns, store=str(store), workspace="bench")
        out["again_seconds"] = time.perf_counter() - t
        out["again_new_bytes"] = r2.bytes_new
    elif case == "ours_load":
        import kernel_hooks

        drop_cache(store)
        target: dict = {}
        with PeakRss() as rss:
            t = time.perf_counter()
            r = kernel_hooks.resume("latest", namespace=target, store=str(store), workspace="bench")
            out["seconds"] = time.perf_counter() - t
        out.update(bytes=r.bytes_read, extra_rss=rss.extra, restored=len(r.restored))
    elif case == "torch_save":
        import torch

        path = work / "torch.pt"
        with PeakRss() as rss:
            t = time.perf_counter()
            torch.save(ns, path)
            fsync_file(path)
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
                fsync_file(path)
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
    elif case in ("raw_write", "raw_read", "raw_read_sha256"):
        nbytes = tree_bytes(store)
        path = work / "raw.bin"
        chunk = os.urandom(16 << 20)
        if case == "raw_write":
            t = time.perf_counter()
            with open(path, "wb") as f:
                for start in range(0, nbytes, len(chunk)):
                    f.write(chunk[: min(len(chunk), nbytes - start)])
                f.flush()
                os.fsync(f.fileno())
            out["seconds"] = time.perf_counter() - t
        else:  # raw_read_sha256: the disk limit plus the digest check every resume does
            drop_cache(path)
            buf = bytearray(16 << 20)
            digest = hashlib.sha256() if case == "raw_read_sha256" else None
            t = time.perf_counter()
            with open(path, "rb", buffering=0) as f:
                while n := f.readinto(buf):
                    if digest is not None:
                        digest.update(memoryview(buf)[:n])
            out["seconds"] = time.perf_counter() - t
        out["bytes"] = nbytes
    return out


CASES = ["ours_save", "ours_load", "torch_save", "torch_load", "dill_save", "dill_save_no_opt",
         "dill_load_no_opt", "raw_write", "raw_read", "raw_read_sha256"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument("--case")
    parser.add_argument("--work")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(measure(args.case, args.gb, Path(args.work))))
        return
    results = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as work:
        for case in CASES:
            proc = subprocess.run(
                [sys.executable, str(HERE), "--case", case, "--gb", str(args.gb), "--work", work],
                capture_output=True, text=True, check=False,
            )
            if proc.returncode:
                results[case] = {"case": case, "error": proc.stderr.strip().splitlines()[-1]}
            else:
                results[case] = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"# {case}: {results[case]}", file=sys.stderr)
    report(results, args.gb)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


def report(r: dict, gb: float) -> None:
    def s(case, key="seconds"):
        return r.get(case, {}).get(key)

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "n/a"

    gbs = lambda case: (f"{r[case]['bytes'] / s(case) / 1e9:.2f} GB/s"  # noqa: E731
                        if s(case) and r[case].get("bytes") else "n/a")
    print(f"\nSession of ~{gb} GB; {os.cpu_count()} CPUs.\n")
    print("| operation | seconds | bytes | throughput | extra peak RSS |")
    print("|---|---:|---:|---:|---:|")
    for case in CASES:
        row = r.get(case, {})
        if "error" in row:
            print(f"| {case} | failed: {row['error']} | | | |")
            continue
        rss = f"{row['extra_rss'] / 2**20:.0f} MiB" if "extra_rss" in row else ""
        print(f"| {case} | {row['seconds']:.2f} | {row['bytes'] / 1e9:.2f} GB | {gbs(case)} | {rss} |")
    again = s("ours_save", "again_seconds")
    print(f"| ours_save, unchanged session again | {again:.2f} | "
          f"{r['ours_save']['again_new_bytes'] / 1e3:.1f} kB new | | |")
    print("\n| ratio | value | target |")
    print("|---|---:|---|")
    print(f"| checkpoint / raw write+fsync | {ratio(s('ours_save'), s('raw_write'))} | <= 1.1x |")
    print(f"| resume / raw cold read | {ratio(s('ours_load'), s('raw_read'))} | <= 1.1x |")
    print(f"| resume / raw cold read + sha256 | {ratio(s('ours_load'), s('raw_read_sha256'))} | |")
    print(f"| torch.save / checkpoint | {ratio(s('torch_save'), s('ours_save'))} | >= 3.5x |")
    print(f"| torch.load / resume | {ratio(s('torch_load'), s('ours_load'))} | >= 3.5x |")
    dill_save = ((s("dill_save_no_opt") or 0) / r["dill_save_no_opt"]["bytes"]
                 * r["ours_save"]["bytes"]) if s("dill_save_no_opt") else None
    dill_load = ((s("dill_load_no_opt") or 0) / r["dill_load_no_opt"]["bytes"]
                 * r["ours_save"]["bytes"]) if s("dill_load_no_opt") else None
    print(f"| dill (per byte, without the optimizer it cannot pickle) / checkpoint | "
          f"{ratio(dill_save, s('ours_save'))} | >= 2.5x |")
    print(f"| dill load (per byte) / resume | {ratio(dill_load, s('ours_load'))} | >= 2.5x |")
    print(f"| second checkpoint / first | {ratio(again, s('ours_save'))} | <= 0.05x |")


if __name__ == "__main__":
    main()
