"""Release backends: how a paused server gives its accelerator back to the cluster.

The orchestrator calls ``backend.release()`` exactly once per pause, only after every snapshot
of that pause is committed, read back and verified and the paused record is written; it shuts the
paused kernels down afterwards (``none`` relies on that alone). A backend raises ``ReleaseError``
with a message a user can act on; the orchestrator then keeps the kernels running.

``autodetect(env)`` picks ``jupyterhub`` when the Hub's API variables are set (the single-user
server always gets them), ``kubeflow`` inside a Kubernetes pod started by the Kubeflow notebook
controller (``KUBERNETES_SERVICE_HOST`` and ``NB_PREFIX``), else ``none``.
"""

from __future__ import annotations

import os

from .base import ReleaseBackend
from .jupyterhub import JupyterHubRelease
from .kubeflow import KubeflowRelease
from .none import NoRelease

BACKENDS: dict[str, type[ReleaseBackend]] = {
    "none": NoRelease, "jupyterhub": JupyterHubRelease, "kubeflow": KubeflowRelease,
}


def autodetect(env: dict[str, str] | None = None) -> type[ReleaseBackend]:
    """The backend class this environment calls for."""
    env = os.environ if env is None else env
    if env.get("JUPYTERHUB_API_URL") and env.get("JUPYTERHUB_API_TOKEN"):
        return JupyterHubRelease
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("NB_PREFIX", "").startswith("/notebook/"):
        return KubeflowRelease
    return NoRelease


__all__ = ["BACKENDS", "JupyterHubRelease", "KubeflowRelease", "NoRelease", "ReleaseBackend",
           "autodetect"]
