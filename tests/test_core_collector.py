"""A checkpoint and a resume run with the cyclic garbage collector paused, and give it back as they
found it. Found timing a pause of a tiny session with torch imported (issue 31 item 2): the first
checkpoint's imports and allocations passed the collector's thresholds, and a full collection
(0.084-0.12 s in five runs, reported by ``gc.callbacks``) walked torch's heap inside the pause,
to free nothing; the kernel's exit collects once right after. In process, on a local store."""

from __future__ import annotations

import gc

import pytest

import kernel_hooks
from jupyter_gkeresume.errors import GkeResumeError
from jupyter_gkeresume.kernel_protocol import Outcome
from kernel_hooks import server_api


class CollectorStateWhenSaved:
    """Notes whether the collector ran while it was pickled; comes back as whether it ran
    while it was unpickled."""

    seen: list[bool] = []

    def __reduce__(self):
        CollectorStateWhenSaved.seen.append(gc.isenabled())
        return (gc.isenabled, ())


@pytest.fixture
def collector_as(request):
    """The collector enabled or disabled as the session had it; enabled again after."""
    gc.enable() if request.param else gc.disable()
    yield request.param
    gc.enable()


@pytest.mark.parametrize("collector_as", [True, False], indirect=True)
def test_the_verbs_pause_the_collector_and_leave_it_as_they_found_it(tmp_path, collector_as):
    root = str(tmp_path / "store")
    CollectorStateWhenSaved.seen.clear()
    kernel_hooks.checkpoint(namespace={"probe": CollectorStateWhenSaved()}, store=root,
                            workspace="ws")
    assert CollectorStateWhenSaved.seen == [False]
    assert gc.isenabled() is collector_as

    restored: dict = {}
    kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert restored["probe"] is False  # unpickled with the collector off
    assert gc.isenabled() is collector_as

    with pytest.raises(GkeResumeError):
        kernel_hooks.resume("no-such-snapshot", namespace={}, store=root, workspace="ws")
    assert gc.isenabled() is collector_as


@pytest.mark.parametrize("collector_as", [True], indirect=True)
def test_the_servers_request_pauses_the_collector_from_the_verbs_import_on(monkeypatch,
                                                                            collector_as):
    """The server's request looks the verb up (the first one imports the checkpoint machinery,
    ``kernel_hooks.__getattr__``) and calls it with the collector paused."""
    seen = []

    class Result:
        def to_dict(self):
            return {"done": True}

    def verb(*_args, **_kwargs):
        seen.append(("called", gc.isenabled()))
        return Result()

    def look_up(name):
        seen.append(("looked up", gc.isenabled()))
        return verb

    monkeypatch.delattr(kernel_hooks, "checkpoint", raising=False)
    monkeypatch.setattr(kernel_hooks, "__getattr__", look_up)
    request = '{"store": "/nowhere", "workspace": "ws", "name": null, "notebook": null}'
    server_api.run("checkpoint", request)
    assert server_api.last_result()._repr_json_() == Outcome.success({"done": True}).to_dict()
    assert seen == [("looked up", False), ("called", False)]
    assert gc.isenabled()


def test_the_sessions_switch_is_what_a_checkpoint_saves_and_a_resume_gives_back(tmp_path):
    """Found reading the change again: the python settings entry read ``gc.isenabled()`` inside
    the checkpoint, where the collector is paused, so every snapshot said "disabled"; and a
    resume that set the session's ``gc.disable()`` had it switched on again when the pause ended.
    """
    from kernel_hooks import collector, library_state

    with collector.paused():
        assert "gc" not in (library_state._python_settings() or {})  # the session's: on

    root = str(tmp_path / "store")
    gc.disable()  # the session's own choice
    try:
        kernel_hooks.checkpoint(namespace={"x": 1}, store=root, workspace="ws")
    finally:
        gc.enable()
    try:
        kernel_hooks.resume(namespace={}, store=root, workspace="ws")
        assert not gc.isenabled()  # given back as the session had it
    finally:
        gc.enable()
