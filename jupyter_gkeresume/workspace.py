"""Where snapshots live and under which workspace id: stable across a freshly scheduled pod.

Resolution order for the workspace id: an explicit value (trait ``GkeResume.workspace_id`` or the
caller), ``GKERESUME_WORKSPACE``, JupyterHub (``JUPYTERHUB_USER`` + ``JUPYTERHUB_SERVER_NAME``),
Kubeflow (``NB_PREFIX`` = ``/notebook/{namespace}/{name}``), else ``local-{login name}``. None of
these depend on the pod name, so a new pod of the same server finds the same snapshots.

The store URL: an explicit value (trait ``GkeResume.store_url``), ``GKERESUME_STORE``, else the
local directory ``{jupyter data dir}/gkeresume/store`` (on JupyterHub and Kubeflow the home
directory, hence the data dir, is the user's persistent volume).
"""

from __future__ import annotations

import getpass
import os
import re

from jupyter_core.paths import jupyter_data_dir

from .errors import InvalidInputError

WORKSPACE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")


def validate_workspace_id(value: object) -> str:
    """Return ``value`` if it is a safe workspace id (it becomes a path component)."""
    if not isinstance(value, str) or not WORKSPACE_RE.match(value) or ".." in value:
        raise InvalidInputError(f"not a valid workspace id: {value!r} (lowercase, digits, ._-)")
    return value


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.") or "default"


def resolve_workspace_id(explicit: str | None = None, env: dict[str, str] | None = None) -> str:
    """The workspace id by the documented resolution order."""
    env = os.environ if env is None else env
    if explicit:
        return validate_workspace_id(explicit)
    if env.get("GKERESUME_WORKSPACE"):
        return validate_workspace_id(env["GKERESUME_WORKSPACE"])
    if env.get("JUPYTERHUB_USER"):
        server = env.get("JUPYTERHUB_SERVER_NAME", "")
        return _slug(f"hub-{env['JUPYTERHUB_USER']}" + (f"-{server}" if server else ""))[:128]
    parts = [p for p in env.get("NB_PREFIX", "").split("/") if p]
    if len(parts) >= 3 and parts[0] == "notebook":
        return _slug(f"kf-{parts[1]}-{parts[2]}")[:128]
    return _slug(f"local-{getpass.getuser()}")[:128]


def default_store_url() -> str:
    """The local default store directory (document and keep stable: users' snapshots live here)."""
    return os.path.join(jupyter_data_dir(), "gkeresume", "store")


def resolve_store_url(explicit: str | None = None, env: dict[str, str] | None = None) -> str:
    """The store URL by the documented resolution order."""
    env = os.environ if env is None else env
    return explicit or env.get("GKERESUME_STORE") or default_store_url()
