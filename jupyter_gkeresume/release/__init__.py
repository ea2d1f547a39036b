"""Release backends: how a paused server gives its accelerator back to the cluster.

The orchestrator calls ``backend.release()`` exactly once per pause, only after every snapshot
of that pause is committed, read back and verified and the paused record is written; it shuts the
paused kernels down afterwards (``none`` relies on that alone). A backend raises ``ReleaseError``
with a message a user can act on; the orchestrator then keeps the kernels running.

``autodetect(env)`` is the backend ``platform.detect`` names: ``jupyterhub`` when the Hub's API
variables are set (the single-user server always gets them), ``kubeflow-notebook`` or
``kubeflow-workspace`` inside a Kubernetes pod by the shape of its ``NB_PREFIX`` (Notebooks v1 or
v2), else ``none``.

``may_release()`` (the doctor's check) says whether this pod's credentials may release it, and
how that was found out, without releasing anything.
"""

from __future__ import annotations

from ..platform import detect
from .base import ReleaseBackend
from .jupyterhub import JupyterHubRelease
from .kubeflow import KubeflowNotebookRelease, KubeflowRelease, KubeflowWorkspaceRelease
from .none import NoRelease

BACKENDS: dict[str, type[ReleaseBackend]] = {
    cls.name: cls for cls in (NoRelease, JupyterHubRelease, KubeflowNotebookRelease,
                              KubeflowWorkspaceRelease)
}


def autodetect(env: dict[str, str] | None = None) -> type[ReleaseBackend]:
    """The backend class this environment calls for."""
    return BACKENDS[detect(env).backend]


__all__ = ["BACKENDS", "JupyterHubRelease", "KubeflowNotebookRelease", "KubeflowRelease",
           "KubeflowWorkspaceRelease", "NoRelease", "ReleaseBackend", "autodetect"]
