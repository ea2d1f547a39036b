"""REST handlers under ``/gkeresume/api/`` (the contract, with every shape, is docs/api.md).

Every verb is ``@web.authenticated`` (403 without a user: these are API handlers) and
``@authorized`` on the resource ``gkeresume``; pause, resume and cancel also need
``OPERATION_PERMISSIONS`` (they run code in kernels, stop and start kernels and sessions), and so
do ``PUT settings`` (it can turn off the shutdown checkpoint), ``DELETE snapshots/ID`` (it
destroys saved state) and ``DELETE paused`` (it discards a pause: its snapshots lose their
retention protection): a user read-only on kernels and sessions can do none of them.
Bodies are streamed to the handler (``stream_request_body``), so a body larger than
``MAX_BODY_BYTES`` is refused when its headers arrive (413 by its Content-Length; one sent in
chunks is cut off at that size by tornado), never buffered first. They are parsed strictly by
``_body`` (too deeply nested, unknown fields and wrong types are 400s); domain errors map onto
statuses in ``_http_error`` and reach the client as ``{"message": ...}`` (APIHandler.write_error),
never as a traceback.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import ensure_async
from tornado import web

from . import doctor
from .errors import (
    CommitConflictError,
    ConflictError,
    GkeResumeError,
    InvalidInputError,
    InvalidTransitionError,
    LeaseHeldError,
    SnapshotRefusedError,
)
from .idle import input_report_every

AUTH_RESOURCE = "gkeresume"
MAX_BODY_BYTES = 64 << 10  # every body is a few small fields
OPERATION_PERMISSIONS = (("execute", "kernels"), ("write", "kernels"), ("write", "sessions"))
CONFLICTS = (ConflictError, InvalidTransitionError, LeaseHeldError, CommitConflictError,
             SnapshotRefusedError)  # it exists, and cannot be used: the message says why


def _http_error(exc: GkeResumeError) -> web.HTTPError:
    if isinstance(exc, InvalidInputError):
        status = 400
    elif isinstance(exc, LookupError):
        status = 404
    elif isinstance(exc, CONFLICTS):
        status = 409
    else:
        status = 500
    return web.HTTPError(status, str(exc))


@web.stream_request_body
class GkeResumeHandler(APIHandler):
    """Base: the orchestrator, strict JSON bodies, domain errors as HTTP errors."""

    auth_resource = AUTH_RESOURCE

    async def prepare(self) -> None:
        """Runs as soon as the headers are in (the body is streamed, see the module docstring):
        the body limit first, then jupyter_server's own checks (authentication, XSRF)."""
        self._chunks: list[bytes] = []
        length = self.request.headers.get("Content-Length")
        if length is None:
            self.request.connection.set_max_body_size(MAX_BODY_BYTES)
        elif not length.isdigit() or int(length) > MAX_BODY_BYTES:
            raise web.HTTPError(413, f"the body is too large ({length} bytes; at most "
                                f"{MAX_BODY_BYTES})")
        await super().prepare()

    def data_received(self, chunk: bytes) -> None:
        self._chunks.append(chunk)

    @property
    def orchestrator(self):
        return self.settings["gkeresume_orchestrator"]

    async def _require_operation_permissions(self) -> None:
        """403 unless the user may also run code in, start and stop kernels and sessions
        (pause, resume, cancel, changing settings, deleting a snapshot, discarding a pause)."""
        for action, resource in OPERATION_PERMISSIONS:
            allowed = await ensure_async(
                self.authorizer.is_authorized(self, self.current_user, action, resource))
            if not allowed:
                raise web.HTTPError(403, f"pause, resume, settings, deleting snapshots and "
                                    f"discarding a pause need permission to {action} {resource}")

    async def _run(self, call: Callable[[], Awaitable[Any]]) -> Any:
        await self.orchestrator.ensure_started()
        try:
            return await call()
        except GkeResumeError as exc:
            raise _http_error(exc) from None

    def _accepted(self, op: Any, **extra: Any) -> None:
        """202: the operation runs in the background; the reply says which and the state now."""
        self.set_status(202)
        self.finish(json.dumps({"operation": op.to_dict(), **extra,
                                "state": self.orchestrator.state.state.value}))

    def _body(self, fields: dict[str, type | tuple[type, ...]]) -> dict[str, Any]:
        """The JSON object body, checked: only ``fields``, each of its type (``null`` allowed
        where the types include ``type(None)``)."""
        raw = b"".join(self._chunks) or b"{}"  # within MAX_BODY_BYTES: see ``prepare``
        try:
            body = json.loads(raw)
        except ValueError:  # UnicodeDecodeError included
            raise web.HTTPError(400, "the body is not JSON") from None
        except RecursionError:
            raise web.HTTPError(400, "the body is nested too deeply") from None
        if not isinstance(body, dict):
            raise web.HTTPError(400, "the body must be a JSON object")
        unknown = sorted(set(body) - set(fields))
        if unknown:
            raise web.HTTPError(400, f"unknown field(s): {', '.join(unknown)} "
                                f"(allowed: {', '.join(fields)})")
        for name, kind in fields.items():
            value = body.get(name)
            if name in body and not isinstance(value, kind):
                raise web.HTTPError(400, f"field {name!r} has the wrong type")
        return body


def _string_list(body: dict[str, Any], name: str) -> list[str] | None:
    value = body.get(name)
    if value is not None and not all(isinstance(v, str) and v for v in value):
        raise web.HTTPError(400, f"{name!r} must be a list of non-empty strings")
    return value


def _when_busy(body: dict[str, Any]) -> str:
    """``when_busy`` (default ``"queue"``); the older ``when_idle`` bool is an alias
    (``true``: queue, ``false``: refuse)."""
    alias = {True: "queue", False: "refuse"}.get(body.get("when_idle"))
    when_busy = body.get("when_busy", alias or "queue")
    if alias is not None and when_busy != alias:
        raise web.HTTPError(400, "'when_idle' (an older name) contradicts 'when_busy'")
    return when_busy


class StatusHandler(GkeResumeHandler):
    _track_activity = False  # the lab polls status: that is not user activity (idle pause)

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(json.dumps(await self._run(self.orchestrator.status)))


class PauseHandler(GkeResumeHandler):
    @web.authenticated
    @authorized
    async def post(self) -> None:
        await self._require_operation_permissions()
        body = self._body({"kernels": (list, type(None)), "release": bool,
                           "name": (str, type(None)), "when_busy": str, "when_idle": bool})
        kernels = _string_list(body, "kernels")
        op = await self._run(lambda: self.orchestrator.start_pause(
            kernels, release=body.get("release", True), name=body.get("name"),
            when_busy=_when_busy(body)))
        self._accepted(op)


class ResumeHandler(GkeResumeHandler):
    @web.authenticated
    @authorized
    async def post(self) -> None:
        await self._require_operation_permissions()
        body = self._body({"snapshot": (str, type(None)), "mode": str,
                           "only": (list, type(None)), "kernel": (str, type(None))})
        only = _string_list(body, "only")
        op, joined = await self._run(lambda: self.orchestrator.start_resume(
            body.get("snapshot"), body.get("mode", "full"), only, body.get("kernel"),
        ))
        self._accepted(op, joined=joined)


class CancelHandler(GkeResumeHandler):
    @web.authenticated
    @authorized
    async def post(self) -> None:
        await self._require_operation_permissions()
        self._body({})
        op = await self._run(self.orchestrator.cancel)
        self._accepted(op)


class SnapshotsHandler(GkeResumeHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        rows = await self._run(self.orchestrator.snapshots)
        self.finish(json.dumps({"snapshots": rows}))


class SnapshotHandler(GkeResumeHandler):
    @web.authenticated
    @authorized
    async def delete(self, snapshot_id: str) -> None:
        await self._require_operation_permissions()
        await self._run(lambda: self.orchestrator.delete_snapshot(snapshot_id))
        self.set_status(204)
        self.finish()


class PausedHandler(GkeResumeHandler):
    @web.authenticated
    @authorized
    async def delete(self) -> None:
        await self._require_operation_permissions()
        await self._run(self.orchestrator.discard_paused)
        self.set_status(204)
        self.finish()


class SettingsHandler(GkeResumeHandler):
    """The runtime settings (``server_settings``): GET them, PUT some of them."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(json.dumps(await self._run(self.orchestrator.settings_view)))

    @web.authenticated
    @authorized
    async def put(self) -> None:
        await self._require_operation_permissions()
        body = self._body({"checkpoint_on_shutdown": bool})
        self.finish(json.dumps(await self._run(lambda: self.orchestrator.update_settings(body))))


LAB_ID_MAX = 64  # a lab's id: what its page made up (a UUID)


def _lab_id(value: Any) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= LAB_ID_MAX or not value.isprintable():
        raise web.HTTPError(400, f"'lab' must be a printable string of 1 to {LAB_ID_MAX} "
                            "characters")
    return value


class LabRequestsHandler(GkeResumeHandler):
    """A lab's long poll for save requests (``lab_saves.LabSaves.next_request``):
    ``?lab=ID&after=N`` answers ``{"request": M, "open": bool}`` once request ``M > N`` exists,
    or ``M == N`` after ``lab_saves.WAIT_SECONDS``; ``open``: the lab should save and answer."""

    _track_activity = False  # the lab polls: that is not user activity (idle pause)

    @web.authenticated
    @authorized
    async def get(self) -> None:
        lab = _lab_id(self.get_query_argument("lab", ""))
        after = self.get_query_argument("after", "0")
        if not after.isdigit():
            raise web.HTTPError(400, "'after' must be a request number")
        saves = self.orchestrator.lab_saves
        request = await saves.next_request(lab, int(after))
        self.finish(json.dumps({"request": request, "open": saves.is_open(request)}))


class LabSavedHandler(GkeResumeHandler):
    """A lab's answer to a save request: ``{"lab", "request", "saved": [path],
    "not_saved": [{"path", "reason"}]}``; 204, also for a request no longer open."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self._body({"lab": str, "request": int, "saved": list, "not_saved": list})
        saved = _string_list(body, "saved") or []
        not_saved = body.get("not_saved") or []
        if not all(isinstance(n, dict) and set(n) == {"path", "reason"}
                   and all(isinstance(v, str) for v in n.values()) for n in not_saved):
            raise web.HTTPError(400, "'not_saved' must be a list of {path, reason} strings")
        self.orchestrator.lab_saves.reply(_lab_id(body.get("lab")), body.get("request", 0),
                                          saved, not_saved)
        self.set_status(204)
        self.finish()


class ActivityHandler(GkeResumeHandler):
    """A person's input in a lab tab (keys, pointer, scrolling: ``activity.ts``, never its
    polls): activity of kind ``input`` for the idle pause. The body is ``{}``; the reply
    ``{"report_every": seconds}`` tells the lab how often to report steady input
    (``idle.input_report_every``)."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self._body({})
        self.orchestrator.activity.touch("input")
        every = input_report_every(self.orchestrator.settings.idle_timeout)
        self.finish(json.dumps({"report_every": every}))


class DoctorHandler(GkeResumeHandler):
    """``doctor.run_checks`` with this server's own configuration (what ``jupyter gkeresume
    doctor`` reports about a running server), in a worker thread (it waits on the store, the
    Hub or the Kubernetes API, each bounded); always 200, the checks say what failed."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        report = await asyncio.to_thread(doctor.run_checks, self.settings["gkeresume_doctor"])
        report.source = "this server"
        self.finish(json.dumps(doctor.to_json(report)))


def handlers(prefix: str = "/gkeresume/api") -> list[tuple[str, type[GkeResumeHandler]]]:
    """URL patterns (relative to the server's base URL). The snapshot id segment takes any
    characters so that a malformed id reaches validation and gets a 400, not a bare 404."""
    return [
        (f"{prefix}/status", StatusHandler),
        (f"{prefix}/pause", PauseHandler),
        (f"{prefix}/resume", ResumeHandler),
        (f"{prefix}/cancel", CancelHandler),
        (f"{prefix}/snapshots", SnapshotsHandler),
        (f"{prefix}/snapshots/(.+)", SnapshotHandler),
        (f"{prefix}/paused", PausedHandler),
        (f"{prefix}/settings", SettingsHandler),
        (f"{prefix}/doctor", DoctorHandler),
        (f"{prefix}/activity", ActivityHandler),
        (f"{prefix}/lab/requests", LabRequestsHandler),
        (f"{prefix}/lab/saved", LabSavedHandler),
    ]
