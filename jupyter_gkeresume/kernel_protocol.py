"""The messages between the server (``kernel_client``) and a kernel (``kernel_hooks.server_api``).

Spelled once, here. The server sends a request (``CheckpointRequest``, ``ResumeRequest`` or
``HoldRequest``) as JSON inside one silent execute request (``call_code``, answered through
``RESULT_EXPR``); progress comes back as display data of ``PROGRESS_MIME``;
the answer is an ``Outcome`` (``{"ok": true, "result": {...}}`` or ``{"ok": false, "error":
"<class>", "message": "<text>"}``) in the execute reply's ``user_expressions``.
``CheckpointReply`` and ``RestoreReply`` are the typed views of a successful outcome's ``result``
(``kernel_hooks.results`` ``to_dict()``).

Invariants: ``request_from_json`` accepts only the fields of the action's request (anything else
is an ``InvalidInputError`` naming the field); no module imports torch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from .errors import InvalidInputError, KernelCallError
from .snapshot.format import valid_hash_seed

PROGRESS_MIME = "application/vnd.gkeresume.progress+json"
CALL_PREFIX = '__import__("kernel_hooks.server_api", fromlist=["run"]).run('
RESULT_EXPR = '__import__("kernel_hooks.server_api", fromlist=["run"]).last_result()'
PAUSING_MESSAGE = "workspace is pausing; this cell did not run"


def call_code(action: str, request_json: str) -> str:
    """The code of the silent execute request that runs ``action`` in a kernel."""
    return f"{CALL_PREFIX}{action!r}, {request_json!r})"


@dataclass(frozen=True)
class CheckpointRequest:
    """Checkpoint the kernel's namespace into ``store``/``workspace``."""

    action: ClassVar[str] = "checkpoint"
    store: str | None
    workspace: str | None
    name: str | None = None
    notebook: str | None = None
    reason: str | None = None  # why the server checkpoints: user, idle, shutdown (the manifest's)

    def to_json(self) -> str:
        return json.dumps(asdict(self))


@dataclass(frozen=True)
class ResumeRequest:
    """Restore ``reference`` (``only`` those names, when given) into the kernel of
    ``notebook`` (the kernel refuses a snapshot taken in another notebook; None: the kernel's
    own session notebook decides)."""

    action: ClassVar[str] = "resume"
    store: str | None
    workspace: str | None
    reference: str = "latest"
    only: list[str] | None = None
    notebook: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))


@dataclass(frozen=True)
class HoldRequest:
    """``pausing``: refuse every cell but the server's own calls from now on (a pause is
    taking a consistent cut); ``pausing=False`` lifts it. ``reason`` is shown with the refusal."""

    action: ClassVar[str] = "hold"
    pausing: bool
    reason: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))


Request = CheckpointRequest | ResumeRequest | HoldRequest
REQUESTS: dict[str, type] = {r.action: r for r in (CheckpointRequest, ResumeRequest, HoldRequest)}


def request_from_json(action: str, text: str) -> Request:
    """The request of ``action``, strictly (kernel side)."""
    kind = REQUESTS.get(action)
    if kind is None:
        raise InvalidInputError(f"unknown action {action!r} (known: {', '.join(REQUESTS)})")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise InvalidInputError(f"a {action} request must be a JSON object")
    allowed = {f.name for f in fields(kind)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InvalidInputError(f"{action} request: unknown field(s) {', '.join(unknown)}")
    return kind(**data)


@dataclass(frozen=True)
class Outcome:
    """What one kernel call answered: ``result`` when ``ok``, else ``error`` and ``message``."""

    ok: bool
    result: dict[str, Any] | None = None
    error: str | None = None
    message: str | None = None

    @classmethod
    def success(cls, result: dict[str, Any]) -> Outcome:
        return cls(True, result=result)

    @classmethod
    def failure(cls, exc: BaseException) -> Outcome:
        return cls(False, error=type(exc).__name__, message=str(exc) or repr(exc))

    def to_dict(self) -> dict[str, Any]:
        if self.ok:
            return {"ok": True, "result": self.result}
        return {"ok": False, "error": self.error, "message": self.message}

    @classmethod
    def from_dict(cls, data: Any) -> Outcome:
        """The outcome the kernel sent; ``KernelCallError`` when it is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
            raise KernelCallError(f"the kernel's answer is not an outcome: {data!r:.200}")
        if data["ok"]:
            if not isinstance(data.get("result"), dict):
                raise KernelCallError("the kernel answered ok without a result")
            return cls(True, result=data["result"])
        return cls(False, error=str(data.get("error")), message=str(data.get("message")))


def _strings(data: dict[str, Any], name: str) -> list[str]:
    value = data.get(name, [])
    if not isinstance(value, list):
        raise KernelCallError(f"the kernel's result has no list {name!r}")
    return [v if isinstance(v, str) else v.get("name", "") for v in value]


@dataclass(frozen=True)
class CheckpointReply:
    """A kernel's checkpoint result; ``data`` is the whole result as the kernel sent it."""

    snapshot_id: str
    bytes_total: int
    bytes_new: int
    bytes_reused: int
    saved: list[str]
    skipped: list[dict[str, Any]]
    data: dict[str, Any] = field(repr=False)
    hash_seed: str | None = None  # the kernel's PYTHONHASHSEED (None: random)
    modules: list[str] = field(default_factory=list)  # the names in ``saved`` bound to modules

    @classmethod
    def from_result(cls, data: dict[str, Any]) -> CheckpointReply:
        if not isinstance(data.get("snapshot_id"), str):
            raise KernelCallError("the kernel's checkpoint result names no snapshot_id")
        seed = data.get("hash_seed")
        if seed is not None and not valid_hash_seed(seed):
            raise KernelCallError(f"the kernel's checkpoint result has a bad hash_seed {seed!r}")
        return cls(data["snapshot_id"], int(data.get("bytes_total", 0)),
                   int(data.get("bytes_new", 0)), int(data.get("bytes_reused", 0)),
                   _strings(data, "saved"), list(data.get("skipped", [])), data, seed,
                   _strings(data, "modules") if "modules" in data else [])


@dataclass(frozen=True)
class RestoreReply:
    """A kernel's resume result; ``data`` is the whole result as the kernel sent it."""

    snapshot_id: str
    restored: list[str]
    data: dict[str, Any] = field(repr=False)

    @classmethod
    def from_result(cls, data: dict[str, Any]) -> RestoreReply:
        return cls(str(data.get("snapshot_id")), _strings(data, "restored"), data)
