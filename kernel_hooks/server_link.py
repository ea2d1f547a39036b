"""From a kernel to the jupyter_server that runs it: how ``%pause`` asks for the release.

The server extension exports its URL to kernels as ``GKERESUME_SERVER_URL``. The kernel
authenticates with ``JUPYTERHUB_API_TOKEN`` on JupyterHub, else with the token the server wrote in
its runtime file (``jupyter_server.serverapp.list_running_servers``). It sends
``POST gkeresume/api/pause`` naming no kernel, with ``when_busy: "queue"``: the server checkpoints
every kernel of the workspace once the ``%pause`` cell (and any other running cell) has ended,
then releases.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from jupyter_gkeresume.errors import ServerRefusedError, ServerUnreachableError

TIMEOUT = 30


def server_url() -> str | None:
    return os.environ.get("GKERESUME_SERVER_URL") or None


def _token(url: str) -> str | None:
    if os.environ.get("JUPYTERHUB_API_TOKEN"):
        return os.environ["JUPYTERHUB_API_TOKEN"]
    from jupyter_server.serverapp import list_running_servers

    for info in list_running_servers():
        if info.get("url", "").rstrip("/") == url.rstrip("/"):
            return info.get("token") or None
    return None


def request_pause(name: str | None = None) -> dict[str, Any]:
    """Ask the server to pause this kernel's workspace; returns its 202 answer. The request
    names no kernel: the server pauses every kernel of the workspace (a pause releases it)."""
    url = server_url()
    if url is None:
        raise ServerUnreachableError("no jupyter-gkeresume server extension is running this kernel")
    body: dict[str, Any] = {"when_busy": "queue"}
    if name:
        body["name"] = name
    headers = {"Content-Type": "application/json"}
    token = _token(url)
    if token:
        headers["Authorization"] = f"token {token}"
    request = urllib.request.Request(
        f"{url.rstrip('/')}/gkeresume/api/pause", data=json.dumps(body).encode(),
        headers=headers, method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("message")
        except ValueError:
            message = None
        raise ServerRefusedError(
            exc.code, f"the server refused the pause ({exc.code}): {message or exc.reason}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        raise ServerUnreachableError(f"cannot reach the server at {url}: {exc}") from None
