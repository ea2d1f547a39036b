"""From a kernel to the jupyter_server that runs it: how ``%pause`` asks for the release.

The server extension exports its URL to kernels as ``GKERESUME_SERVER_URL``. The kernel
authenticates with ``JUPYTERHUB_API_TOKEN`` on JupyterHub, else with the token the server wrote in
its runtime file (``jupyter_gkeresume.running_server``: the request and its errors). It sends
``POST gkeresume/api/pause`` for its own kernel with ``when_idle``: the server checkpoints once the
``%pause`` cell has ended (every kernel, when the backend releases the pod), then releases.
"""

from __future__ import annotations

import os
from typing import Any

from jupyter_gkeresume.errors import ServerUnreachableError
from jupyter_gkeresume.running_server import SERVER_URL_ENV, request_json

TIMEOUT = 30


def server_url() -> str | None:
    return os.environ.get(SERVER_URL_ENV) or None


def own_kernel_id() -> str:
    from ipykernel.connect import get_connection_file

    name = os.path.basename(get_connection_file())
    return name.removeprefix("kernel-").removesuffix(".json")


def request_pause(name: str | None = None) -> dict[str, Any]:
    """Ask the server to pause this kernel's workspace; returns its 202 answer."""
    url = server_url()
    if url is None:
        raise ServerUnreachableError("no jupyter-gkeresume server extension is running this kernel")
    body: dict[str, Any] = {"kernels": [own_kernel_id()], "when_idle": True}
    if name:
        body["name"] = name
    return request_json(url, "gkeresume/api/pause", what="the pause", timeout=TIMEOUT,
                        method="POST", body=body)
