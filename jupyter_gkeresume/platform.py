"""Which platform runs this server: the one place that reads the pod's environment for it.

``detect(env)`` answers, from the environment alone (never by calling an API and seeing what
fails), what the rest of the product needs to know about where it runs:

- ``name``: ``jupyterhub`` (``JUPYTERHUB_USER`` set), ``kubeflow-v1`` (``NB_PREFIX`` is
  ``/notebook/{namespace}/{name}``, which the Notebook controller sets on every v1 pod),
  ``kubeflow-v2`` (``NB_PREFIX`` is ``/workspace/connect/{namespace}/{name}/{port}/``, what a
  WorkspaceKind's ``{{ httpPathPrefix "PORT" }}`` renders), else ``local``;
- ``identity``: the ``(kind, *parts)`` the workspace id is made of (``workspace.workspace_id_for``):
  ``("hub", user, server)``, ``("kf", namespace, notebook)``, ``("kfws", namespace, workspace)``
  (its own kind: a v2 Workspace never shares an id with a v1 Notebook of the same name, and the
  port is not part of it), ``("local", login)``; ``source`` says where it came from;
- ``backend``: the release backend the platform calls for: ``jupyterhub`` (when the Hub's API
  variables are set), ``kubeflow-notebook`` (v1: annotate the Notebook
  ``kubeflow-resource-stopped``), ``kubeflow-workspace`` (v2: ``spec.paused: true`` on the
  Workspace), both only inside Kubernetes (``KUBERNETES_SERVICE_HOST``), else ``none``;
- ``namespace`` and ``resource``: the Notebook or Workspace to patch (empty elsewhere).

Upstream (checked): kubeflow/notebooks ``notebooks-v1``
``components/notebook-controller/controllers/notebook_controller.go`` (``NB_PREFIX`` =
``"/notebook/" + namespace + "/" + name``); ``notebooks-v2``
``workspaces/controller/internal/controller/workspace_controller.go``
(``workspaceConnectPathTemplate = "/workspace/connect/%s/%s/%s/"``: namespace, name, port id).
"""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass

V1_PREFIX_RE = re.compile(r"/notebook/([^/]+)/([^/]+)/?")
V2_PREFIX_RE = re.compile(r"/workspace/connect/([^/]+)/([^/]+)/([^/]+)/?")


@dataclass(frozen=True)
class Platform:
    """What ``detect`` found (see the module docstring for each field)."""

    name: str
    identity: tuple[str, ...]
    source: str
    backend: str
    namespace: str = ""
    resource: str = ""


def detect(env: dict[str, str] | None = None) -> Platform:
    """The platform this environment describes (``os.environ`` by default)."""
    env = os.environ if env is None else env
    in_kubernetes = bool(env.get("KUBERNETES_SERVICE_HOST"))
    if env.get("JUPYTERHUB_USER"):
        hub_api = bool(env.get("JUPYTERHUB_API_URL") and env.get("JUPYTERHUB_API_TOKEN"))
        return Platform("jupyterhub", ("hub", env["JUPYTERHUB_USER"],
                                       env.get("JUPYTERHUB_SERVER_NAME", "")),
                        "$JUPYTERHUB_USER and $JUPYTERHUB_SERVER_NAME",
                        "jupyterhub" if hub_api else "none")
    prefix = env.get("NB_PREFIX", "")
    if match := V1_PREFIX_RE.fullmatch(prefix):
        namespace, name = match.groups()
        return Platform("kubeflow-v1", ("kf", namespace, name),
                        f"$NB_PREFIX {prefix} (Kubeflow Notebooks v1)",
                        "kubeflow-notebook" if in_kubernetes else "none", namespace, name)
    if match := V2_PREFIX_RE.fullmatch(prefix):
        namespace, name, _port = match.groups()
        return Platform("kubeflow-v2", ("kfws", namespace, name),
                        f"$NB_PREFIX {prefix} (Kubeflow Notebooks v2)",
                        "kubeflow-workspace" if in_kubernetes else "none", namespace, name)
    return Platform("local", ("local", getpass.getuser()), "the login name", "none")
