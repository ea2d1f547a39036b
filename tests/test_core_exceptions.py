"""An exception a session keeps (``except ValueError as e: err = e``) comes back with its cause,
context and notes, and an exception class whose ``__init__`` takes other arguments than it passes
on comes back at all; its traceback, frames of the old process, is named. Found by a probe: the
cause and context came back ``None`` while the verdict said ``exact``, and ``MyError(code,
detail)`` was saved and then not restored (pickle calls ``MyError(code)``). In process, on a
local store."""

from __future__ import annotations

import kernel_hooks


class DetailedError(Exception):
    """Passes only ``code`` on: ``args`` is ``(code,)``."""

    def __init__(self, code: int, detail: str):
        super().__init__(code)
        self.detail = detail


def _raised() -> KeyError:
    try:
        try:
            raise ValueError("inner")
        except ValueError as inner:
            raise KeyError("outer") from inner
    except KeyError as outer:
        outer.add_note("while loading the config")
        return outer


def test_an_exception_comes_back_with_its_cause_and_its_traceback_is_named(tmp_path):
    caught = _raised()
    try:
        raise RuntimeError("later")
    except RuntimeError as later:
        implicit = later  # its __context__ is None: raised outside any handler
    namespace = {"caught": caught, "detailed": DetailedError(3, "disk full"), "implicit": implicit}
    root = str(tmp_path / "store")
    result = kernel_hooks.checkpoint(namespace=namespace, store=root, workspace="ws")
    assert {(s.name, s.type) for s in result.skipped} == {("caught", "traceback"),
                                                          ("implicit", "traceback")}
    restored: dict = {}
    resumed = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert resumed.verdict["level"] == "partial"
    without = ("restored without: traceback (the frames it was raised in belong to this "
               "process: the exception comes back with its type, message, cause and context, "
               "without its traceback)")
    assert resumed.verdict["reasons"] == [
        f"left out: caught ({without}); implicit ({without})"], resumed.verdict

    again = restored["caught"]
    assert repr(again) == "KeyError('outer')" and again.__traceback__ is None
    assert repr(again.__cause__) == "ValueError('inner')" and again.__suppress_context__
    assert again.__context__ is again.__cause__  # one object, as in the session
    assert again.__notes__ == ["while loading the config"]
    detailed = restored["detailed"]
    assert type(detailed) is DetailedError and detailed.args == (3,)
    assert detailed.detail == "disk full"
    assert restored["implicit"].__context__ is None
