"""The jupyter_server running this workspace, as seen from a command in the same pod.

``running_servers()`` lists where a server may answer: ``GKERESUME_SERVER_URL`` first (our
extension exports it to everything the server starts: kernels, terminals), then each server's
runtime file (``jupyter_server.serverapp.list_running_servers``: ``jpserver-PID.json`` in the
Jupyter runtime dir, with its URL and token), each once. ``token_for(url)`` is how a caller
authenticates: ``JUPYTERHUB_API_TOKEN`` under JupyterHub (jupyterhub-singleuser takes it), else
the token of the runtime file with that URL. ``request_json(url, path, ...)`` calls one of our
API paths with it; every failure is a ``ServerUnreachableError`` or ``ServerRefusedError``.

Used by ``jupyter gkeresume doctor`` (``GET gkeresume/api/doctor``) and the kernel's
``server_link`` (``%pause``).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from .errors import ServerRefusedError, ServerUnreachableError

SERVER_URL_ENV = "GKERESUME_SERVER_URL"


def _runtime_files() -> list[dict[str, Any]]:
    from jupyter_server.serverapp import list_running_servers

    return list(list_running_servers())


def running_servers() -> list[str]:
    """URLs of the servers that may run this workspace, the one that started us first."""
    urls = [os.environ.get(SERVER_URL_ENV, "")]
    urls += [info.get("url", "") for info in _runtime_files()]
    seen: dict[str, None] = {}
    for url in urls:
        if url:
            seen.setdefault(url.rstrip("/") + "/")
    return list(seen)


def token_for(url: str) -> str | None:
    if os.environ.get("JUPYTERHUB_API_TOKEN"):
        return os.environ["JUPYTERHUB_API_TOKEN"]
    for info in _runtime_files():
        if info.get("url", "").rstrip("/") == url.rstrip("/"):
            return info.get("token") or None
    return None


def request_json(url: str, path: str, *, what: str, timeout: float, method: str = "GET",
                 body: dict[str, Any] | None = None) -> dict[str, Any]:
    """``method url/path`` with the token, the JSON answer (``{}`` when empty); an HTTP error
    is a ``ServerRefusedError`` ("the server refused {what} (code): its message"), anything else
    (refused, timed out, not JSON) a ``ServerUnreachableError``."""
    headers = {"Content-Type": "application/json"}
    token = token_for(url)
    if token:
        headers["Authorization"] = f"token {token}"
    request = urllib.request.Request(
        f"{url.rstrip('/')}/{path}", headers=headers, method=method,
        data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("message")
        except (ValueError, AttributeError):
            message = None
        raise ServerRefusedError(exc.code, f"the server refused {what} ({exc.code}): "
                                 f"{message or exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServerUnreachableError(f"cannot reach the server at {url}: {exc}") from None
