"""Checkpoint and resume through gs:// (fake-gcs-server) against a plain parallel gcsfs upload and
download of the same objects, interleaved in one run, with the CPU seconds each side spent.

    .venv/bin/python benchmarks/gcs.py [--shape core,tensors] [--gb 1.0] [--rounds 3]
        [--concurrency 8] [--cpus 0,1;0] [--composite-mib N]

Per shape (``core``: ``core.build_session(--gb)``, the session of issue 23, a model with AdamW
state, arrays and small objects, mostly 16 MiB blobs; ``tensors``: ``--gb`` in 16 float32
tensors of equal size), per CPU set in ``--cpus`` (this process's threads and the emulator's
pinned with ``sched_setaffinity``, e.g. ``0`` for one core, ``0,1`` for two), ``--rounds`` rounds,
each on a fresh prefix, the order of ours and the plain transfer alternating between rounds:

- ``checkpoint``: ``kernel_hooks.checkpoint`` in this process (pickle, BLAKE3, claim or upload
  with crc32c, create-only manifest commit, metadata verification);
- ``put``: gcsfs ``fs.pipe(objects, batch_size=C)`` of objects of exactly the sizes our
  checkpoint stored (blobs, manifest, records; the bytes are in memory as ``bytes`` already);
- ``resume``: ``kernel_hooks.resume`` into a new namespace (ranged reads, digest checks, rebuild);
- ``cat``: gcsfs ``fs.cat(paths, batch_size=C)`` of those plain objects;
- ``again``: an unchanged re-checkpoint (nothing uploaded);
- ``pickle``: ``core.pickle_graph`` of the session into memory: the object graph pickled with
  every tensor and array left out by name, the serializing any checkpoint does besides moving
  array bytes (200,000 small records in ``core``), which ``put`` (bytes ready) does not pay.
  ``put + pickle`` is the client-CPU yardstick of a checkpoint that must serialize its session.

Ratios are plain seconds / ours (1.0 = as fast as the plain transfer; issue 23 asks >= 0.9 both
ways); the median over rounds is the figure, as the machine may be shared. ``cpu`` columns are
the CPU seconds (user+system) this process (client) and the emulator spent in that step: on a
machine whose cores are all busy, their sum over the wall seconds says whether the cores bound it.
The emulator runs on this machine, so absolute MB/s say little about GCS; the ratios are the point.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="core,tensors", help="comma-separated: core, tensors")
    parser.add_argument("--gb", type=float, default=1.0, help="session size (GB)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per shape and CPU set")
    parser.add_argument("--concurrency", type=int, default=8, help="GKERESUME_CONCURRENCY and batch_size")
    parser.add_argument("--cpus", default="", help="';'-separated CPU sets, e.g. '0,1;0' (default: all)")
    parser.add_argument("--composite-mib", type=int, default=None,
                        help="GKERESUME_COMPOSITE_MIB: blobs above go up as composed parts (0: never)")
    args = parser.parse_args()
    if args.composite_mib is not None:
        os.environ["GKERESUME_COMPOSITE_MIB"] = str(args.composite_mib)
    os.environ["GKERESUME_CONCURRENCY"] = str(args.concurrency)
    cpu_sets = [frozenset(int(c) for c in s.split(",")) for s in args.cpus.split(";") if s] or [None]

    from fixtures_gcs import GcsEmulator

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        emulator = GcsEmulator(Path(tmp))
        emulator.start()
        os.environ.update(
            STORAGE_EMULATOR_HOST=emulator.url, FSSPEC_GS_TOKEN="anon",
            GKERESUME_SIGNING_KEY="benchmark-key-" + "0" * 32, GKERESUME_WORKSPACE="bench",
        )
        try:
            for shape in args.shape.split(","):
                namespace = build(shape, args.gb)
                for cpus in cpu_sets:
                    pin(os.getpid(), cpus)
                    pin(emulator.process.pid, cpus)
                    rows += run(emulator, namespace, shape, cpus, args.rounds, args.concurrency)
                del namespace
        finally:
            emulator.kill()
    report(rows, args)


def build(shape: str, gb: float) -> dict:
    import torch

    if shape == "core":
        from core import build_session

        return build_session(gb)
    if shape == "tensors":
        gen = torch.Generator().manual_seed(0)
        per = int(gb * 1e9) // 16 // 4
        return {f"t{i}": torch.rand(per, generator=gen) for i in range(16)}
    raise SystemExit(f"unknown shape {shape!r}")


def pin(pid: int, cpus: frozenset[int] | None) -> None:
    """Every thread of ``pid`` (new ones inherit it from their creator) on ``cpus``."""
    cpus = cpus or frozenset(range(os.cpu_count() or 1))
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, FileNotFoundError):
            pass  # a thread that just ended


def run(emulator, namespace: dict, shape: str, cpus, rounds: int, concurrency: int) -> list[dict]:
    import gcsfs
    import psutil
    import torch
    from core import pickle_graph

    import kernel_hooks

    client, server = psutil.Process(), psutil.Process(emulator.process.pid)

    def timed(call, *args, **kwargs) -> tuple[float, float, float]:
        """Wall, client CPU and emulator CPU seconds of ``call(*args, **kwargs)``."""
        c0, s0, started = cpu(client), cpu(server), time.perf_counter()
        call(*args, **kwargs)
        return time.perf_counter() - started, cpu(client) - c0, cpu(server) - s0

    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    emulator.create_bucket(bucket)
    fs = gcsfs.GCSFileSystem(endpoint_url=emulator.url, token="anon", skip_instance_cache=True)
    # warm both sides up (imports, HTTP sessions) outside the clock
    kernel_hooks.checkpoint("warm", namespace={"w": torch.ones(4)}, store=f"gs://{bucket}/warm")
    kernel_hooks.resume("warm", namespace={}, store=f"gs://{bucket}/warm")
    fs.pipe({f"{bucket}/warm1": b"w"})
    fs.cat([f"{bucket}/warm1"])
    rows, sizes = [], []
    for n in range(rounds):
        store, plain = f"gs://{bucket}/ours{n}", f"{bucket}/plain{n}"
        row = {"shape": shape, "cpus": cpus, "round": n, "load": os.getloadavg()[0]}
        ours_first = n % 2 == 0  # odd rounds: plain first, sized as the previous checkpoint
        if not ours_first:
            payload = objects(plain, sizes)
            row["put"] = timed(fs.pipe, payload, batch_size=concurrency)
        row["checkpoint"] = timed(kernel_hooks.checkpoint, "bench", namespace=namespace, store=store)
        sizes = [int(v["size"]) for v in fs.find(store[5:], detail=True).values()]
        if ours_first:
            payload = objects(plain, sizes)
            row["put"] = timed(fs.pipe, payload, batch_size=concurrency)
        row["again"] = timed(kernel_hooks.checkpoint, "again", namespace=namespace, store=store)
        if not ours_first:
            row["cat"] = timed(fs.cat, list(payload), batch_size=concurrency)
        row["resume"] = timed(kernel_hooks.resume, "bench", namespace={}, store=store)
        row["pickle"] = timed(pickle_graph, namespace, io.BytesIO())
        if ours_first:
            row["cat"] = timed(fs.cat, list(payload), batch_size=concurrency)
        row["bytes"], row["objects"] = sum(sizes), len(sizes)
        del payload
        fs.rm([store[5:], plain], recursive=True)  # the emulator keeps it all in RAM
        rows.append(row)
        print(line(row), flush=True)
    return rows


def objects(prefix: str, sizes: list[int]) -> dict[str, bytes]:
    """Plain objects of ``sizes`` (random bytes) under ``prefix``."""
    source = memoryview(os.urandom(1 << 20) * (max(sizes) // (1 << 20) + 1))
    return {f"{prefix}/o{i}": bytes(source[:size]) for i, size in enumerate(sizes)}


def cpu(process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def line(r: dict) -> str:
    def step(name):
        wall, client, server = r[name]
        return f"{name} {wall:.2f}s (cpu {client:.1f}+{server:.1f})"
    return (f"{r['shape']} cpus={fmt_cpus(r['cpus'])} round {r['round']} load {r['load']:.1f}: "
            + ", ".join(step(n) for n in ("checkpoint", "put", "resume", "cat", "again", "pickle")))


def fmt_cpus(cpus) -> str:
    return "all" if cpus is None else ",".join(map(str, sorted(cpus)))


def report(rows: list[dict], args) -> None:
    composite = os.environ.get("GKERESUME_COMPOSITE_MIB", "128 (default)")
    print(f"\n{args.gb} GB per shape, concurrency {args.concurrency}, composite above {composite} "
          f"MiB, fake-gcs-server (memory backend) on 127.0.0.1, {os.cpu_count()} CPUs; "
          "wall s (cpu client+emulator s)\n")
    print("| shape | cpus | round | load | objects | GB | checkpoint | put | put/ckpt "
          "| resume | cat | cat/resume | unchanged re-checkpoint s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def cell(value):
        return f"{value[0]:.2f} ({value[1]:.1f}+{value[2]:.1f})"

    for r in rows:
        print(f"| {r['shape']} | {fmt_cpus(r['cpus'])} | {r['round']} | {r['load']:.1f} "
              f"| {r['objects']} | {r['bytes'] / 1e9:.2f} | {cell(r['checkpoint'])} | {cell(r['put'])} "
              f"| {r['put'][0] / r['checkpoint'][0]:.2f} | {cell(r['resume'])} | {cell(r['cat'])} "
              f"| {r['cat'][0] / r['resume'][0]:.2f} | {r['again'][0]:.2f} |")
    print()
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["shape"], fmt_cpus(r["cpus"])), []).append(r)
    for (shape, cpus), group in groups.items():
        up = statistics.median(r["put"][0] / r["checkpoint"][0] for r in group)
        down = statistics.median(r["cat"][0] / r["resume"][0] for r in group)
        cpu_up = statistics.median((r["checkpoint"][1] + r["checkpoint"][2]) / (r["put"][1] + r["put"][2])
                                   for r in group)
        cpu_down = statistics.median((r["resume"][1] + r["resume"][2]) / (r["cat"][1] + r["cat"][2])
                                     for r in group)
        print(f"- {shape}, cpus {cpus}: median over {len(group)} rounds: checkpoint {up:.2f}x "
              f"the plain upload, resume {down:.2f}x the plain download; CPU seconds (client + "
              f"emulator) ours / plain: checkpoint {cpu_up:.2f}, resume {cpu_down:.2f}")
        print(f"  - {shape}, cpus {cpus}, per GB (median): " + "; ".join(
            per_gb(group, ours, plain) for ours, plain in (("checkpoint", "put"), ("resume", "cat"))))


def per_gb(group: list[dict], ours: str, plain: str) -> str:
    """Wall and CPU seconds per GB of ``ours`` and ``plain`` (client, emulator), and ours / plain
    of the client's CPU (issue 31 item 3 asks <= 1.1x for the checkpoint)."""
    def median(step: str, index: int) -> float:
        return statistics.median(r[step][index] / (r["bytes"] / 1e9) for r in group)

    client = statistics.median(r[ours][1] / r[plain][1] for r in group)
    text = (f"{ours} {median(ours, 0):.2f} s/GB wall, client {median(ours, 1):.2f} + emulator "
            f"{median(ours, 2):.2f} CPU s/GB; {plain} {median(plain, 0):.2f} s/GB wall, client "
            f"{median(plain, 1):.2f} + emulator {median(plain, 2):.2f} CPU s/GB; client CPU "
            f"{ours}/{plain} {client:.2f}x")
    if ours == "checkpoint":
        serialized = statistics.median(r[ours][1] / (r[plain][1] + r["pickle"][1]) for r in group)
        text += (f"; pickle of the object graph {median('pickle', 1):.2f} CPU s/GB; client CPU "
                 f"{ours}/({plain} + pickle) {serialized:.2f}x")
    return text


if __name__ == "__main__":
    main()
