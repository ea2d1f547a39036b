"""Pause and resume through a real jupyter_server, side by side with the disk and a bare kernel.

One ``jupyter server`` subprocess per session and directory, with the extension (release backend
``none``, the local store in that directory). Then, in one run per directory:

- ``pause_empty``: the pause of a session of a few KB whose kernel imported torch and numpy (as
  the big one did): POST /gkeresume/api/pause, poll the status until ``paused`` (hold,
  checkpoint, verify, record, release, kernel stop). That is the pause's fixed cost;
- ``pause``: the same for a session of ``--gb`` (``core.build_session``: a model with AdamW
  state, arrays, small objects) in a fresh server; ``raw_write`` is a write+fsync of its store's
  byte count in the same directory (``core.py --case raw_write``). The per-byte cost is
  ``(pause - pause_empty) / raw_write``;
- ``resume``: the big store's page cache dropped, POST /gkeresume/api/resume until ``ready`` (a
  new kernel started, then restored); its limit is ``raw_read`` (a cold read of the same bytes,
  ``core.py --case raw_read``) plus ``kernel_torch``: a fresh kernel of the same server until
  ``import torch`` returned in it.

    .venv/bin/python benchmarks/server.py --gb 1.5 --dirs /var/tmp,/dev/shm [--out server.json]

Seconds run from the request to the server's own timestamp of the final state (``since``);
where the time goes comes from polling the status (every ``--poll`` seconds): each phase the
workspace and its kernel went through, with the seconds until the next one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parent), str(HERE.parent.parent / "tests")]

from core import drop_cache  # noqa: E402  (the session and the raw cases are core.py's)
from fixtures_server import ServerProcess  # noqa: E402  (the tests' server subprocess)

SIGNING_KEY = "bench-server-key-" + "3" * 32
DEADLINE = 1800.0  # a safety net against a hung operation, not a measurement


EMPTY_CELL = "import numpy, torch\nnote = {'what': 'a session of a few KB', 'n': list(range(100))}"


def build_cell(gb: float) -> str:
    return (f"import sys; sys.path.insert(0, {str(HERE.parent)!r})\n"
            f"from core import build_session\nglobals().update(build_session({gb!r}))\n"
            "del build_session")


def follow(server: ServerProcess, until: str, poll: float) -> dict[str, Any]:
    """Poll the status until the workspace is ``until`` with no operation in flight; returns
    the final status, the phases seen (``[seconds, label]``, wall clock) and the kernels'
    last results."""
    phases: list[list[Any]] = []
    results: dict[str, Any] = {}
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        status = server.status()
        labels = [status["state"]]
        for kernel in status["kernels"]:
            progress = kernel.get("progress") or {}
            labels.append(f"{kernel['state']}:{progress.get('phase', '-')}")
            if kernel.get("result"):
                results[kernel["kernel_id"]] = kernel["result"]
        label = " ".join(labels)
        if not phases or phases[-1][1] != label:
            phases.append([time.time(), label])
        if status["operation"] is None:
            if status["state"] != until:
                raise RuntimeError(f"ended {status['state']}, not {until}: {status.get('reason')}")
            return {"status": status, "phases": phases, "results": results}
        time.sleep(poll)
    raise RuntimeError(f"never {until}:\n{server.log()}")


def pause_phase_sums(server: ServerProcess) -> dict[str, float]:
    """The server's ``gkeresume_pause_seconds`` sums by phase (checkpoint, verify, release,
    total), from its Prometheus ``/metrics``."""
    request = urllib.request.Request(f"{server.url}/metrics",
                                     headers={"Authorization": f"token {server.token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
    return {m[1]: float(m[2]) for m in
            re.finditer(r'^gkeresume_pause_seconds_sum\{phase="(\w+)"\} (\S+)$', text, re.M)}


def operation(server: ServerProcess, path: str, until: str, poll: float) -> dict[str, Any]:
    """One pause or resume, from the request to the server's timestamp of ``until``; a pause
    also gets the server's own seconds per phase (``server_phases``)."""
    sums = pause_phase_sums(server)
    started = time.time()
    code, body = server.call("POST", path, {})
    if code != 202:
        raise RuntimeError(f"POST {path}: {code} {body}")
    seen = follow(server, until, poll)
    ended = seen["status"]["since"]  # when the server moved to ``until``
    *before, _final = seen["phases"]
    after = pause_phase_sums(server)
    return {"seconds": ended - started,
            "server_phases": {k: round(v - sums.get(k, 0.0), 3) for k, v in after.items()},
            "phases": [[round(t - started, 3), label] for t, label in before]
            + [[round(ended - started, 3), until]],
            "kernel_timings": {k: r.get("timings") for k, r in seen["results"].items()}}


def kernel_with_torch(server: ServerProcess) -> dict[str, Any]:
    """A fresh kernel of the server, from the request until ``import torch`` returned in it."""
    started = time.time()
    code, body = server.call("POST", "api/kernels", {"name": "python3"})
    if code != 201:
        raise RuntimeError(f"POST api/kernels: {code} {body}")
    server.run_cell(body["id"], "import torch")
    seconds = time.time() - started
    server.call("DELETE", f"api/kernels/{body['id']}")
    return {"seconds": seconds}


def core_case(case: str, gb: float, work: Path) -> dict[str, Any]:
    """``core.py --case`` in a fresh process (``raw_write``, ``raw_read``: on ``work/store``)."""
    proc = subprocess.run([sys.executable, str(HERE.parent / "core.py"), "--case", case,
                           "--gb", str(gb), "--work", str(work)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def start_server(work: Path) -> ServerProcess:
    """A server with the local store ``work/store``; no checkpoint when it stops (the run is
    over by then)."""
    config = {"GkeResume": {"store_url": str(work / "store"), "workspace_id": "bench",
                            "release_backend": "none", "checkpoint_on_shutdown": False}}
    server = ServerProcess(work / "server", config, {"GKERESUME_SIGNING_KEY": SIGNING_KEY})
    server.start()
    return server


def measure_dir(folder: str, gb: float, poll: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        server = start_server(Path(tmp))
        try:
            server.run_cell(server.new_session("empty.ipynb"), EMPTY_CELL)
            out["pause_empty"] = operation(server, "gkeresume/api/pause", "paused", poll)
        finally:
            server.stop()
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        work = Path(tmp)
        server = start_server(work)
        try:
            server.run_cell(server.new_session("bench.ipynb"), build_cell(gb))
            out["pause"] = operation(server, "gkeresume/api/pause", "paused", poll)
            out["raw_write"] = core_case("raw_write", gb, work)
            out["kernel_torch"] = kernel_with_torch(server)
            out["raw_read"] = core_case("raw_read", gb, work)
            drop_cache(work / "store")
            out["resume"] = operation(server, "gkeresume/api/resume", "ready", poll)
        finally:
            server.stop()
    out["bytes"] = out["raw_write"]["bytes"]
    out["per_byte"] = (out["pause"]["seconds"] - out["pause_empty"]["seconds"]) \
        / out["raw_write"]["seconds"]
    return out


def report(r: dict[str, Any], gb: float, folder: str) -> None:
    limit = r["raw_read"]["seconds"] + r["kernel_torch"]["seconds"]
    print(f"\n### {folder}: session of ~{gb} GB ({r['bytes'] / 1e9:.2f} GB stored); "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n")
    print("| case | seconds |\n|---|---:|")
    for case in ("pause_empty", "pause", "raw_write", "resume", "raw_read", "kernel_torch"):
        print(f"| {case} | {r[case]['seconds']:.2f} |")
    print("\n| figure | value | target |\n|---|---:|---|")
    print(f"| fixed cost: pause of the empty session | {r['pause_empty']['seconds']:.2f} s "
          "| <= 0.5 s (issue 23) |")
    print(f"| per-byte cost: (pause - pause_empty) / raw write+fsync | {r['per_byte']:.2f}x "
          "| <= 1.1x (issue 23) |")
    print(f"| pause / raw write+fsync | {r['pause']['seconds'] / r['raw_write']['seconds']:.2f}x "
          "| <= 1.25x (issue 16) |")
    print(f"| resume / (raw cold read + kernel importing torch) | "
          f"{r['resume']['seconds'] / limit:.2f}x | <= 1.15x (issue 16) |")
    for case in ("pause_empty", "pause", "resume"):
        print(f"\n{case}, where the time goes (status phases: workspace, kernel:phase):\n")
        phases = r[case]["phases"]
        for (at, label), (nxt, _) in itertools.pairwise(phases):
            print(f"- {at:7.2f} s  +{nxt - at:5.2f} s  {label}")
        print(f"- {phases[-1][0]:7.2f} s  {phases[-1][1]}")
        server_phases = r[case]["server_phases"]
        if server_phases.get("total"):
            rest = server_phases["total"] - sum(v for k, v in server_phases.items() if k != "total")
            print("- the server's own seconds: " + ", ".join(
                f"{k} {v:.2f} s" for k, v in server_phases.items())
                + f"; the rest (hold, paused record, kernel stop) {rest:.2f} s")
        for kid, timings in r[case]["kernel_timings"].items():
            if timings:
                print(f"- kernel {kid[:8]} timings: "
                      + ", ".join(f"{k} {v:.2f} s" for k, v in timings.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.5)
    parser.add_argument("--dirs", default=os.environ.get("BENCH_DIR") or tempfile.gettempdir(),
                        help="comma-separated directories to measure in (e.g. /var/tmp,/dev/shm)")
    parser.add_argument("--poll", type=float, default=0.05, help="status poll interval, seconds")
    parser.add_argument("--out")
    args = parser.parse_args()
    os.environ.pop("GKERESUME_SERVER_URL", None)  # the kernels talk to this run's server
    results = {}
    for folder in args.dirs.split(","):
        results[folder] = measure_dir(folder, args.gb, args.poll)
        report(results[folder], args.gb, folder)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
