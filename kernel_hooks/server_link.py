"""From a kernel to the jupyter_server that runs it: how ``%pause`` asks for the release.

The server extension exports its URL to kernels as ``GKERESUME_SERVER_URL``. The kernel
authenticates with ``JUPYTERHUB_API_TOKEN`` on JupyterHub, else with the token the server wrote in
its runtime file (``jupyter_gkeresume.running_server``: the request and its errors). It sends
``POST gkeresume/api/pause`` naming no kernel, with ``when_busy: "queue"``: the server checkpoints
every kernel of the workspace once the ``%pause`` cell (and any other running cell) has ended,
then releases.
"""

from __future__ import annotations

import os
from typing import Any

from jupyter_gkeresume.errors import ServerUnreachableError
from jupyter_gkeresume.running_server import SERVER_URL_ENV, request_json

TIMEOUT = 30


def server_url() -> str | None:
    return os.environ.get(SERVER_URL_ENV) or None


def request_pause(name: str | None = None) -> dict[str, Any]:
    """Ask the server to pause this kernel's workspace; returns its 202 answer. The request
    names no kernel: the server pauses every kernel of the workspace (a pause releases it)."""
    url = server_url()
    if url is None:
        raise ServerUnreachableError("no jupyter-gkeresume server extension is running this kernel")
    body: dict[str, Any] = {"when_busy": "queue"}
    if name:
        body["name"] = name
    return request_json(url, "gkeresume/api/pause", what="the pause", timeout=TIMEOUT,
                        method="POST", body=body)
