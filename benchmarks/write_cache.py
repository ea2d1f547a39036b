"""Writing many large files with and without dropping each one's page cache once it is durable.

The local store drops the cache of every file of 1 MiB or more after its fsync
(``backends.UNCACHED_BYTES``): this measures why, on the machine at hand. Each round writes
``--gb`` as files of ``--file-mib`` in 16 MiB writes from 4 threads, each file fsynced, once
keeping the cache (``keep``) and once dropping it (``drop``, ``posix_fadvise(DONTNEED)`` after the
fsync), alternating; the files are deleted between cases. Prints wall and CPU seconds (user +
system, all threads) per round and their medians.

    .venv/bin/python benchmarks/write_cache.py --dir /var/tmp/wc --gb 3.2 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WRITE = 16 << 20


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def write_files(folder: Path, count: int, writes: int, drop: bool, data: bytes) -> tuple[float, float]:
    def one(i: int) -> None:
        fd = os.open(folder / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for _ in range(writes):
                os.write(fd, data)
            os.fsync(fd)
            if drop:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    start, cpu = time.perf_counter(), cpu_seconds()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(count)))
    return time.perf_counter() - start, cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--gb", type=float, default=3.2)
    parser.add_argument("--file-mib", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    writes = max(1, args.file_mib * (1 << 20) // WRITE)
    count = max(1, round(args.gb * 1e9 / (writes * WRITE)))
    data = os.urandom(WRITE)
    results: dict[str, list[tuple[float, float]]] = {"keep": [], "drop": []}
    for round_ in range(args.rounds):
        for case in ("keep", "drop"):
            wall, cpu = write_files(folder, count, writes, case == "drop", data)
            results[case].append((wall, cpu))
            print(f"round {round_ + 1} {case}: {wall:.2f} s, {cpu:.2f} CPU s", flush=True)
            for path in folder.iterdir():
                path.unlink()
    print(f"\n{count} files of {writes * WRITE >> 20} MiB ({count * writes * WRITE / 1e9:.2f} GB) "
          f"to {folder}, 4 threads, {args.rounds} rounds\n")
    print("| case | wall s (median) | CPU s (median) |\n|---|---:|---:|")
    for case, rows in results.items():
        print(f"| {case} | {statistics.median(w for w, _ in rows):.2f} "
              f"| {statistics.median(c for _, c in rows):.2f} |")


if __name__ == "__main__":
    main()
