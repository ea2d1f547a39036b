"""``jupyterhub``: stop this user's server through the Hub REST API, with the server's own token.

``DELETE {JUPYTERHUB_API_URL}/users/{user}/server`` (or ``/users/{user}/servers/{name}`` for a
named server). With KubeSpawner the Hub then deletes the pod and keeps the PVC. The Hub stops the
server by signalling this very process, so the caller must have answered the browser already (the
orchestrator releases from a background task) and must not count on ``release`` returning.

The server's token may do this only when the Hub admin grants it (``jupyterhub_config.py``)::

    c.Spawner.server_token_scopes = [
        "access:servers!server", "users:activity!user", "read:users:name!user",
        "delete:servers!server",
    ]

Without ``delete:servers!server`` the Hub answers 403 and the pause fails with that advice (on
Zero to JupyterHub the key is ``hub.config.KubeSpawner.server_token_scopes``; the token is minted
at spawn, so a running server needs a restart after the change); any other refusal (an expired
or revoked token is a 403 too) is shown with the Hub's own message. A 404 means the token may
not even see this user's server: the Hub grants only the part of ``server_token_scopes`` the
user holds and hides what a token cannot read rather than refuse it.
``may_release`` reads the token's scopes from ``GET {JUPYTERHUB_API_URL}/user`` (JupyterHub 2+
lists the requesting token's expanded scopes there) without stopping anything.
"""

from __future__ import annotations

import json
import os
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.simple_httpclient import HTTPTimeoutError
from traitlets import Float, Unicode, default

from ..errors import ReleaseError
from .base import ReleaseBackend

SCOPES_ADVICE = (
    'the Hub admin must add "delete:servers!server" to c.Spawner.server_token_scopes '
    "(Zero to JupyterHub: hub.config.KubeSpawner.server_token_scopes), then restart this "
    "server: its token was minted when it started (see docs/deploy.md step 5)"
)
HIDDEN_ADVICE = (
    "the Hub hides what a token may not read: this token cannot see this user's server, so "
    "a scope of c.Spawner.server_token_scopes was filtered out (the Hub grants only the "
    "scopes the user holds) or the server's name is wrong (see docs/deploy.md step 5)"
)


class JupyterHubRelease(ReleaseBackend):
    name = "jupyterhub"

    api_url = Unicode(help="The Hub API URL (default: $JUPYTERHUB_API_URL).").tag(config=True)
    user = Unicode(help="The Hub user (default: $JUPYTERHUB_USER).").tag(config=True)
    server_name = Unicode(help="Named server, '' for the default one "
                          "(default: $JUPYTERHUB_SERVER_NAME).").tag(config=True)
    request_timeout = Float(30.0, help="Seconds to wait for the Hub to connect, and again to "
                            "answer.").tag(config=True)

    @default("api_url")
    def _api_url(self) -> str:
        return os.environ.get("JUPYTERHUB_API_URL", "")

    @default("user")
    def _user(self) -> str:
        return os.environ.get("JUPYTERHUB_USER", "")

    @default("server_name")
    def _server_name(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVER_NAME", "")

    def server_url(self) -> str:
        """The Hub API URL of this server."""
        if not self.api_url or not self.user:
            raise ReleaseError("jupyterhub release: JUPYTERHUB_API_URL/JUPYTERHUB_USER not set")
        base = f"{self.api_url.rstrip('/')}/users/{quote(self.user, safe='')}"
        if self.server_name:
            return f"{base}/servers/{quote(self.server_name, safe='')}"
        return f"{base}/server"

    async def release(self) -> None:
        url = self.server_url()
        self.log.info("gkeresume: asking the Hub to stop this server: DELETE %s", url)
        response = await self._fetch(url, "DELETE", "stop this server")
        self.log.info("gkeresume: the Hub answered %s: server stopping", response.code)

    async def may_release(self) -> tuple[bool, str]:
        response = await self._fetch(f"{self.api_url.rstrip('/')}/user", "GET",
                                     "say who this token is")
        scopes = json.loads(response.body).get("scopes", [])
        needed = {"delete:servers", f"delete:servers!user={self.user}",
                  f"delete:servers!server={self.user}/{self.server_name}"}
        if needed & set(scopes):
            return True, f"the server's Hub token has {sorted(needed & set(scopes))[0]}"
        return False, f"the server's Hub token lacks delete:servers for this server: {SCOPES_ADVICE}"

    async def _fetch(self, url: str, method: str, what: str):
        """One authenticated Hub API call; every failure is a ``ReleaseError`` saying why."""
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if not token:
            raise ReleaseError("jupyterhub release: JUPYTERHUB_API_TOKEN is not set")
        request = HTTPRequest(
            url, method=method, headers={"Authorization": f"token {token}"},
            connect_timeout=self.request_timeout, request_timeout=self.request_timeout,
        )
        try:
            return await AsyncHTTPClient().fetch(request)
        except HTTPClientError as exc:
            if isinstance(exc, HTTPTimeoutError):
                raise ReleaseError(
                    f"the Hub at {self.api_url} did not answer within {self.request_timeout:g} s "
                    "(c.JupyterHubRelease.request_timeout)"
                ) from None
            message = _hub_message(exc)
            advice = (f": {SCOPES_ADVICE}" if exc.code == 403 and "scope" in message else
                      f": {HIDDEN_ADVICE}" if exc.code == 404 else "")
            raise ReleaseError(f"the Hub refused to {what}: {exc.code} {message}{advice}"
                               ) from None
        except OSError as exc:
            raise ReleaseError(f"cannot reach the Hub at {self.api_url}: {exc}") from None


def _hub_message(exc: HTTPClientError) -> str:
    body = exc.response.body if exc.response is not None else b""
    try:
        return str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError):
        return exc.message or ""
