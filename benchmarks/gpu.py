"""GPU benchmarks: the CUDA engine against the hardware, and pause/resume of a big fp16 model.

Usage (on a machine with a GPU; prints one JSON object, also written to ``--out``)::

    .venv/bin/python benchmarks/gpu.py                      # both parts, defaults below
    .venv/bin/python benchmarks/gpu.py --skip-e2e --bytes 8GiB
    .venv/bin/python benchmarks/gpu.py --skip-bandwidth --model-gib 6 --store /local/ssd/dir
    .venv/bin/python benchmarks/gpu.py --skip-bandwidth --device cpu --model-gib 0.25  # dry run

Part 1, device-to-host bandwidth, same bytes, same run, best of ``--repeat``:
  ``raw``: one ``cuMemcpyDtoH`` into a single pinned buffer as big as the data (the hardware's
  number, using as much pinned host memory as there is data); ``engine``: the engine's ring
  (``buffers * chunk_bytes`` pinned), consumer doing nothing; ``engine+blake3``: consumer hashing
  every chunk with the blobs' digest (BLAKE3, format v2), as a pause does, against that digest of
  the same bytes already in host memory (with overlap the engine run costs about the larger of the
  two, not their sum). Target: engine >= 0.8x raw.
  And host-to-device, as a resume streams: ``raw`` ``cuMemcpyHtoD`` from the pinned buffer
  against the engine from pageable memory through its ring (``engine_h2d_vs_raw``).

Part 2, end to end, real kernels (jupyter_client), a ``--model-gib`` fp16 model on cuda:0 and a
local-disk store: ``pause_s`` is from the checkpoint request to its reply (kernel synchronized,
everything hashed, written, fsynced, committed, verified); ``resume_to_next_cell_s`` is, in a
fresh, started kernel, from the resume request to the reply of the next cell (torch import, CUDA
init, reading, copying to the device, unpickling all inside). Targets: < 10 s and < 5 s
for 6 GB. The page cache is dropped before the resume when the process may (root), else the
reads may come from memory: ``cache_dropped`` says which. ``pause_rss_growth_bytes`` is how much
the kernel's peak host memory grew during the pause (bounded by the pinned ring, not the model).
With ``--peers``, in the same kernel after the pause and on the same disk: ``raw_write_s`` /
``raw_read_s`` (the model's byte count written from one 256 MiB host buffer with fsync, and read
back cold: the disk's limit), ``torch_save_s`` / ``torch_load_s`` (state_dict, ``map_location``
the device) and ``safetensors_save_s`` / ``safetensors_load_s``; each file is deleted before the
next, so the disk holds at most the store and one peer's copy.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def best_of(repeat: int, run) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def bandwidth(nbytes: int, repeat: int) -> dict:
    from jupyter_gkeresume.snapshot.digests import BLAKE3
    from kernel_hooks.cuda_engine import get_engine

    engine = get_engine()
    if engine is None:
        raise SystemExit("no usable GPU here: nothing to measure")
    drv = engine._drv
    allocation = engine.allocate(nbytes, 0)
    fill = os.urandom(64 << 20)
    for offset in range(0, nbytes, len(fill)):
        engine.host_to_device(memoryview(fill)[: nbytes - offset], allocation.ptr + offset, 0)
    engine.synchronize_all()

    with engine._current(engine._device(0)):
        pinned = engine._call("cuMemHostAlloc", nbytes, drv.CU_MEMHOSTALLOC_PORTABLE)
    try:
        def raw() -> None:
            with engine._current(engine._device(0)):
                engine._call("cuMemcpyDtoH", pinned, allocation.ptr, nbytes)

        def ring() -> None:
            for _ in engine.device_to_host_chunks(allocation.ptr, nbytes, 0):
                pass

        def ring_hashed() -> None:
            h = BLAKE3.new(nbytes)
            for chunk in engine.device_to_host_chunks(allocation.ptr, nbytes, 0):
                h.update(chunk)

        host = (ctypes.c_char * nbytes).from_address(int(pinned))

        def hash_only() -> None:
            BLAKE3.of([memoryview(host)], nbytes)

        def raw_up() -> None:
            with engine._current(engine._device(0)):
                engine._call("cuMemcpyHtoD", allocation.ptr, pinned, nbytes)

        pageable = bytearray(nbytes)  # where a resume reads blob bytes from storage

        def ring_up() -> None:
            engine.host_to_device(pageable, allocation.ptr, 0)

        t_raw, t_ring = best_of(repeat, raw), best_of(repeat, ring)
        t_hashed, t_hash = best_of(repeat, ring_hashed), best_of(repeat, hash_only)
        t_raw_up, t_ring_up = best_of(repeat, raw_up), best_of(repeat, ring_up)
    finally:
        with engine._current(engine._device(0)):
            engine._call("cuMemFreeHost", pinned)
    def gbps(seconds: float) -> float:
        return round(nbytes / seconds / 1e9, 2)

    return {
        "bytes": nbytes, "chunk_bytes": engine.chunk_bytes, "buffers": engine.buffers,
        "raw_pinned_memcpy_GBps": gbps(t_raw), "engine_GBps": gbps(t_ring),
        "engine_vs_raw": round(t_raw / t_ring, 3),
        "engine_blake3_GBps": gbps(t_hashed), "blake3_in_host_memory_GBps": gbps(t_hash),
        "raw_pinned_h2d_GBps": gbps(t_raw_up), "engine_h2d_from_pageable_GBps": gbps(t_ring_up),
        "engine_h2d_vs_raw": round(t_raw_up / t_ring_up, 3),
    }


MODEL = """
import torch
torch.manual_seed(0)
layers, d = {layers}, 8192
with torch.device("{device}"):
    model = torch.nn.Sequential(*(torch.nn.Linear(d, d, bias=False) for _ in range(layers)))
    model = model.half()
if torch.cuda.is_available():
    torch.cuda.synchronize()
print(sum(p.numel() * p.element_size() for p in model.parameters()))
"""

RSS = "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10)"

PEERS = """
import json, os, time, torch, safetensors.torch
def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()
def _timed(fn):
    start = time.perf_counter(); fn(); _sync(); return round(time.perf_counter() - start, 2)
def _fsync(path):
    fd = os.open(path, os.O_RDONLY); os.fsync(fd); os.close(fd)
def _drop(path):
    fd = os.open(path, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
_path, _n, _buf = {path!r}, {nbytes}, bytearray(256 << 20)
def _raw_write():
    with open(_path, "wb", buffering=0) as f:
        for off in range(0, _n, len(_buf)):
            f.write(memoryview(_buf)[: _n - off])
        os.fsync(f.fileno())
def _raw_read():
    with open(_path, "rb", buffering=0) as f:
        while f.readinto(_buf):
            pass
_dev = next(model.parameters()).device
_peer = {{"raw_write_s": _timed(_raw_write)}}
_drop(_path); _peer["raw_read_s"] = _timed(_raw_read); os.remove(_path)
_peer["torch_save_s"] = _timed(lambda: (torch.save(model.state_dict(), _path), _fsync(_path)))
_drop(_path); _peer["torch_load_s"] = _timed(lambda: torch.load(_path, map_location=_dev))
os.remove(_path)
_peer["safetensors_save_s"] = _timed(lambda: (safetensors.torch.save_file(model.state_dict(), _path),
                                               _fsync(_path)))
_drop(_path)
_peer["safetensors_load_s"] = _timed(lambda: safetensors.torch.load_file(_path, device=str(_dev)))
os.remove(_path)
print(json.dumps(_peer))
"""


def end_to_end(model_gib: float, store: Path, device: str = "cuda", drop_cache: bool = True,
               peers: bool = False) -> dict:
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ, GKERESUME_STORE=str(store), GKERESUME_WORKSPACE="bench-gpu",
               GKERESUME_SIGNING_KEY="bench-key-" + "0" * 32)
    layers = max(1, round(model_gib * 2**30 / (8192 * 8192 * 2)))

    def run(client, code: str, timeout: float = 1800) -> tuple[float, str]:
        out: list[str] = []

        def hook(msg):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                out.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")

        start = time.perf_counter()
        reply = client.execute_interactive(code, output_hook=hook, timeout=timeout)
        elapsed = time.perf_counter() - start
        if reply["content"]["status"] != "ok":
            raise SystemExit(f"cell failed: {''.join(out)}")
        return elapsed, "".join(out)

    manager, client = start_new_kernel(kernel_name="python3", env=env)
    try:
        _, out = run(client, MODEL.format(layers=layers, device=device))
        model_bytes = int(out.strip().splitlines()[-1])
        rss_before = int(run(client, RSS)[1].split()[-1])
        pause_s, _ = run(client, "import kernel_hooks; kernel_hooks.checkpoint('bench')")
        rss_growth = int(run(client, RSS)[1].split()[-1]) - rss_before
        peer = {}
        if peers:
            cell = PEERS.format(path=str(store.parent / "peer.bin"), nbytes=model_bytes)
            peer = json.loads(run(client, cell)[1].strip().splitlines()[-1])
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    dropped = drop_page_cache() if drop_cache else False
    manager, client = start_new_kernel(kernel_name="python3", env=env)
    try:
        run(client, "import kernel_hooks")  # kernel started; torch import and CUDA init are timed
        start = time.perf_counter()
        client.execute("kernel_hooks.resume('bench')")
        _, out = run(client, "print(sum(p.numel() for p in model.parameters()))")
        resume_s = time.perf_counter() - start
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return {
        "model_bytes": model_bytes, "store": str(store), "pause_s": round(pause_s, 2),
        "resume_to_next_cell_s": round(resume_s, 2), "cache_dropped": dropped,
        "pause_GBps": round(model_bytes / pause_s / 1e9, 2),
        "resume_GBps": round(model_bytes / resume_s / 1e9, 2),
        "pause_rss_growth_bytes": rss_growth, **peer,
    }


def drop_page_cache() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def hardware() -> dict:
    from jupyter_gkeresume.snapshot.fingerprint import cuda_facts

    facts = {"python": platform.python_version(), "cpus": os.cpu_count(), "cuda": cuda_facts()}
    try:
        facts["host_memory_gib"] = round(
            os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1
        )
        facts["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,pcie.link.gen.max,pcie.link.width.max,memory.total",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=20, check=False,
        ).stdout.strip()
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bytes", default="4GiB", help="bytes for the bandwidth part")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--model-gib", type=float, default=6.0)
    parser.add_argument("--store", type=Path, default=None, help="local store directory")
    parser.add_argument("--device", default="cuda", help="cpu: dry-run the harness anywhere")
    parser.add_argument("--skip-bandwidth", action="store_true")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--keep-page-cache", action="store_true",
                        help="do not drop the page cache before the resume (smoke runs)")
    parser.add_argument("--peers", action="store_true",
                        help="also time raw disk I/O, torch.save/load and safetensors of the same state")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()

    result: dict = {"hardware": hardware()}
    if not args.skip_bandwidth:
        result["bandwidth"] = bandwidth(parse_size(args.bytes), args.repeat)
        print(json.dumps(result["bandwidth"]), file=sys.stderr, flush=True)
    if not args.skip_e2e:
        with tempfile.TemporaryDirectory(dir=args.store) as store:
            result["end_to_end"] = end_to_end(args.model_gib, Path(store), args.device,
                                              drop_cache=not args.keep_page_cache, peers=args.peers)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
