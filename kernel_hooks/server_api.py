"""The kernel-side entry points that the server executes (transport: silent execute requests).

The server (``jupyter_gkeresume.kernel_client``) sends one ``execute_request`` with
``silent=True, store_history=False`` (no execution count, no history, no ``execute_input``
broadcast) whose code is exactly::

    __import__("kernel_hooks.server_api", fromlist=["run"]).run("<action>", "<request JSON>")

and ``user_expressions={"result": "...last_result()"}``. Call order and invariants:

1. ``run`` calls ``kernel_hooks.checkpoint`` or ``kernel_hooks.resume`` on the user namespace
   and binds no name in it; the cyclic garbage collector is paused from before the verb's first
   import (``collector``).
2. While it runs, progress goes out on IOPub as ``display_data`` of the MIME type
   ``PROGRESS_MIME`` (``Progress.to_dict()``), at most every ``PROGRESS_INTERVAL`` seconds, the
   first report of every phase at once, and the last report of every phase always (before the
   next phase's first, or when ``run`` ends). Progress is best effort (IOPub may drop messages).
3. ``run`` never raises for a failure of the operation: it keeps the outcome, and the execute
   reply carries it reliably (shell channel) through ``user_expressions``: ``last_result()`` has a
   ``_repr_json_`` giving ``{"ok": true, "result": {...to_dict()}}`` or
   ``{"ok": false, "error": "<class name>", "message": "<text>"}``. An interrupt
   (``KeyboardInterrupt``) does propagate: the reply is then an error and the server reports it.
4. ``hold`` (a pause taking its consistent cut): from the moment it runs until it is lifted,
   every other cell is refused before it runs, by an IPython input transformer raising
   ``UsageError("workspace is pausing; this cell did not run")`` (the notebook shows that line;
   nothing of the cell executes). The server's own calls (``CALL_PREFIX``) still run.
"""

from __future__ import annotations

from typing import Any

from jupyter_gkeresume.kernel_protocol import (
    CALL_PREFIX,
    PAUSING_MESSAGE,
    PROGRESS_MIME,
    CheckpointRequest,
    HoldRequest,
    Outcome,
    request_from_json,
)

from . import collector
from .progress import ProgressThrottle

PROGRESS_INTERVAL = 0.25

_last: dict[str, Any] | None = None
_held_because: str | None = None  # set while a pause holds this kernel


class _HoldResult:
    """What ``hold`` answers (``to_dict`` like the other results)."""

    def __init__(self, held: bool):
        self.held = held

    def to_dict(self) -> dict[str, Any]:
        return {"held": self.held}


def _refuse_while_held(lines: list[str]) -> list[str]:
    """Input transformer: while held, refuse every cell that is not one of the server's calls."""
    if _held_because is not None and not (lines and lines[0].startswith(CALL_PREFIX)):
        from IPython.core.error import UsageError

        raise UsageError(f"{PAUSING_MESSAGE} ({_held_because})")
    return lines


def _hold(request: HoldRequest) -> _HoldResult:
    global _held_because
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not running in an IPython kernel")
    if _refuse_while_held not in shell.input_transformers_post:
        shell.input_transformers_post.append(_refuse_while_held)
    _held_because = (request.reason or "a pause is taking a snapshot") if request.pausing else None
    return _HoldResult(request.pausing)


class _Outcome:
    """What ``last_result()`` returns: IPython formats it as ``application/json``."""

    def __init__(self, data: dict[str, Any] | None):
        self.data = data

    def _repr_json_(self) -> dict[str, Any]:
        return self.data or {"ok": False, "error": "NoResult", "message": "nothing ran"}


def last_result() -> _Outcome:
    """The outcome of the last ``run`` in this kernel (read by the server, once per call)."""
    return _Outcome(_last)


def _publish(progress: Any) -> None:
    from IPython.display import publish_display_data

    publish_display_data({PROGRESS_MIME: progress.to_dict()})


def run(action: str, request_json: str) -> None:
    """Run ``action`` with the JSON request (``jupyter_gkeresume.kernel_protocol``); keep the
    outcome for ``last_result``."""
    global _last
    _last = None
    try:
        request = request_from_json(action, request_json)
        if isinstance(request, HoldRequest):
            _last = Outcome.success(_hold(request).to_dict()).to_dict()
            return
        import kernel_hooks

        publisher = ProgressThrottle(_publish, PROGRESS_INTERVAL)
        common = {"store": request.store, "workspace": request.workspace, "progress": publisher}
        try:
            with collector.paused():  # from the verb's first import on
                if isinstance(request, CheckpointRequest):
                    result = kernel_hooks.checkpoint(request.name, notebook=request.notebook,
                                                     reason=request.reason or "user", **common)
                else:
                    result = kernel_hooks.resume(request.reference or "latest",
                                                 only=request.only, notebook=request.notebook,
                                                 **common)
        finally:
            publisher.flush()  # a failed operation's last reports too
        _last = Outcome.success(result.to_dict()).to_dict()
    except Exception as exc:  # the boundary: every failure is reported to the server, in words
        _last = Outcome.failure(exc).to_dict()
