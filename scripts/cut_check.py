"""Cut a script at every cell boundary, pause it through a real server, resume it on a fresh
one, run the rest, and compare what it prints with the uninterrupted run.

    .venv/bin/python scripts/cut_check.py SCRIPT.py[:CUT,...] [SCRIPT.py ...]

Cells are split at lines of 20 or more ``#`` (the sphinx-gallery separator of PyTorch's
tutorials; put such lines into any script); a ``.ipynb`` gives its code cells. For each script:
one server runs every cell in a notebook session and keeps the output of each cell. Then, for
each cut point k: a server (the extension, release backend ``none``, a local store) runs cells
[0, k) in a session of the same notebook, pauses through ``POST gkeresume/api/pause`` and stops;
a fresh server process on the same store and workspace, on the same home directory at the
same path (a fresh pod mounts the same home volume), resumes through
``POST gkeresume/api/resume`` and runs cells [k, n) in the resumed kernel. Each cell's output
(its stdout, then its stderr: how the two interleave depends on when ipykernel flushes each,
then the text of its result, ``Out[n]``) is compared after masking object addresses,
ipykernel's per-process cell directory and tqdm's and a Trainer's timings (``VOLATILE``). Each
cut's line gives the resume's verdict and what it did not restore. ``SCRIPT.py:3,7`` cuts
before cells 3 and 7 only (0-based). Exit status: the number of cuts that differed.

Not part of the test suite: public scripts stay out of this repository, and a run takes
minutes (two server starts and a pause and a resume per cut).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fixtures_server import ServerProcess  # the tests' server subprocess

SIGNING_KEY = "cut-check-key-" + "4" * 32
#: Masked before comparing: object addresses, ipykernel's cell directory, and the elapsed time and
#: rate of a tqdm bar (``[00:01<00:00, 94.2it/s]``), which differ between any two runs.
#: So are the timings a ``transformers.Trainer`` logs (``'train_runtime': '2.885'``, or as a
#: number in its ``TrainOutput``) and the time and process id that open a line of torch's logging
#: (``W1206 13:00:03.795000 6390 ``), of its C++ warnings (``[W1208 00:20:00.004 file.cpp:251] ``)
#: or of its profiler's (``USDT:2026-12-07 19:58:34 15031:15031 ``).
VOLATILE = re.compile(r"0x[0-9a-f]{6,}|ipykernel_\d+|\[\d+:\d+<[^\]]*\]"
                      r"|'\w*(?:runtime|per_second|preparation_time)': '?[\d.e+-]+'?"
                      r"|^\[[IWEF]\d{4} [\d:.]+ [\w.]+:\d+\] "
                      r"|^[IWEF]\d{4} [\d:.]+ +\d+ |^USDT:[\d-]+ [\d:]+ \d+:\d+ ", re.M)


def cells_of(script: Path) -> list[str]:
    """The code cells of a notebook (``.ipynb``), or of a script split at its separator lines."""
    if script.suffix == ".ipynb":
        cells = json.loads(script.read_text())["cells"]
        return ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and c["source"]]
    parts = re.split(r"^#{20,}.*$", script.read_text(), flags=re.M)
    return [part.strip("\n") for part in parts if part.strip()]


def start_server(work: Path, store: Path, home: Path) -> ServerProcess:
    """A server on ``store`` whose root directory is ``home`` (the home volume: a fresh pod
    mounts the same one at the same path, so absolute paths a session kept still lead there)."""
    config = {"GkeResume": {"store_url": str(store), "workspace_id": "cut-check",
                            "release_backend": "none", "checkpoint_on_shutdown": False},
              "ServerApp": {"root_dir": str(home)}}
    server = ServerProcess(work, config, {"GKERESUME_SIGNING_KEY": SIGNING_KEY,
                                          "MPLBACKEND": "agg"})
    server.start()
    return server


def empty(home: Path) -> Path:
    """``home`` emptied: each run starts on an empty home volume, as the uninterrupted one did."""
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    return home


def run_cells(server: ServerProcess, kernel_id: str, cells: list[str]) -> list[str]:
    """Each cell's output; a cell that raised gives what it showed before, then its error's
    name and value, and the next cells still run (what a resume broke shows in every cell it
    breaks)."""
    outputs = []
    for cell in cells:
        try:
            outputs.append(VOLATILE.sub("?", server.run_cell(kernel_id, cell, by_stream=True)))
        except AssertionError as failed:  # run_cell_in's check: the reply's content, a dict
            content = failed.args[0] if failed.args else None
            outputs.append(VOLATILE.sub("?", f"{content.get('shown', '')}ERROR {content['ename']}: "
                                             f"{content['evalue']}")
                           if isinstance(content, dict) else str(failed))
    return outputs


def settle(server: ServerProcess, method: str, path: str) -> dict:
    code, body = server.call(method, path, {})
    if code != 202:
        raise RuntimeError(f"{method} {path}: {code} {body}")
    return server.wait_for(lambda status: status["operation"] is None, path)


def check(script: Path, work: Path, cuts: list[int] | None = None) -> int:
    """Cut ``script`` at each of ``cuts`` (cell indices; all when None); the cuts that differed."""
    cells, notebook, home = cells_of(script), script.stem + ".ipynb", work / "home"
    server = start_server(work / "whole", work / "store-whole", empty(home))
    expected = run_cells(server, server.new_session(notebook), cells)
    server.stop()
    differed = 0
    for cut in cuts or range(1, len(cells)):
        store = work / f"store-{cut}"
        server = start_server(work / f"before-{cut}", store, empty(home))
        run_cells(server, server.new_session(notebook), cells[:cut])
        paused = settle(server, "POST", "gkeresume/api/pause")
        server.stop()
        if paused["state"] != "paused":
            raise RuntimeError(f"cut {cut}: the pause ended {paused['state']}: {paused.get('reason')}")
        server = start_server(work / f"after-{cut}", store, home)
        resumed = settle(server, "POST", "gkeresume/api/resume")
        kernel = resumed["kernels"][0]
        got = run_cells(server, kernel["kernel_id"], cells[cut:])
        server.stop()
        result = kernel.get("result") or {}
        same = got == expected[cut:]
        differed += not same
        left = [s["name"] for s in result.get("not_restored") or []]
        print(f"{script.name} cut {cut}/{len(cells)}: {'identical' if same else 'DIFFERENT'}; "
              f"{resumed['state']}; verdict {(result.get('verdict') or {}).get('level')}; "
              f"not restored {left}; warnings {result.get('warnings') or []}", flush=True)
        if (result.get("verdict") or {}).get("level") != "exact":  # none: the resume failed
            why = (result.get("verdict") or {}).get("reasons") or resumed.get("reason")
            print(f"  verdict reasons: {why}", flush=True)
        for index, (want, have) in enumerate(zip(expected[cut:], got, strict=True)):
            if want != have:
                print(f"  cell {cut + index}\n  whole run: {want[:800]!r}\n  resumed:   {have[:800]!r}")
    return differed


def main() -> None:
    """``SCRIPT[:CUT,CUT...]`` per argument: only those cuts of that script."""
    differed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for index, name in enumerate(sys.argv[1:]):
            path, _, cuts = name.partition(":")
            differed += check(Path(path), Path(tmp) / str(index),
                              [int(c) for c in cuts.split(",")] if cuts else None)
    sys.exit(min(differed, 100))


if __name__ == "__main__":
    main()
