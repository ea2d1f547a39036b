"""Where snapshots live and under which workspace id: stable across a freshly scheduled pod.

Resolution order for the workspace id: an explicit value (trait ``GkeResume.workspace_id`` or the
caller), ``GKERESUME_WORKSPACE``, else the identity ``platform.detect`` reads from the pod's
environment: JupyterHub (``JUPYTERHUB_USER`` + ``JUPYTERHUB_SERVER_NAME``), Kubeflow Notebooks v1
(``NB_PREFIX`` = ``/notebook/{namespace}/{name}``: ``kf-...``), Kubeflow Notebooks v2 (``NB_PREFIX``
= ``/workspace/connect/{namespace}/{name}/{port}/``: ``kfws-...``), else ``local-{login name}``.
None of these depend on the pod name, so a new pod of the same server finds the same snapshots.

Derived ids are an injective function of the identity (``workspace_id_for``), so two users never
share a workspace: when every part of the identity is made of ``[a-z0-9]`` only, the id is the
readable ``{kind}-{part}[-{part}]`` (``hub-alice``, ``hub-alice-gpu1``, ``kf-team-trainer``,
``kfws-team-trainer``): the
parts hold no ``-``, so splitting at ``-`` gives the identity back. Anything else (capitals, ``-``,
``@``, ``.``, non-ASCII, empty or long parts) becomes ``{readable slug}.{digest}``: the first 32 hex
digits of sha256 over the exact identity; only these ids hold a ``.``, so the two forms never meet.
Explicit ids are used as given (the admin chose them). See docs/security.md.

The store URL: an explicit value (trait ``GkeResume.store_url``), ``GKERESUME_STORE``, else the
local directory ``{jupyter data dir}/gkeresume/store`` (on JupyterHub and Kubeflow the home
directory, hence the data dir, is the user's persistent volume).
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from jupyter_core.paths import jupyter_data_dir

from .errors import InvalidInputError
from .platform import detect

WORKSPACE_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
PLAIN_PART_RE = re.compile(r"[a-z0-9]+")
MAX_LENGTH = 128
DIGEST_LENGTH = 32  # hex digits: 128 bits, no second preimage to find


def validate_workspace_id(value: object) -> str:
    """Return ``value`` if it is a safe workspace id (it becomes a path component)."""
    if not isinstance(value, str) or not WORKSPACE_RE.fullmatch(value) or ".." in value:
        raise InvalidInputError(f"not a valid workspace id: {value!r} (lowercase, digits, ._-)")
    return value


def workspace_id_for(kind: str, *parts: str) -> str:
    """The id of the identity ``(kind, *parts)`` (``kind``: ``hub``, ``kf``, ``kfws`` or ``local``);
    trailing empty parts are absent ones (JupyterHub's default server has the name ``""``)."""
    parts_list = list(parts)
    while parts_list and not parts_list[-1]:
        parts_list.pop()
    readable = "-".join([kind, *parts_list])
    if all(PLAIN_PART_RE.fullmatch(p) for p in parts_list) and len(readable) <= MAX_LENGTH:
        return readable
    identity = json.dumps([kind, *parts_list], ensure_ascii=False).encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(identity).hexdigest()[:DIGEST_LENGTH]
    slugs = [s for s in (re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in parts_list) if s]
    prefix = "-".join([kind, *slugs])[: MAX_LENGTH - DIGEST_LENGTH - 1].rstrip("-")
    return f"{prefix}.{digest}"


def resolve_workspace(explicit: str | None = None,
                      env: dict[str, str] | None = None) -> tuple[str, str]:
    """The workspace id by the documented resolution order, and where it came from."""
    env = os.environ if env is None else env
    if explicit:
        return validate_workspace_id(explicit), "c.GkeResume.workspace_id (or the caller)"
    if env.get("GKERESUME_WORKSPACE"):
        return validate_workspace_id(env["GKERESUME_WORKSPACE"]), "$GKERESUME_WORKSPACE"
    platform = detect(env)
    return workspace_id_for(*platform.identity), platform.source


def resolve_workspace_id(explicit: str | None = None, env: dict[str, str] | None = None) -> str:
    """The workspace id by the documented resolution order."""
    return resolve_workspace(explicit, env)[0]


def default_store_url() -> str:
    """The local default store directory (document and keep stable: users' snapshots live here)."""
    return os.path.join(jupyter_data_dir(), "gkeresume", "store")


def resolve_store_url(explicit: str | None = None, env: dict[str, str] | None = None) -> str:
    """The store URL by the documented resolution order."""
    env = os.environ if env is None else env
    return explicit or env.get("GKERESUME_STORE") or default_store_url()
