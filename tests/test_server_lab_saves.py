"""Issue 27.2: the server -> lab channel that saves the open documents before every pause
(``lab_saves``; the lab's side is ``labextension/src/labsaves.ts``): what is saved, what is not
and which labs did not answer reach the pause's record, and a lab that does not answer holds
the pause up for ``lab_save_timeout`` at most. The entry-point matrix with a lab that answers is
tests/test_server_pause_paths.py."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from fixtures_server import server_config

from jupyter_gkeresume.lab_saves import LabSaves

LAB_SAVE_TIMEOUT = 1.5


async def test_the_report_names_what_was_not_saved_and_the_silent_labs():
    saves = LabSaves()
    assert (await saves.save_documents(5)).to_dict() == {
        "saved": [], "not_saved": [], "labs": 0, "unanswered": 0}  # no lab: no wait

    async def answering(lab: str) -> None:
        request = await saves.next_request(lab, 0)
        assert saves.is_open(request)
        saves.reply(lab, request, ["a.ipynb"], [{"path": "ro.ipynb", "reason": "read-only"}])

    silent = asyncio.ensure_future(saves.next_request("silent", 0))
    answer = asyncio.ensure_future(answering("answering"))
    await asyncio.sleep(0)  # both polls are open
    t0 = time.monotonic()
    report = await saves.save_documents(0.5)
    assert time.monotonic() - t0 >= 0.5  # it waited for the silent one, no longer
    assert report.to_dict() == {"saved": ["a.ipynb"],
                                "not_saved": [{"path": "ro.ipynb", "reason": "read-only"}],
                                "labs": 2, "unanswered": 1}
    await answer
    assert await silent == 1
    assert not saves.reply("late", 1, ["b.ipynb"], [])  # that request is over: ignored
    assert await saves.next_request("reloaded", 0) == 1  # at once: a page learns the number


async def lab_poll(api, lab: str, after: str) -> tuple[int, dict]:
    """``GET lab/requests`` as the lab sends it (its query string)."""
    response = await api.fetch("gkeresume", "api", "lab", "requests",
                               params={"lab": lab, "after": after}, raise_error=False)
    return response.code, json.loads(response.body)


@pytest.fixture
def jp_server_config(store_dir):
    return server_config(str(store_dir), lab_save_timeout=LAB_SAVE_TIMEOUT)


async def test_a_pause_waits_for_the_labs_within_the_timeout(api):
    kid = await api.new_session("work.ipynb")
    await api.run_cell(kid, "x = 1")
    polls = [asyncio.ensure_future(lab_poll(api, lab, "0")) for lab in ("one", "two")]
    await asyncio.sleep(0.2)
    t0 = time.monotonic()
    code, body = await api.call("POST", "gkeresume/api/pause", {})
    assert code == 202, body
    (code_one, one), (code_two, two) = await asyncio.gather(*polls)
    assert code_one == code_two == 200
    assert one == two == {"request": 1, "open": True}
    code, _ = await api.call("POST", "gkeresume/api/lab/saved", {
        "lab": "one", "request": 1, "saved": ["work.ipynb"],
        "not_saved": [{"path": "notes.md", "reason": "read-only"}]})
    assert code == 204
    status = await api.settle()  # "two" never answers
    assert time.monotonic() - t0 >= LAB_SAVE_TIMEOUT
    assert status["state"] == "paused"
    assert status["paused"]["documents"] == {
        "saved": ["work.ipynb"], "not_saved": [{"path": "notes.md", "reason": "read-only"}],
        "labs": 2, "unanswered": 1}


@pytest.mark.parametrize(("lab", "after"), [("", "0"), ("one", "-1"), ("x" * 65, "0")])
async def test_malformed_polls_are_refused(api, lab, after):
    code, reply = await lab_poll(api, lab, after)
    assert code == 400, reply


@pytest.mark.parametrize("body", [
    {"lab": "one", "request": 1, "saved": [""], "not_saved": []},
    {"lab": "one", "request": 1, "saved": [], "not_saved": [{"path": "a"}]},
    {"lab": "x" * 65, "request": 1, "saved": [], "not_saved": []},
])
async def test_malformed_answers_are_refused(api, body):
    code, reply = await api.call("POST", "gkeresume/api/lab/saved", body)
    assert code == 400, reply
