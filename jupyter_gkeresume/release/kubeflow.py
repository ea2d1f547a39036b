"""``kubeflow``: ask the Kubeflow controller to stop this notebook's pod (the PVC stays).

Two resources, tried in this order when ``kind`` is ``auto``:

- Notebooks v2 / GKE Workspaces: merge-patch ``kubeflow.org/v1beta1`` ``Workspace``
  ``{namespace}/{name}`` with ``{"spec": {"paused": true}}``;
- on 404, Kubeflow Notebooks v1: merge-patch ``kubeflow.org/v1`` ``Notebook`` ``{namespace}/{name}``
  with the annotation ``kubeflow-resource-stopped: <RFC 3339 UTC time>``.

Namespace and name come from the pod's ``NB_PREFIX`` (``/notebook/{namespace}/{name}``, set by
the notebook controller), the namespace otherwise from the service account. Credentials are the
pod's service account (in-cluster config), else ``~/.kube/config``; the Role it needs ships as
``deploy/kubeflow-rbac.yaml``. The kubernetes client is synchronous: calls run in a thread, each
bounded by ``request_timeout`` (a black-holed API server is a ``ReleaseError``, so the pause fails
and the workspace returns to ``running`` instead of staying in ``releasing``).
"""

from __future__ import annotations

import asyncio
import os
from datetime import datetime, timezone

from traitlets import Enum, Float, Unicode, default

from ..errors import ReleaseError
from .base import ReleaseBackend

GROUP = "kubeflow.org"
WORKSPACE = ("v1beta1", "workspaces")
NOTEBOOK = ("v1", "notebooks")
STOPPED_ANNOTATION = "kubeflow-resource-stopped"
SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
RBAC_ADVICE = "the pod's service account needs the Role in deploy/kubeflow-rbac.yaml"


class KubeflowRelease(ReleaseBackend):
    name = "kubeflow"

    namespace = Unicode(help="Namespace of the Workspace/Notebook (default: from NB_PREFIX, "
                        "else the service account's).").tag(config=True)
    resource_name = Unicode(help="Name of the Workspace/Notebook (default: from NB_PREFIX)."
                            ).tag(config=True)
    kind = Enum(["auto", "workspace", "notebook"], "auto",
                help="Which resource to patch; auto tries the Workspace, then the Notebook."
                ).tag(config=True)
    api_host = Unicode(help="Kubernetes API URL; empty = in-cluster config, else kubeconfig."
                       ).tag(config=True)
    request_timeout = Float(30.0, help="Seconds to wait for the Kubernetes API to connect, and "
                            "again for each answer.").tag(config=True)

    @default("namespace")
    def _namespace(self) -> str:
        parts = _prefix_parts()
        if parts:
            return parts[0]
        try:
            with open(SA_NAMESPACE) as f:
                return f.read().strip()
        except OSError:
            return ""

    @default("resource_name")
    def _resource_name(self) -> str:
        parts = _prefix_parts()
        return parts[1] if parts else ""

    def _custom_objects_api(self):
        try:
            from kubernetes import client, config
        except ImportError:
            raise ReleaseError(
                "the kubeflow release backend needs the kubernetes client: "
                "pip install 'jupyter-gkeresume[kubeflow]'"
            ) from None

        if self.api_host:
            configuration = client.Configuration(host=self.api_host)
            token = os.environ.get("GKERESUME_KUBE_TOKEN")
            if token:
                configuration.api_key = {"authorization": f"Bearer {token}"}
            return client.CustomObjectsApi(client.ApiClient(configuration))
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        return client.CustomObjectsApi()

    async def release(self) -> None:
        if not self.namespace or not self.resource_name:
            raise ReleaseError("kubeflow release: namespace or name unknown (NB_PREFIX is not "
                               "/notebook/{namespace}/{name}; set c.KubeflowRelease.namespace "
                               "and .resource_name)")
        await asyncio.to_thread(self._release_sync)

    def _release_sync(self) -> None:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config import ConfigException
        from urllib3.exceptions import HTTPError, MaxRetryError
        from urllib3.exceptions import TimeoutError as Urllib3Timeout

        try:
            api = self._custom_objects_api()
        except ConfigException as exc:
            raise ReleaseError(f"kubeflow release: no Kubernetes credentials: {exc}") from None
        where = f"{self.namespace}/{self.resource_name}"
        try:
            if self.kind in ("auto", "workspace"):
                try:
                    self._patch(api, WORKSPACE, {"spec": {"paused": True}})
                    self.log.info("gkeresume: Workspace %s patched spec.paused=true", where)
                    return
                except ApiException as exc:
                    if exc.status != 404 or self.kind == "workspace":
                        raise
            stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            self._patch(api, NOTEBOOK, {"metadata": {"annotations": {STOPPED_ANNOTATION: stamp}}})
            self.log.info("gkeresume: Notebook %s annotated %s", where, STOPPED_ANNOTATION)
        except ApiException as exc:
            what = {"auto": "Workspace or Notebook", "workspace": "Workspace",
                    "notebook": "Notebook"}[self.kind]
            raise ReleaseError(_explain(exc, what, where)) from None
        except (Urllib3Timeout, MaxRetryError) as exc:
            if isinstance(exc, Urllib3Timeout) or isinstance(exc.reason, Urllib3Timeout):
                raise ReleaseError(
                    f"kubeflow release: the Kubernetes API did not answer within "
                    f"{self.request_timeout:g} s (c.KubeflowRelease.request_timeout)"
                ) from None
            raise ReleaseError(f"kubeflow release: Kubernetes API unreachable: {exc}") from None
        except (OSError, HTTPError) as exc:  # connection refused, retries exhausted
            raise ReleaseError(f"kubeflow release: Kubernetes API unreachable: {exc}") from None

    def _patch(self, api, resource: tuple[str, str], body: dict) -> None:
        """Merge-patch one resource; a 409 (concurrent update) is retried twice."""
        from kubernetes.client.exceptions import ApiException

        version, plural = resource
        for attempt in range(3):
            try:
                api.patch_namespaced_custom_object(
                    GROUP, version, self.namespace, plural, self.resource_name, body,
                    _request_timeout=self.request_timeout,
                )
                return
            except ApiException as exc:
                if exc.status != 409 or attempt == 2:
                    raise


def _prefix_parts() -> list[str]:
    parts = [p for p in os.environ.get("NB_PREFIX", "").split("/") if p]
    return parts[1:3] if len(parts) >= 3 and parts[0] == "notebook" else []


def _explain(exc, what: str, where: str) -> str:
    if exc.status == 403:
        return f"kubeflow release: forbidden to patch {where}: {RBAC_ADVICE}"
    if exc.status == 404:
        return f"kubeflow release: no {what} {where} in the cluster"
    return f"kubeflow release: the API answered {exc.status} {exc.reason} for {where}"
