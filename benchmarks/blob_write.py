"""The per-byte cost of writing new content to a local store, beside a raw copy (issue 31 item 4).

One process, one buffer of ``--mib`` MiB of memory of its own (random bytes, faulted in), written
to ``--dir`` as blobs of ``--blob-mib`` (16: a checkpoint's usual big storage; from 64 BLAKE3
hashes a blob with every core and the store feeds it 16 MiB chunks) in turn by each case,
``--rounds`` times (A B C ... A B C ..., so a drift of the machine's speed hits every case
alike); each is timed in wall and CPU seconds (every thread: ``time.process_time``):

- ``raw_copy``: the buffer written in 16 MiB pieces, fsynced: the yardstick (one read of each
  byte from memory, one write);
- ``blake3``: one BLAKE3 pass over the buffer, writing nothing;
- ``store_one_pass``: ``SnapshotStore.write_blob_hashing`` (hash and copy of each 1 MiB chunk
  in turn: ``backends.OBSERVED_CHUNK``, for blobs hashed on one thread);
- ``store_16mib``: the same with 16 MiB chunks (before issue 31: each chunk read from memory by
  the hash, then again by the copy; blobs from 64 MiB are written so in both cases);
- ``blob_writer``: ``BlobWriter.write_views`` of each blob with an empty skip-cache, what a
  checkpoint does with a new storage (the xxh3 key, then the one-pass write).

    .venv/bin/python benchmarks/blob_write.py --dir /dev/shm/x [--mib 1024] [--blob-mib 16] [--rounds 5]

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
from jupyter_gkeresume.snapshot import store as store_module
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


def store_write(blobs: list[memoryview], folder: str, chunk: int) -> None:
    saved, store_module.OBSERVED_CHUNK = store_module.OBSERVED_CHUNK, chunk
    try:
        store = SnapshotStore(folder, "bench")
        for blob in blobs:
            layout = layout_for([("uint8", len(blob))])
            store.write_blob_hashing([layout.header, blob], BLAKE3, layout.size)
    finally:
        store_module.OBSERVED_CHUNK = saved


def blob_writer(blobs: list[memoryview], folder: str) -> None:
    blobwriter._digest_cache.clear()
    writer = BlobWriter(SnapshotWriter(SnapshotStore(folder, "bench"), SigningKey(b"bench-key")))
    for blob in blobs:
        writer.write_views([("uint8", blob)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--blob-mib", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    memory = np.random.default_rng(0).integers(0, 256, args.mib << 20, dtype=np.uint8)
    view = memoryview(memory)
    step = args.blob_mib << 20
    blobs = [view[start : start + step] for start in range(0, len(view), step)]
    cases = {
        "raw_copy": lambda folder: raw_copy(view, folder),
        "blake3": lambda folder: [BLAKE3.of([b], len(b)) for b in blobs],
        "store_one_pass": lambda folder: store_write(blobs, folder, backends.OBSERVED_CHUNK),
        "store_16mib": lambda folder: store_write(blobs, folder, 16 << 20),
        "blob_writer": lambda folder: blob_writer(blobs, folder),
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
    print(f"{args.mib} MiB in blobs of {args.blob_mib} MiB to {args.dir}, {args.rounds} rounds, "
          f"{os.cpu_count()} CPUs, load average {min(load):.1f}-{max(load):.1f}\n")
    print("| case | wall s (median) | / raw_copy | CPU s (median) | / raw_copy |")
    print("|---|---:|---:|---:|---:|")
    base_wall, base_cpu = statistics.median(wall["raw_copy"]), statistics.median(cpu["raw_copy"])
    for case in cases:
        w, c = statistics.median(wall[case]), statistics.median(cpu[case])
        print(f"| {case} | {w:.3f} | {w / base_wall:.2f}x | {c:.3f} | {c / base_cpu:.2f}x |")


if __name__ == "__main__":
    main()
