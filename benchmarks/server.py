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

    .venv/bin/python benchmarks/server.py --gb 1.5 --dirs /var/tmp,/dev/shm --rounds 3 [--out F]
    .venv/bin/python benchmarks/server.py --fixed-cost --dirs /var/tmp,/dev/shm --rounds 7

``--fixed-cost`` runs rounds of ``pause_empty`` alone, back to back: the rest of a full round
(a pause and a resume of ``--gb``, raw writes and reads) leaves the next round's small pause
sharing the two cores and the disk with its after-effects.

Each round measures every case once, so ours and its yardstick run minutes apart at most; the
figures are per-round ratios, reported as their median with every round beside it (a memory
write on a ballooned VM can take 1x or 4x the time from one minute to the next: the first touch
of a page is what varies). Where the time goes is shown for the median round.

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
import statistics
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


def pause_empty(folder: str, poll: float) -> dict[str, Any]:
    """The pause of the session of a few KB, in a fresh server (the fixed cost)."""
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        server = start_server(Path(tmp))
        try:
            server.run_cell(server.new_session("empty.ipynb"), EMPTY_CELL)
            return operation(server, "gkeresume/api/pause", "paused", poll)
        finally:
            server.stop()


def measure_round(folder: str, gb: float, poll: float) -> dict[str, Any]:
    """One round in ``folder``: every case once, then the round's ratios."""
    out: dict[str, Any] = {"pause_empty": pause_empty(folder, poll)}
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
    out["figures"] = {
        "pause_empty": out["pause_empty"]["seconds"],
        "per_byte": (out["pause"]["seconds"] - out["pause_empty"]["seconds"])
        / out["raw_write"]["seconds"],
        "pause_over_raw_write": out["pause"]["seconds"] / out["raw_write"]["seconds"],
        "resume_over_limit": out["resume"]["seconds"]
        / (out["raw_read"]["seconds"] + out["kernel_torch"]["seconds"])}
    return out


CASES = ("pause_empty", "pause", "raw_write", "resume", "raw_read", "kernel_torch")
FIGURES = (("pause_empty", "fixed cost: pause of the empty session, s", "<= 0.5 s"),
           ("per_byte", "per byte: (pause - pause_empty) / raw write+fsync", "<= 1.1x disk, "
            "<= 1.5x tmpfs"),
           ("pause_over_raw_write", "pause / raw write+fsync", "<= 1.25x (issue 16)"),
           ("resume_over_limit", "resume / (raw cold read + kernel importing torch)",
            "<= 1.15x"))


def report(rounds: list[dict[str, Any]], gb: float, folder: str) -> None:
    """The median of each figure over the rounds, every round beside it, then where the time
    went in the round whose per-byte figure is the median."""
    medians = {key: statistics.median(r["figures"][key] for r in rounds) for key, *_ in FIGURES}
    print(f"\n### {folder}: session of ~{gb} GB ({rounds[0]['bytes'] / 1e9:.2f} GB stored); "
          f"{len(rounds)} rounds; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}\n")
    print("| case, seconds | " + " | ".join(f"round {i + 1}" for i in range(len(rounds)))
          + " |\n|---|" + "---:|" * len(rounds))
    for case in CASES:
        print(f"| {case} | " + " | ".join(f"{r[case]['seconds']:.2f}" for r in rounds) + " |")
    print("\n| figure | median | rounds | target |\n|---|---:|---|---|")
    for key, words, target in FIGURES:
        print(f"| {words} | {medians[key]:.2f} | "
              + ", ".join(f"{r['figures'][key]:.2f}" for r in rounds) + f" | {target} |")
    r = sorted(rounds, key=lambda r: r["figures"]["per_byte"])[len(rounds) // 2]
    print(f"\nWhere the time went in round {rounds.index(r) + 1} (the median per-byte round):")
    for case in ("pause_empty", "pause", "resume"):
        print(f"\n{case}, where the time goes (status phases: workspace, kernel:phase):\n")
        print_phases(r[case]["phases"])
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


def report_fixed_cost(rounds: list[dict[str, Any]], folder: str) -> None:
    """``--fixed-cost``: every round's ``pause_empty``, their median, and where the time went
    in the median round."""
    seconds = [r["seconds"] for r in rounds]
    median = sorted(rounds, key=lambda r: r["seconds"])[len(rounds) // 2]
    print(f"\n### {folder}: pause_empty alone, {len(rounds)} rounds; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    print(f"median {statistics.median(seconds):.3f} s (target <= 0.5 s); rounds "
          + ", ".join(f"{x:.3f}" for x in seconds))
    print(f"\nround {rounds.index(median) + 1}, where the time goes:\n")
    print_phases(median["phases"])


def print_phases(phases: list[tuple[float, str]]) -> None:
    """Each status phase seen (seconds since the request, label) with its seconds until the
    next one."""
    for (at, label), (nxt, _) in itertools.pairwise(phases):
        print(f"- {at:7.2f} s  +{nxt - at:5.2f} s  {label}")
    print(f"- {phases[-1][0]:7.2f} s  {phases[-1][1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.5)
    parser.add_argument("--dirs", default=os.environ.get("BENCH_DIR") or tempfile.gettempdir(),
                        help="comma-separated directories to measure in (e.g. /var/tmp,/dev/shm)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--poll", type=float, default=0.05, help="status poll interval, seconds")
    parser.add_argument("--fixed-cost", action="store_true",
                        help="rounds of pause_empty alone (nothing else in the round)")
    parser.add_argument("--out")
    args = parser.parse_args()
    os.environ.pop("GKERESUME_SERVER_URL", None)  # the kernels talk to this run's server
    results = {}
    for folder in args.dirs.split(","):
        if args.fixed_cost:
            results[folder] = [pause_empty(folder, args.poll) for _ in range(args.rounds)]
            report_fixed_cost(results[folder], folder)
            continue
        results[folder] = [measure_round(folder, args.gb, args.poll)
                           for _ in range(args.rounds)]
        report(results[folder], args.gb, folder)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
