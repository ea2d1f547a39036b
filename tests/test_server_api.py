"""The REST API against a real in-process jupyter_server with real kernels and a local store.

Pause -> the snapshot is committed -> the kernels stop -> resume into a new kernel -> the
variables are back; auth, validation and conflicts; 20 concurrent resumes -> one restore.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from fixtures_server import RecordingRelease, reply_to, server_config
from prometheus_client import REGISTRY

from jupyter_gkeresume.kernel_client import own_client
from jupyter_gkeresume.kernels import HashSeeds
from jupyter_gkeresume.paused_record import PausedKernel, PausedRecord


@pytest.fixture
def jp_server_config(store_dir):
    return server_config(str(store_dir))


def paused_record(store_dir):
    path = store_dir / "server-ws" / "records" / "paused.json"
    return json.loads(path.read_text()) if path.exists() else None


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_pause_then_resume_brings_the_variables_back(api, store_dir):
    pauses, resumes = sample("gkeresume_pause_seconds_count", phase="total"), sample(
        "gkeresume_resume_seconds_count")
    kid = await api.new_session("work/train.ipynb")
    await api.run_cell(kid, "import numpy as np\nx = 41 + 1\narr = np.arange(10_000.0)\n"
                            "alias = arr\nWORDS = [f'word{i}' for i in range(40)]\n"
                            "order = list(set(WORDS))")
    status = await api.status()
    assert status["state"] == "running" and status["paused"] is None
    assert [k["kernel_id"] for k in status["kernels"]] == [kid]

    code, body = await api.call("POST", "gkeresume/api/pause", {"name": "before-eval"})
    assert code == 202, body
    assert body["state"] == "pausing" and body["operation"]["kernels"] == [kid]
    status = await api.settle()

    assert status["state"] == "paused", status
    assert status["last_error"] is None
    assert len(RecordingRelease.calls) == 1
    record = paused_record(store_dir)
    assert record.pop("signature")["value"]  # signed with the workspace key (issue 22.1)
    signed_as = record.pop("record")  # with its kind, name and a sequence (issue 30)
    assert (signed_as["kind"], signed_as["name"], signed_as["sequence"] > 0) == (
        "paused", "paused", True)
    assert record == status["paused"]
    assert record["reason"] == "user" and record["release_backend"] == "recording"
    [entry] = record["kernels"]
    assert entry["notebook"] == "work/train.ipynb" and entry["kernel_id"] == kid
    assert api.serverapp.kernel_manager.list_kernel_ids() == []  # released: kernels stopped

    code, body = await api.call("GET", "gkeresume/api/snapshots")
    assert code == 200
    [row] = body["snapshots"]
    assert row["id"] == entry["snapshot_id"] and row["name"] == "before-eval"
    assert row["notebook"] == "work/train.ipynb" and row["error"] is None
    assert status["last_snapshot"]["id"] == row["id"]

    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    assert body["joined"] is False and body["state"] == "waiting_for_resources"
    status = await api.settle()
    assert status["state"] == "ready", status
    assert status["paused"] is None and paused_record(store_dir) is None
    [kernel] = status["kernels"]
    assert kernel["kernel_id"] != kid and kernel["notebook"] == "work/train.ipynb"
    assert kernel["state"] == "ready" and kernel["snapshot_id"] == row["id"]
    assert "x" in kernel["result"]["restored"]
    out = await api.run_cell(kernel["kernel_id"], "print(x, arr.sum(), alias is arr)")
    assert out.split() == ["42", str(float(sum(range(10_000)))), "True"]
    # the notebook's hash seed: a set of strings built after resume iterates as before
    assert not any("hash seed" in w for w in kernel["result"]["warnings"]), kernel["result"]
    out = await api.run_cell(kernel["kernel_id"], "print(list(set(WORDS)) == order)")
    assert out.split() == ["True"]
    assert sample("gkeresume_pause_seconds_count", phase="total") == pauses + 1
    assert sample("gkeresume_resume_seconds_count") == resumes + 1


def test_hash_seed_is_chosen_once_per_notebook():
    """One seed per notebook path of the sessions API (jupyter_server/services/sessions/
    sessionmanager.py: start_kernel_for_session takes the kernel's env from get_kernel_env(path,
    name)); another notebook or workspace, another seed."""
    seeds = HashSeeds("ws")
    seed = seeds.for_notebook("work/a.ipynb")
    assert seed == seeds.for_notebook("/work/./a.ipynb") and 0 <= int(seed) < 2**32
    assert seed != seeds.for_notebook("work/b.ipynb")
    assert seed != HashSeeds("other").for_notebook("work/a.ipynb")


async def test_a_resume_starts_its_kernel_with_the_snapshots_hash_seed(api, monkeypatch):
    """A snapshot taken in a kernel whose seed is not the notebook's own (here the server's
    environment set one; a renamed notebook or another workspace id does the same) comes back in
    a kernel with the snapshot's seed: one the lab opens while the record is paused, one a
    resume by id starts; a set of strings built after resume iterates as in the uninterrupted
    kernel. A session of the notebook already
    running with another seed is the user's kernel: it is reused, and the report says so in one
    line."""
    notebook, taken = "seeded.ipynb", "4242"
    own = HashSeeds("server-ws").for_notebook(notebook)
    assert own != taken
    monkeypatch.setenv("PYTHONHASHSEED", taken)  # the server's environment had a seed
    kid = await api.new_session(notebook)
    monkeypatch.delenv("PYTHONHASHSEED")  # the fresh pod's has none
    check = ("import os\nprint(os.environ['PYTHONHASHSEED'], "
             "list(set(f'word{i}' for i in range(40))) == order)")
    await api.run_cell(kid, "order = list(set(f'word{i}' for i in range(40)))")
    status = await api.pause()
    [entry] = status["paused"]["kernels"]
    assert status["state"] == "paused" and entry["hash_seed"] == taken

    lab = await api.new_session(notebook)  # the lab reopens the paused notebook first
    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    [kernel] = (await api.settle())["kernels"]
    assert kernel["state"] == "ready" and kernel["kernel_id"] == lab, kernel
    assert not any("hash seed" in w for w in kernel["result"]["warnings"]), kernel["result"]
    assert (await api.run_cell(lab, check)).split() == [taken, "True"]

    await api.serverapp.session_manager.delete_session(
        (await api.serverapp.session_manager.get_session(kernel_id=kernel["kernel_id"]))["id"])
    code, body = await api.call("POST", "gkeresume/api/resume", {"snapshot": entry["snapshot_id"]})
    assert code == 202, body
    [kernel] = [k for k in (await api.settle())["kernels"] if k["state"] == "ready"]
    assert (await api.run_cell(kernel["kernel_id"], check)).split() == [taken, "True"]

    await api.serverapp.session_manager.delete_session(
        (await api.serverapp.session_manager.get_session(kernel_id=kernel["kernel_id"]))["id"])
    users = await api.new_session(notebook)  # the notebook's own seed, started by the user
    code, body = await api.call("POST", "gkeresume/api/resume", {"snapshot": entry["snapshot_id"]})
    assert code == 202, body
    [kernel] = [k for k in (await api.settle())["kernels"] if k["state"] == "ready"]
    assert kernel["kernel_id"] == users and users in api.serverapp.kernel_manager
    [line] = [w for w in kernel["result"]["warnings"] if "hash seed" in w]
    assert line.startswith(f"string hash seed: this kernel's is {own}, the snapshot's {taken}")
    assert (await api.run_cell(users, check)).split() == [own, "False"]


def test_a_snapshots_hash_seed_is_kept_for_its_notebook():
    """While a record is paused, a kernel started for one of its notebooks (the lab reopens it
    before the user resumes) gets that snapshot's seed; a resume's start wins; a notebook, or an
    older record, without one gets the notebook's own."""
    record = PausedRecord.new("ws", "user", "none", 0, [
        PausedKernel("20261130T101500Z-a1b2c3", notebook="work/a.ipynb", hash_seed="7"),
        PausedKernel.from_dict({"snapshot_id": "20261130T101500Z-a1b2c4",
                                "notebook": "work/old.ipynb"})])
    seeds = HashSeeds("ws", lambda: record)
    assert seeds.kept("/work/./a.ipynb") == "7" and seeds.kept("work/old.ipynb") is None
    assert seeds.kept("work/b.ipynb") is None
    with seeds.starting("work/a.ipynb", "8"), seeds.starting("work/b.ipynb", None):
        assert seeds.kept("work/a.ipynb") == "8" and seeds.kept("work/b.ipynb") is None
    assert seeds.kept("work/a.ipynb") == "7"
    assert "hash_seed" not in record.kernels[1].to_dict()  # an older record's bytes, unchanged


async def test_checkpoint_without_release_keeps_the_kernel(api, store_dir):
    kid = await api.new_session("nb.ipynb")
    await api.run_cell(kid, "y = 'still here'")
    status = await api.pause({"release": False})
    assert status["state"] == "running" and status["paused"] is None
    assert RecordingRelease.calls == [] and paused_record(store_dir) is None
    assert status["kernels"][0]["snapshot_id"] == status["last_snapshot"]["id"]
    progress = status["kernels"][0]["progress"]  # the last report: the server's read-back
    assert progress["phase"] == "verifying"
    assert progress["done_bytes"] == progress["total_bytes"] == status["last_snapshot"]["bytes"]
    assert await api.run_cell(kid, "print(y)") == "still here\n"

    # restore that snapshot, partially, into the same running kernel
    await api.run_cell(kid, "y = 'changed'; z = 1")
    code, body = await api.call("POST", "gkeresume/api/resume", {
        "snapshot": "latest", "mode": "partial", "only": ["y"], "kernel": kid})
    assert code == 202, body
    status = await api.settle()
    assert status["state"] == "ready", status
    assert await api.run_cell(kid, "print(y, z)") == "still here 1\n"


async def test_release_failure_keeps_kernels_and_removes_the_record(api, store_dir):
    RecordingRelease.fail_with = "the cluster said no"
    kid = await api.new_session("nb.ipynb")
    await api.run_cell(kid, "w = [1, 2, 3]")
    status = await api.pause()
    assert status["state"] == "running"
    assert "the cluster said no" in status["reason"]
    assert status["last_error"]["operation"] == "release"
    assert len(RecordingRelease.calls) == 1 and paused_record(store_dir) is None
    assert await api.run_cell(kid, "print(w)") == "[1, 2, 3]\n"


async def test_requests_without_a_valid_token_are_refused(api):
    bad = {"Authorization": "token not-the-token"}
    for method, path in [("GET", "status"), ("POST", "pause"), ("POST", "resume"),
                         ("GET", "snapshots"), ("DELETE", "snapshots/20261130T101500Z-a1b2c3"),
                         ("DELETE", "paused"), ("GET", "doctor"),
                         ("GET", "lab/requests"), ("POST", "lab/saved")]:
        code, _ = await api.call(method, f"gkeresume/api/{path}", {}, headers=bad)
        assert code == 403, (method, path, code)


@pytest.mark.parametrize(("path", "raw", "fragment"), [
    ("pause", b"not json", "not JSON"),
    ("pause", b"[1, 2]", "JSON object"),
    ("pause", b'{"kernels": "abc"}', "'kernels'"),
    ("pause", b'{"kernels": [""]}', "'kernels'"),
    ("pause", b'{"release": "yes"}', "'release'"),
    ("pause", b'{"colour": 1}', "unknown field"),
    ("pause", b'{"name": "../etc"}', "not a usable snapshot name"),
    ("resume", b'{"mode": "everything"}', "mode must be one of"),
    ("resume", b'{"snapshot": "latest", "mode": "partial"}', "'only'"),
    ("resume", b'{"snapshot": "latest", "only": ["x"]}', "'only'"),
    ("resume", b'{"kernel": "abc"}', "'kernel' needs 'snapshot'"),
    ("resume", b'{"snapshot": "../../etc/passwd"}', "not a usable snapshot name"),
])
async def test_malformed_bodies_are_400(api, path, raw, fragment):
    code, body = await api.call("POST", f"gkeresume/api/{path}", raw=raw)
    assert code == 400, body
    assert fragment in body["message"]


async def test_unknown_ids_and_conflicts(api):
    code, body = await api.call("POST", "gkeresume/api/pause", {"kernels": ["no-such-kernel"]})
    assert code == 404 and "no-such-kernel" in body["message"]
    code, body = await api.call("POST", "gkeresume/api/pause", {})
    assert code == 409 and "no kernel" in body["message"]
    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 409 and "nothing is paused" in body["message"]
    code, body = await api.call("POST", "gkeresume/api/resume", {"snapshot": "latest"})
    assert code == 404 and "no snapshot 'latest'" in body["message"]
    code, body = await api.call("POST", "gkeresume/api/resume",
                                {"snapshot": "20261130T101500Z-a1b2c3"})
    assert code == 404
    code, body = await api.call("DELETE", "gkeresume/api/snapshots/20261130T101500Z-a1b2c3")
    assert code == 404
    for bad_id in ["../../records/paused", "..", "x%00y", "20261130T101500Z-A1B2C3"]:
        code, body = await api.call("DELETE", f"gkeresume/api/snapshots/{bad_id}")
        assert code == 400, (bad_id, code, body)
        assert "not a snapshot id" in body["message"]
    code, body = await api.call("DELETE", "gkeresume/api/paused")
    assert code == 409 and "nothing is paused" in body["message"]


async def test_delete_snapshot_and_the_paused_record_guard(api, store_dir):
    kid = await api.new_session("nb.ipynb")
    await api.run_cell(kid, "v = 3")
    await api.pause({"release": False})
    status = await api.pause()
    assert status["state"] == "paused"
    paused_id = status["paused"]["kernels"][0]["snapshot_id"]
    code, body = await api.call("GET", "gkeresume/api/snapshots")
    ids = [r["id"] for r in body["snapshots"]]
    # (not by position: ids have one-second resolution, two pauses in one second sort by
    # their random suffix)
    assert len(ids) == 2 and paused_id in ids
    [older] = [i for i in ids if i != paused_id]
    code, body = await api.call("DELETE", f"gkeresume/api/snapshots/{paused_id}")
    assert code == 409 and "paused record" in body["message"]
    code, body = await api.call("POST", "gkeresume/api/pause", {})
    assert code == 409
    code, _ = await api.call("DELETE", f"gkeresume/api/snapshots/{older}")
    assert code == 204
    code, _ = await api.call("DELETE", "gkeresume/api/paused")
    assert code == 204
    status = await api.status()
    assert status["state"] == "running" and status["paused"] is None
    assert paused_record(store_dir) is None
    code, body = await api.call("GET", "gkeresume/api/snapshots")
    assert [r["id"] for r in body["snapshots"]] == [paused_id]


async def test_twenty_concurrent_resumes_make_one_restore(api):
    kid = await api.new_session("nb.ipynb")
    await api.run_cell(kid, "import numpy as np\nbig = np.ones(2_000_000)")
    assert (await api.pause())["state"] == "paused"

    def restores() -> float:
        return sample("gkeresume_operations_total", operation="resume", outcome="ok")

    before = restores()
    answers = await asyncio.gather(*[api.call("POST", "gkeresume/api/resume", {})
                                     for _ in range(20)])
    assert all(code == 202 for code, _ in answers), answers
    assert len({body["operation"]["id"] for _, body in answers}) == 1
    assert sorted(body["joined"] for _, body in answers) == [False] + [True] * 19
    status = await api.settle()
    assert status["state"] == "ready"
    assert restores() == before + 1
    [kernel] = status["kernels"]
    assert await api.run_cell(kernel["kernel_id"], "print(big.sum())") == "2000000.0\n"


async def test_metrics_are_exposed(api):
    response = await api.fetch("metrics", method="GET")
    assert response.code == 200
    text = response.body.decode()
    for name in ("gkeresume_pause_seconds", "gkeresume_snapshot_bytes_total",
                 "gkeresume_resume_seconds", "gkeresume_failures_total",
                 "gkeresume_accelerator_seconds_released_total"):
        assert name in text


async def test_busy_kernel_is_refused_or_checkpointed_when_its_cell_ends(api, tmp_path):
    kid = await api.new_session("busy.ipynb")
    await api.run_cell(kid, "before = 'set before the long cell'")
    flag = tmp_path / "end-the-cell"
    kernel = api.serverapp.kernel_manager.get_kernel(kid)
    client = own_client(kernel)
    client.start_channels(hb=False)  # see tests/test_server_kernel_call.py
    try:
        await client.wait_for_ready(timeout=60)
        cell = client.execute(f"import os, time\nwhile not os.path.exists({str(flag)!r}): "
                       "time.sleep(0.05)\nafter = 'set by the long cell'")
        for _ in range(1200):
            if kernel.execution_state == "busy":
                break
            await asyncio.sleep(0.05)
        assert kernel.execution_state == "busy"
        for refuse in ({"when_busy": "refuse"}, {"when_idle": False}):
            code, body = await api.call("POST", "gkeresume/api/pause", refuse)
            assert code == 409 and "busy" in body["message"]
        code, body = await api.call("POST", "gkeresume/api/pause",
                                    {"when_idle": False, "when_busy": "queue"})
        assert code == 400 and "contradicts" in body["message"]
        code, body = await api.call("POST", "gkeresume/api/pause",
                                    {"when_idle": True, "release": False})
        assert code == 202, body
        assert (await api.status())["state"] == "pausing"  # queued behind the running cell
        flag.write_text("go")
        await reply_to(client, cell)
    finally:
        client.stop_channels()
    status = await api.settle()
    assert status["state"] == "running" and status["last_error"] is None, status
    assert {"before", "after"} <= set(status["kernels"][0]["result"]["saved"])


async def test_a_pod_release_pauses_every_kernel_whatever_the_list(api, store_dir):
    first = await api.new_session("one.ipynb")
    second = await api.new_session("two.ipynb")
    await api.run_cell(first, "a = 1")
    await api.run_cell(second, "b = 2")
    code, body = await api.call("POST", "gkeresume/api/pause", {"kernels": [first]})
    assert code == 202, body
    assert sorted(body["operation"]["kernels"]) == sorted([first, second])
    status = await api.settle()
    assert status["state"] == "paused", status
    notebooks = sorted(k["notebook"] for k in paused_record(store_dir)["kernels"])
    assert notebooks == ["one.ipynb", "two.ipynb"]


async def test_files_only_resume_starts_fresh_kernels_for_the_notebooks(api, store_dir):
    kid = await api.new_session("fresh.ipynb")
    await api.run_cell(kid, "gone = 'not restored on purpose'")
    assert (await api.pause())["state"] == "paused"
    code, body = await api.call("POST", "gkeresume/api/resume", {"mode": "files-only"})
    assert code == 202, body
    status = await api.settle()
    assert status["state"] == "ready" and status["paused"] is None, status
    assert paused_record(store_dir) is None
    [kernel] = status["kernels"]
    assert kernel["notebook"] == "fresh.ipynb" and kernel["state"] == "ready"
    assert await api.run_cell(kernel["kernel_id"], "print('gone' in dir())") == "False\n"
    code, body = await api.call("GET", "gkeresume/api/snapshots")
    assert len(body["snapshots"]) == 1  # the snapshot stays, for a later resume


async def test_a_pause_goes_through_while_a_thread_of_the_kernel_keeps_printing(api, tmp_path):
    # a training loop's logger, a progress bar: IOPub is never quiet for long. The server's
    # calls wait for the kernel's own replies, never for IOPub to fall silent (jupyter_client's
    # wait_for_ready drains it until 0.2 s pass without a message: never, here)
    kid = await api.new_session("chatty.ipynb")
    quiet = tmp_path / "quiet"
    await api.run_cell(kid, f"import os, threading, time\n"
                            f"def chatter():\n    while not os.path.exists({str(quiet)!r}):\n"
                            "        print('.', end='', flush=True)\n        time.sleep(0.02)\n"
                            "threading.Thread(target=chatter, daemon=True).start()\nkept = 1")
    status = await api.pause({"release": False})
    quiet.write_text("")  # the test's own cells wait for a quiet IOPub
    assert status["state"] == "running" and status["last_snapshot"] is not None, status
    assert await api.run_cell(kid, "time.sleep(0.1)\nprint(kept)") == "1\n"
