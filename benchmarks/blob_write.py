"""The per-byte cost of writing new content to a local store, beside a raw copy (issue 31 item 4).

One process, one buffer of ``--mib`` MiB of memory of its own (random bytes, faulted in), written
to ``--dir`` in turn by each case, ``--rounds`` times (A B C ... A B C ..., so a drift of the
machine's speed hits every case alike); each is timed in wall and CPU seconds (this thread and the
writer threads: ``time.process_time``):

- ``raw_copy``: the buffer written in 16 MiB pieces, fsynced: the yardstick (one read of each
  byte from memory, one write);
- ``blake3``: one BLAKE3 pass over the buffer, writing nothing;
- ``store_one_pass``: ``SnapshotStore.write_blob_hashing`` (hash and copy of each 1 MiB chunk
  in turn: ``backends.OBSERVED_CHUNK``);
- ``store_16mib``: the same with 16 MiB chunks (before issue 31: each chunk read from memory by
  the hash, then again by the copy);
- ``blob_writer``: ``BlobWriter.write_views`` of the buffer with an empty skip-cache, what a
  checkpoint does with a new storage (the xxh3 key, then the one-pass write).

    .venv/bin/python benchmarks/blob_write.py --dir /dev/shm/x [--mib 1024] [--rounds 5]

Prints the median of each case and its ratio to ``raw_copy``, in wall and in CPU seconds; the
issue's bound is a copy plus a BLAKE3 pass, at most 1.5x the raw copy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time

import numpy as np

from jupyter_gkeresume.snapshot import SigningKey, SnapshotStore, SnapshotWriter, backends
from jupyter_gkeresume.snapshot.blobfile import layout_for
from jupyter_gkeresume.snapshot.digests import BLAKE3
from kernel_hooks import blobwriter
from kernel_hooks.blobwriter import BlobWriter


def raw_copy(view: memoryview, folder: str) -> None:
    with open(os.path.join(folder, "raw.bin"), "wb") as f:
        for start in range(0, len(view), 16 << 20):
            f.write(view[start : start + (16 << 20)])
        f.flush()
        os.fsync(f.fileno())


def store_write(view: memoryview, folder: str, chunk: int) -> None:
    saved, backends.OBSERVED_CHUNK = backends.OBSERVED_CHUNK, chunk
    try:
        layout = layout_for([("uint8", len(view))])
        SnapshotStore(folder, "bench").write_blob_hashing([layout.header, view], BLAKE3, layout.size)
    finally:
        backends.OBSERVED_CHUNK = saved


def blob_writer(view: memoryview, folder: str) -> None:
    blobwriter._digest_cache.clear()
    writer = SnapshotWriter(SnapshotStore(folder, "bench"), SigningKey(b"bench-key"))
    BlobWriter(writer).write_views([("uint8", view)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    memory = np.random.default_rng(0).integers(0, 256, args.mib << 20, dtype=np.uint8)
    view = memoryview(memory)
    cases = {
        "raw_copy": lambda folder: raw_copy(view, folder),
        "blake3": lambda folder: BLAKE3.of([view], len(view)),
        "store_one_pass": lambda folder: store_write(view, folder, backends.OBSERVED_CHUNK),
        "store_16mib": lambda folder: store_write(view, folder, 16 << 20),
        "blob_writer": lambda folder: blob_writer(view, folder),
    }
    wall: dict[str, list[float]] = {case: [] for case in cases}
    cpu: dict[str, list[float]] = {case: [] for case in cases}
    load = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for case, run in cases.items():
            folder = os.path.join(args.dir, case)
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder, mode=0o700)
            started, used = time.perf_counter(), time.process_time()
            run(folder)
            wall[case].append(time.perf_counter() - started)
            cpu[case].append(time.process_time() - used)
            shutil.rmtree(folder)
        load.append(os.getloadavg()[0])
    print(f"{args.mib} MiB to {args.dir}, {args.rounds} rounds, {os.cpu_count()} CPUs, load "
          f"average {min(load):.1f}-{max(load):.1f}\n")
    print("| case | wall s (median) | / raw_copy | CPU s (median) | / raw_copy |")
    print("|---|---:|---:|---:|---:|")
    base_wall, base_cpu = statistics.median(wall["raw_copy"]), statistics.median(cpu["raw_copy"])
    for case in cases:
        w, c = statistics.median(wall[case]), statistics.median(cpu[case])
        print(f"| {case} | {w:.3f} | {w / base_wall:.2f}x | {c:.3f} | {c / base_cpu:.2f}x |")


if __name__ == "__main__":
    main()
