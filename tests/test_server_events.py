"""What a pause leaves behind for the user and the platform team, on a real in-process server
with real kernels and a local store:

- the advisor's events record (issue 7): user activity, each pause with its measured seconds and
  GPU count, each resume with its seconds from request to ready; a record that cannot be written
  never fails a pause or a resume;
- the paused record names, per kernel, what was saved and what was skipped and why (issue 5: the
  lab's post-pause message once the kernels are gone);
- "Resume compatible objects only": ``mode: partial`` with ``only`` on the paused record.
"""

from __future__ import annotations

import pytest
from fixtures_server import server_config

from jupyter_gkeresume import advisor
from jupyter_gkeresume.events import ActivitySampler


@pytest.fixture
def jp_server_config(store_dir):
    return server_config(str(store_dir))


def orchestrator(api):
    return api.serverapp.web_app.settings["gkeresume_orchestrator"]


async def pause_and_settle(api) -> dict:
    status = await api.pause()
    assert status["state"] == "paused", status
    return status


async def test_pause_and_resume_are_recorded_for_the_advisor(api):
    orch = orchestrator(api)
    sampler = ActivitySampler(orch.state, orch.events, api.serverapp.web_app.last_activity)
    kid = await api.new_session("events.ipynb")
    await api.run_cell(kid, "x = 41 + 1\nimport threading\nlock = threading.Lock()\n"
                            "lock.acquire()")  # held at the pause: not saved
    assert await sampler.sample()  # the cell ran: user activity
    assert not await sampler.sample()  # nothing new since

    status = await pause_and_settle(api)
    # The paused record says what each kernel saved and skipped (status returns it).
    [entry] = status["paused"]["kernels"]
    assert "x" in entry["saved"] and "lock" not in entry["saved"]
    assert [s["name"] for s in entry["skipped"]] == ["lock"]
    assert entry["skipped"][0]["reason"] and entry["bytes_new"] > 0
    # The kernel traffic of the pause moved last_activity: that is not the user's.
    assert not await sampler.sample()

    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    assert (await api.settle())["state"] == "ready"

    events = advisor.read_events(orch.store)
    assert [e.kind for e in events] == ["activity", "pause", "resume"]
    activity, pause, resume = events
    assert activity.at == sampler.recorded
    assert pause.seconds > 0 and pause.gpus == 1  # no GPU here: counted as one accelerator
    assert resume.seconds > 0 and resume.at > pause.at
    advice = advisor.advise(events, [1])
    assert advice.measured
    assert advice.pause_seconds == pause.seconds and advice.resume_seconds == resume.seconds


async def test_a_record_that_cannot_be_written_fails_nothing(api, store_dir):
    (store_dir / "server-ws" / "records" / "events.json").mkdir(parents=True)
    kid = await api.new_session("unrecorded.ipynb")
    await api.run_cell(kid, "x = 42")
    status = await pause_and_settle(api)
    assert status["last_error"] is None
    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    status = await api.settle()
    assert status["state"] == "ready" and status["last_error"] is None, status
    assert await api.run_cell(status["kernels"][0]["kernel_id"], "print(x)") == "42\n"


async def test_resume_compatible_objects_only_from_the_paused_record(api):
    """The lab's 'Resume compatible objects only': the paused record, ``mode: partial``, ``only``
    = the snapshot rows' ``saved`` minus the objects at risk. One list serves every notebook:
    each kernel restores the names its own snapshot holds (none: a fresh kernel)."""
    one = await api.new_session("one.ipynb")
    await api.run_cell(one, "x = 42\ny = 'left behind'")
    two = await api.new_session("two.ipynb")
    await api.run_cell(two, "b = 'bee'\nc = 'left behind too'")
    three = await api.new_session("three.ipynb")
    await api.run_cell(three, "z = 'nothing wanted from here'")
    status = await pause_and_settle(api)
    code, body = await api.call("GET", "gkeresume/api/snapshots")
    saved = {row["notebook"]: set(row["saved"]) for row in body["snapshots"]}
    assert {"x", "y"} <= saved["one.ipynb"] and {"b", "c"} <= saved["two.ipynb"]

    code, body = await api.call("POST", "gkeresume/api/resume", {"mode": "partial",
                                                                  "only": ["x", "nope"]})
    assert code == 400 and "no paused snapshot holds 'nope'" in body["message"], body
    code, body = await api.call("POST", "gkeresume/api/resume", {"mode": "partial",
                                                                  "only": ["x", "b"]})
    assert code == 202, body
    assert body["operation"]["mode"] == "partial"
    status = await api.settle()
    assert status["state"] == "ready" and status["paused"] is None, status
    kernels = {k["notebook"]: k for k in status["kernels"]}
    assert kernels["one.ipynb"]["result"]["restored"] == ["x"]
    assert kernels["two.ipynb"]["result"]["restored"] == ["b"]
    out = await api.run_cell(kernels["one.ipynb"]["kernel_id"], "print(x, 'y' in dir())")
    assert out == "42 False\n"
    out = await api.run_cell(kernels["two.ipynb"]["kernel_id"], "print(b, 'c' in dir())")
    assert out == "bee False\n"
    assert kernels["three.ipynb"]["state"] == "ready" and kernels["three.ipynb"]["result"] is None
    out = await api.run_cell(kernels["three.ipynb"]["kernel_id"], "print('z' in dir())")
    assert out == "False\n"


async def test_a_resume_is_ready_only_once_its_operation_is_over(api, monkeypatch):
    """The finding (``test_ui_e2e``, 2026-12-04): the status bar of a finished resume read
    "Resuming: starting the kernels, under a second left". The resume moved the workspace to
    ``ready`` and then awaited the advisor's event record (a store write: an HTTP request on
    gs://) before it ended its operation, so a status taken in between said ``ready`` with the
    operation still in flight, and the lab showed the in-flight label of stale phases."""
    orch = orchestrator(api)
    during: list[dict] = []
    record = orch.events.record

    async def record_and_look(*events):
        if any(e.kind == "resume" for e in events):
            during.append((await api.call("GET", "gkeresume/api/status"))[1])
        return await record(*events)

    monkeypatch.setattr(orch.events, "record", record_and_look)
    kid = await api.new_session("ready.ipynb")
    await api.run_cell(kid, "x = 42")
    await pause_and_settle(api)
    code, body = await api.call("POST", "gkeresume/api/resume", {})
    assert code == 202, body
    status = await api.settle()
    assert status["state"] == "ready" and status["operation"] is None, status
    [looked] = during
    assert looked["operation"] is not None and looked["state"] != "ready", looked
