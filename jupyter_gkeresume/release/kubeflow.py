"""``kubeflow-notebook`` / ``kubeflow-workspace``: ask the Kubeflow controller to stop this pod.

The platform's routing prefix says which resource owns the pod (``platform.detect``: never found
by trying one and falling back on an error, since a cluster without the Workspace CRD answers 403
as readily as 404):

- ``kubeflow-notebook`` (Notebooks v1, ``NB_PREFIX=/notebook/{namespace}/{name}``): merge-patch
  ``kubeflow.org/v1`` ``Notebook`` ``{namespace}/{name}`` with the annotation
  ``kubeflow-resource-stopped: <RFC 3339 UTC time>`` (the controller scales it to zero);
- ``kubeflow-workspace`` (Notebooks v2, ``NB_PREFIX=/workspace/connect/{namespace}/{name}/{port}/``):
  merge-patch ``kubeflow.org/v1beta1`` ``Workspace`` ``{namespace}/{name}`` with
  ``{"spec": {"paused": true}}``.

Namespace and name come from the prefix, the namespace otherwise from the service account;
``c.KubeflowRelease.namespace`` / ``.resource_name`` override both. Credentials are the pod's
service account (in-cluster config; inside Kubernetes a missing token is said as such), else
``~/.kube/config``; the ClusterRole it needs ships as ``deploy/kubeflow/base/kubeflow-rbac.yaml`` (v1 pods get
it through ``kubeflow-edit``, v2 pods only from their WorkspaceKind: ``rbac_advice``).
``may_release`` asks the API server, with a SelfSubjectAccessReview, whether those credentials
may patch the resource (the doctor's check). The kubernetes client is synchronous: calls run in
a thread, each bounded by ``request_timeout`` (a black-holed API server is a ``ReleaseError``,
so the pause fails and the workspace returns to ``running`` instead of staying in
``releasing``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, ClassVar

from traitlets import Float, Unicode, default

from ..errors import ReleaseError
from ..platform import detect
from .base import ReleaseBackend

GROUP = "kubeflow.org"
STOPPED_ANNOTATION = "kubeflow-resource-stopped"
SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class KubeflowRelease(ReleaseBackend):
    """What both Kubeflow backends share; each subclass names its resource and its patch."""

    kind: ClassVar[str]  # "Notebook" or "Workspace"
    rbac_advice: ClassVar[str]  # how this platform's pods get the permission to patch it
    version: ClassVar[str]  # kubeflow.org/{version}
    plural: ClassVar[str]

    namespace = Unicode(help="Namespace of the Notebook/Workspace (default: from NB_PREFIX, "
                        "else the service account's).").tag(config=True)
    resource_name = Unicode(help="Name of the Notebook/Workspace (default: from NB_PREFIX)."
                            ).tag(config=True)
    api_host = Unicode(help="Kubernetes API URL; empty = in-cluster config, else kubeconfig."
                       ).tag(config=True)
    request_timeout = Float(30.0, help="Seconds to wait for the Kubernetes API to connect, and "
                            "again for each answer.").tag(config=True)

    @default("namespace")
    def _namespace(self) -> str:
        if namespace := detect().namespace:
            return namespace
        try:
            with open(SA_NAMESPACE) as f:
                return f.read().strip()
        except OSError:
            return ""

    @default("resource_name")
    def _resource_name(self) -> str:
        return detect().resource

    def patch_body(self) -> dict[str, Any]:
        """The merge patch that stops the pod."""
        raise NotImplementedError

    @property
    def where(self) -> str:
        return f"{self.kind} {self.namespace}/{self.resource_name}"

    async def release(self) -> None:
        await self._call(self._patch)
        self.log.info("gkeresume: %s patched to stop this pod", self.where)

    async def may_release(self) -> tuple[bool, str]:
        allowed, reason = await self._call(self._access_review)
        verdict = "may" if allowed else "may NOT"
        return allowed, (f"this pod's credentials {verdict} patch {self.where} "
                         f"(SelfSubjectAccessReview{': ' + reason if reason else ''})"
                         + ("" if allowed else f"; {self.rbac_advice}"))

    async def _call(self, call: Callable[[Any], Any]) -> Any:
        if not self.namespace or not self.resource_name:
            raise ReleaseError(f"{self.name} release: namespace or name unknown (NB_PREFIX is "
                               "not a Kubeflow prefix; set c.KubeflowRelease.namespace and "
                               ".resource_name)")
        return await asyncio.to_thread(self._call_sync, call)

    def _client(self):
        try:
            from kubernetes import client, config
        except ImportError:
            raise ReleaseError(
                "the kubeflow release backends need the kubernetes client: "
                "pip install 'jupyter-gkeresume[kubeflow]'"
            ) from None

        if self.api_host:
            configuration = client.Configuration(host=self.api_host)
            token = os.environ.get("GKERESUME_KUBE_TOKEN")
            if token:
                configuration.api_key = {"authorization": f"Bearer {token}"}
            return client.ApiClient(configuration)
        try:
            config.load_incluster_config()
        except config.ConfigException as exc:
            if os.environ.get("KUBERNETES_SERVICE_HOST"):  # in a pod: no kubeconfig to fall to
                raise config.ConfigException(
                    f"no service-account token at {SA_TOKEN} (the pod runs with "
                    "automountServiceAccountToken: false?)" if not os.path.isfile(SA_TOKEN)
                    else f"the pod's in-cluster credentials: {exc}") from None
            config.load_kube_config()
        return client.ApiClient()

    def _call_sync(self, call: Callable[[Any], Any]) -> Any:
        """``call(api_client)`` with every failure turned into a ``ReleaseError``."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config import ConfigException
        from urllib3.exceptions import HTTPError, MaxRetryError
        from urllib3.exceptions import TimeoutError as Urllib3Timeout

        try:
            api_client = self._client()
        except ConfigException as exc:
            raise ReleaseError(f"{self.name} release: no Kubernetes credentials: {exc}") from None
        try:
            return call(api_client)
        except ApiException as exc:
            raise ReleaseError(self._explain(exc)) from None
        except (Urllib3Timeout, MaxRetryError) as exc:
            if isinstance(exc, Urllib3Timeout) or isinstance(exc.reason, Urllib3Timeout):
                raise ReleaseError(
                    f"{self.name} release: the Kubernetes API did not answer within "
                    f"{self.request_timeout:g} s (c.KubeflowRelease.request_timeout)"
                ) from None
            raise ReleaseError(f"{self.name} release: Kubernetes API unreachable: {exc}") from None
        except (OSError, HTTPError) as exc:  # connection refused, retries exhausted
            raise ReleaseError(f"{self.name} release: Kubernetes API unreachable: {exc}") from None

    def _patch(self, api_client) -> None:
        """Merge-patch the resource; a 409 (concurrent update) is retried twice."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = client.CustomObjectsApi(api_client)
        for attempt in range(3):
            try:
                api.patch_namespaced_custom_object(
                    GROUP, self.version, self.namespace, self.plural, self.resource_name,
                    self.patch_body(), _request_timeout=self.request_timeout,
                )
                return
            except ApiException as exc:
                if exc.status != 409 or attempt == 2:
                    raise

    def _access_review(self, api_client) -> tuple[bool, str]:
        from kubernetes import client

        review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                group=GROUP, resource=self.plural, verb="patch", namespace=self.namespace,
                name=self.resource_name)))
        answer = client.AuthorizationV1Api(api_client).create_self_subject_access_review(
            review, _request_timeout=self.request_timeout)
        return bool(answer.status.allowed), answer.status.reason or ""

    def _explain(self, exc) -> str:
        if exc.status == 403:
            return f"{self.name} release: forbidden to patch {self.where}: {self.rbac_advice}"
        if exc.status == 404:
            return f"{self.name} release: no {self.where} in the cluster"
        return f"{self.name} release: the API answered {exc.status} {exc.reason} for {self.where}"


class KubeflowNotebookRelease(KubeflowRelease):
    """Notebooks v1: the Notebook's ``kubeflow-resource-stopped`` annotation (upstream:
    kubeflow/notebooks ``notebooks-v1`` ``components/notebook-controller/controllers/
    culling_controller.go`` ``STOP_ANNOTATION``)."""

    name = "kubeflow-notebook"
    kind, version, plural = "Notebook", "v1", "notebooks"
    rbac_advice = ("the pod's service account (default-editor) needs the gkeresume-release "
                   "ClusterRole, which deploy/kubeflow/base/kubeflow-rbac.yaml aggregates into kubeflow-edit")

    def patch_body(self) -> dict[str, Any]:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"metadata": {"annotations": {STOPPED_ANNOTATION: stamp}}}


class KubeflowWorkspaceRelease(KubeflowRelease):
    """Notebooks v2: ``spec.paused: true`` on the Workspace (upstream: kubeflow/notebooks
    ``notebooks-v2`` ``workspaces/controller/api/v1beta1/workspace_types.go`` ``Paused``)."""

    name = "kubeflow-workspace"
    kind, version, plural = "Workspace", "v1beta1", "workspaces"
    rbac_advice = ("the pod runs as ws-{workspace name}, which gets only the ClusterRoles its "
                   "WorkspaceKind lists in podTemplate.serviceAccount.clusterRoles: list "
                   "gkeresume-release there (deploy/kubeflow/workspacekind-v1beta1.yaml) and "
                   "apply deploy/kubeflow/base/kubeflow-rbac.yaml")

    def patch_body(self) -> dict[str, Any]:
        return {"spec": {"paused": True}}
