"""A kernel's start with the extension and without it, side by side (issue 31 item 1).

Installing the package makes every IPython kernel of the environment load ``kernel_hooks``. Each
round starts one kernel of each case in turn (so a drift of the machine's speed hits both) with
jupyter_client and times from ``start_kernel`` to the first ``kernel_info`` reply; the kernel's
peak RSS is its ``VmHWM`` read then (the whole kernel process, the extension's load included).

- ``bare``: ``--IPKernelApp.extensions=[]`` (the kernel without us);
- ``local``: the extension, a local store;
- ``gcs``: the extension, a ``gs://`` store (nothing of the GCS stack is imported at load);
- ``before`` (with ``--before DIR``): the extension of another checkout (``git worktree add DIR
  COMMIT``; its packages first on ``PYTHONPATH``), a local store.

    .venv/bin/python benchmarks/kernel_start.py [--rounds 9] [--before DIR] [--out kernel_start.json]

Prints the median (and min, max) of each case and the extension's cost: the median of the
per-round differences against ``bare``. Our modules are byte-compiled first, as ``pip install``
of the wheel does (an editable checkout under ``PYTHONDONTWRITEBYTECODE`` would compile them in
every kernel).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import tempfile
import time

from jupyter_client.manager import KernelManager

import jupyter_gkeresume
import kernel_hooks

CASES = {
    "bare": ({}, ["--IPKernelApp.extensions=[]"]),
    "local": ({}, []),
    "gcs": ({"GKERESUME_STORE": "gs://bench-bucket/snapshots"}, []),
}


def start_once(env: dict[str, str], arguments: list[str]) -> tuple[float, int]:
    """Seconds from ``start_kernel`` to the first ``kernel_info`` reply, and the kernel's peak
    RSS in bytes at that moment."""
    manager = KernelManager(kernel_name="python3")
    started = time.perf_counter()
    manager.start_kernel(env={**os.environ, **env}, extra_arguments=arguments)
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)  # sends kernel_info until one is answered
        seconds = time.perf_counter() - started
        with open(f"/proc/{manager.provisioner.process.pid}/status") as status:
            peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM"))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--before", help="a checkout of an earlier commit, measured beside")
    parser.add_argument("--out", help="write every run as JSON here")
    args = parser.parse_args()
    cases = dict(CASES)
    packages = [os.path.dirname(p.__file__) for p in (jupyter_gkeresume, kernel_hooks)]
    if args.before:
        cases["before"] = ({"PYTHONPATH": args.before}, [])
        packages += [os.path.join(args.before, p) for p in ("jupyter_gkeresume", "kernel_hooks")]
    for package in packages:
        compileall.compile_dir(package, quiet=1)
    with tempfile.TemporaryDirectory() as store:
        os.environ.update(GKERESUME_STORE=store, GKERESUME_WORKSPACE="bench",
                          GKERESUME_SIGNING_KEY="bench-key-" + "0" * 32)
        start_once(*CASES["local"])  # warm the page cache for every case alike
        runs: dict[str, list[tuple[float, int]]] = {case: [] for case in cases}
        for _ in range(args.rounds):
            for case, (env, arguments) in cases.items():
                runs[case].append(start_once(env, arguments))
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores, {args.rounds} rounds\n")
    print("| case | start to kernel_info (median, min-max) | peak RSS (median) | "
          "extension's cost (median of the rounds' differences) |")
    print("|---|---|---|---|")
    for case, results in runs.items():
        seconds = [s for s, _ in results]
        peaks = [p for _, p in results]
        cost = ""
        if case != "bare":
            extra = [s - b for (s, _), (b, _) in zip(results, runs["bare"], strict=True)]
            extra_rss = [p - b for (_, p), (_, b) in zip(results, runs["bare"], strict=True)]
            cost = (f"+{statistics.median(extra) * 1000:.0f} ms, "
                    f"+{statistics.median(extra_rss) / 2**20:.1f} MiB")
        print(f"| {case} | {statistics.median(seconds):.3f} s ({min(seconds):.3f}-{max(seconds):.3f}) "
              f"| {statistics.median(peaks) / 2**20:.1f} MiB | {cost} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
