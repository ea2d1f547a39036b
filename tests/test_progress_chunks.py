"""Progress that moves inside one big blob (issue 15.1): counted per chunk written, read and
verified, and per piece of the graph unpickled; throttled without losing any phase's last report."""

from __future__ import annotations

import numpy as np
import pytest

from jupyter_gkeresume.snapshot import SigningKey, SnapshotStore, SnapshotWriter, backends
from kernel_hooks import blobwriter
from kernel_hooks.blobwriter import BlobWriter
from kernel_hooks.progress import PhaseBytes, ProgressThrottle
from kernel_hooks.results import Progress
from kernel_hooks.storages import CollectedStorage

MIB = 1 << 20
KEY = SigningKey(b"progress-test-key")


def within_one_blob(reports: list[Progress], phase: str) -> list[int]:
    """The done_bytes of ``phase`` short of its total, checked to only increase."""
    done = [p.done_bytes for p in reports if p.phase == phase]
    assert done == sorted(done) and len(set(done)) == len(done), done
    return [d for d in done if d < reports[-1].total_bytes]


def host_item(array: np.ndarray) -> CollectedStorage:
    return CollectedStorage("s0", "numpy", str(array.dtype), array.nbytes, "cpu", "x", array,
                            array.ctypes.data)


@pytest.fixture
def empty_cache(monkeypatch):
    monkeypatch.setattr(blobwriter, "_digest_cache", type(blobwriter._digest_cache)())


@pytest.mark.parametrize("known", [False, True], ids=["new content", "known digest, not in store"])
def test_writing_one_blob_reports_every_chunk(tmp_path, monkeypatch, empty_cache, known):
    monkeypatch.setattr(backends, "WRITE_CHUNK", 1 * MIB)
    store = SnapshotStore(str(tmp_path), "ws")
    array = np.arange(8 * MIB // 8, dtype=np.float64)  # one 8 MiB storage: one blob, 8 chunks
    if known:  # hit in the skip-cache, but the store lacks it: put_blob writes it
        BlobWriter(SnapshotWriter(store, KEY)).write_all([[host_item(array)]])
        for blob in store.list_blobs():
            store.delete_blob(blob.digest)
    reports: list[Progress] = []
    written = BlobWriter(SnapshotWriter(store, KEY), progress=reports.append).write_all(
        [[host_item(array)]])
    assert written.new_bytes > array.nbytes
    assert len(within_one_blob(reports, "writing")) >= 3
    assert reports[-1] == Progress("writing", array.nbytes, array.nbytes, reports[-1].seconds)


def test_a_reused_blob_moves_progress_by_its_whole_size(tmp_path, empty_cache):
    store = SnapshotStore(str(tmp_path), "ws")
    array = np.ones(2 * MIB, dtype=np.uint8)
    BlobWriter(SnapshotWriter(store, KEY)).write_all([[host_item(array)]])
    reports: list[Progress] = []
    again = BlobWriter(SnapshotWriter(store, KEY), progress=reports.append).write_all(
        [[host_item(array)]])
    assert again.new_bytes == 0
    assert [(p.phase, p.done_bytes) for p in reports] == [("writing", array.nbytes)]


def test_a_blob_share_never_counts_more_than_its_bytes():
    reports: list[Progress] = []
    phase = PhaseBytes("reading", 100, reports.append)
    share = phase.share(60)
    share.add(50)
    share.add(50)  # a header or a second pass: capped at the share
    share.finish()
    phase.share(40).finish()
    assert [p.done_bytes for p in reports] == [50, 60, 100]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_throttle_sends_each_phases_first_and_last_report(monkeypatch):
    clock = Clock()
    monkeypatch.setattr("kernel_hooks.progress.time.monotonic", clock)
    sent: list[tuple[str, int]] = []
    throttle = ProgressThrottle(lambda p: sent.append((p.phase, p.done_bytes)), 0.25)
    for done in (1, 2, 3):  # within one interval: only the first goes at once
        throttle(Progress("writing", done, 10, 0.0))
    assert sent == [("writing", 1)]
    clock.now = 1.0
    throttle(Progress("writing", 4, 10, 0.0))  # an interval later: sent, and 2, 3 superseded
    throttle(Progress("writing", 10, 10, 0.0))  # the last of the phase: held...
    throttle(Progress("committing", 10, 10, 0.0))  # ...and sent before the next phase's first
    assert sent == [("writing", 1), ("writing", 4), ("writing", 10), ("committing", 10)]


def test_throttle_with_interleaved_phases_does_not_flood_and_flush_keeps_the_last(monkeypatch):
    clock = Clock()
    monkeypatch.setattr("kernel_hooks.progress.time.monotonic", clock)
    sent: list[tuple[str, int]] = []
    throttle = ProgressThrottle(lambda p: sent.append((p.phase, p.done_bytes)), 0.25)
    for done in range(1, 101):  # reading and unpickling alternate, as on a resume
        throttle(Progress("reading", done, 100, 0.0))
        throttle(Progress("unpickling", done, 100, 0.0))
    assert sent == [("reading", 1), ("unpickling", 1)]
    throttle.flush()  # the operation ended (say it failed): nothing of the last reports lost
    assert sent[2:] == [("reading", 100), ("unpickling", 100)]
    throttle.flush()
    assert len(sent) == 4


def reported(kernel, setup: str, call: str, into: str) -> list[Progress]:
    """Run ``setup``, then ``call`` with ``progress=<into>.append`` in ``kernel``; the reports.
    (``into`` differs per kernel: a resume rebinds the names its snapshot holds.)"""
    dicts = kernel.run_json(f"import json, kernel_hooks\n{setup}\n{into} = []\n"
                            f"{call[:-1]}, progress={into}.append)\n"
                            f"print(json.dumps([p.to_dict() for p in {into}]))")
    return [Progress(d["phase"], d["done_bytes"], d["total_bytes"], d["seconds"]) for d in dicts]


def test_checkpoint_and_resume_of_one_big_array_report_inside_the_blob(start_kernel):
    """A real kernel: one 72 MiB array is one blob (written in 16 MiB chunks, read in 8 MiB
    ones); both directions see several increasing values inside it, then its end."""
    total = 9 * 2**20 * 8
    wrote = reported(start_kernel(), "import numpy as np\nbig = np.arange(9 * 2**20, dtype=np.float64)",
                     "kernel_hooks.checkpoint('big')", "seen")
    writing = [p for p in wrote if p.phase == "writing"]
    assert len(within_one_blob(writing, "writing")) >= 3
    # ... and the pickled graph beside it (a few KiB): the phase counts every blob
    assert writing[-1].done_bytes == writing[-1].total_bytes
    assert total < writing[-1].total_bytes < total + 64 * 1024
    assert [p.phase for p in wrote][-2:] == ["committing", "done"]

    b = start_kernel()
    read = reported(b, "", "kernel_hooks.resume('big')", "got")
    reading = [p for p in read if p.phase == "reading"]
    assert len(within_one_blob(reading, "reading")) >= 3
    assert reading[-1].done_bytes == reading[-1].total_bytes == total
    unpickling = [p for p in read if p.phase == "unpickling"]
    assert unpickling and unpickling[-1].done_bytes == unpickling[-1].total_bytes > 0
    assert read[-1].phase == "done"
    assert b.run("print(float(big[-1]))").strip() == str(float(9 * 2**20 - 1))


def test_the_writing_phase_counts_every_byte_the_snapshot_holds(start_kernel):
    """Issue 27.7: the status bar said "writing ... of 660 MiB" and the dialog 677 MiB for one
    snapshot: the writing phase counted the storages only, the result (and the paused record,
    the snapshot row, the dialog) every blob, the graph of pickled objects included. A
    namespace whose pickled part is a good share of it (a list of a million numbers): the
    writing phase's last total is the result's ``bytes_total`` but for the blob headers, as
    ``human_bytes`` writes it (the "done" report carries the manifest's total, which is the
    result's ``bytes_total``)."""
    from jupyter_gkeresume.units import human_bytes

    kernel = start_kernel()
    wrote = reported(kernel, "import numpy as np\nbig = np.ones(2**20)\nrows = list(range(10**6))",
                     "kernel_hooks.checkpoint('sizes')", "seen")
    writing = [p for p in wrote if p.phase == "writing"]
    total = wrote[-1].total_bytes  # the "done" report: the manifest's total, as the result says
    assert wrote[-1].phase == "done"
    assert writing[-1].done_bytes == writing[-1].total_bytes
    assert human_bytes(writing[-1].total_bytes) == human_bytes(total), (writing[-1], total)
    assert total - writing[-1].total_bytes < 4096  # the headers of a few blobs
