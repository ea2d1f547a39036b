"""Loopback stand-ins of the Google Cloud and Kubernetes APIs that deploy/gcs's admin scripts
reach through the real ``gcloud`` and ``kubectl`` (tests/test_deploy_cloud_cli.py): one HTTP
server on 127.0.0.1 that keeps what the calls create and answers as the services do for the
few requests those commands make.

- Cloud Resource Manager v1: ``GET /v1/projects/{id}`` (``gcloud projects describe``).
- Cloud Storage JSON API v1, managed folders: ``POST /storage/v1/b/{bucket}/managedFolders``
  (409 when it exists), ``GET``/``PUT .../managedFolders/{name}/iam`` (404 when the folder
  does not exist); the IAM policy is kept as sent.
- Kubernetes: ``/version``, discovery (``/api``, ``/apis``, ``/api/v1``), OpenAPI v3 for
  ServiceAccount (``kubectl apply``'s strict field validation finds the GVK's PATCH path with
  a ``fieldValidation`` parameter), and ServiceAccounts: ``GET``, ``POST`` (create),
  ``PATCH`` (the strategic merge patch client-side apply sends: a JSON merge of the object).
  A field ServiceAccount does not have is refused (what ``fieldValidation=Strict`` does).

Call order: ``with LoopbackCloud() as cloud:`` then ``cloud.gcloud_env(tmp)`` /
``cloud.kubeconfig(tmp)``; ``cloud.folders`` and ``cloud.accounts`` hold the state.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kube_rules import send_json

PROJECT_NUMBER = "123456"
SERVICE_ACCOUNT_FIELDS = {"apiVersion", "kind", "metadata", "automountServiceAccountToken",
                          "secrets", "imagePullSecrets"}
_GVK = {"group": "", "version": "v1", "kind": "ServiceAccount"}
_OP = {"x-kubernetes-group-version-kind": _GVK, "responses": {"200": {"description": "OK"}},
       "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}]}
_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
OPENAPI_V1 = {
    "openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"},
    "paths": {"/api/v1/namespaces/{namespace}/serviceaccounts": {"post": _OP},
              "/api/v1/namespaces/{namespace}/serviceaccounts/{name}": {"patch": _OP}},
    "components": {"schemas": {
        "io.k8s.api.core.v1.ServiceAccount": {
            "type": "object", "x-kubernetes-group-version-kind": [_GVK],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "metadata": {"allOf": [{"$ref": f"#/components/schemas/{_META}"}]},
                           "automountServiceAccountToken": {"type": "boolean"},
                           "secrets": {"type": "array", "items": {"type": "object"}},
                           "imagePullSecrets": {"type": "array", "items": {"type": "object"}}}},
        _META: {"type": "object", "properties": {
            key: {"type": "string"} for key in ("name", "namespace", "resourceVersion", "uid",
                                                "creationTimestamp")} | {
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}}},
}


def _merge(into: dict, patch: dict) -> dict:
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


class LoopbackCloud:
    """The stand-in server and its state."""

    def __init__(self, namespaces: tuple[str, ...] = ("jhub", "team-a")) -> None:
        self.namespaces = set(namespaces)
        self.folders: dict[str, dict] = {}  # "gs://bucket/name" -> IAM policy
        self.accounts: dict[str, dict] = {}  # "namespace/name" -> ServiceAccount
        self.requests: list[str] = []
        cloud = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _handle(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size) or b"null") if size else None
                url = urllib.parse.urlsplit(self.path)
                cloud.requests.append(f"{self.command} {url.path}")
                send_json(self, *cloud.answer(self.command, url.path, body))

            do_GET = do_POST = do_PUT = do_PATCH = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> LoopbackCloud:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- what the tools are pointed with -------------------------------------------------------
    def gcloud_env(self, tmp: Path) -> dict[str, str]:
        """The Google Cloud CLI against this server only: its own config dir, a dummy token,
        every endpoint the scripts use overridden, no usage reporting, update check or GCE
        metadata probe."""
        (tmp / "token").write_text("dummy-token\n")
        return {"CLOUDSDK_CONFIG": str(tmp / "gcloud"),
                "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE": str(tmp / "token"),
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE": f"{self.url}/",
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDRESOURCEMANAGER": f"{self.url}/",
                "CLOUDSDK_API_ENDPOINT_OVERRIDES_IAM": f"{self.url}/",
                "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "1",
                "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1",
                "CLOUDSDK_CORE_CHECK_GCE_METADATA": "false",
                "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}

    def kubeconfig(self, tmp: Path) -> dict[str, str]:
        """``KUBECONFIG`` naming this server (as ``kubectl --server=URL``), no credentials."""
        path = tmp / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "loopback",
            "clusters": [{"name": "loopback", "cluster": {"server": self.url}}],
            "users": [{"name": "admin", "user": {}}],
            "contexts": [{"name": "loopback", "context": {"cluster": "loopback",
                                                          "user": "admin"}}]}))
        return {"KUBECONFIG": str(path)}

    # -- the APIs ----------------------------------------------------------------------------
    def answer(self, method: str, path: str, body: object) -> tuple[int, object]:
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["v1", "projects"] and len(parts) == 3 and method == "GET":
            return 200, {"projectId": parts[2], "projectNumber": PROJECT_NUMBER,
                         "lifecycleState": "ACTIVE", "name": parts[2]}
        if parts[:2] == ["storage", "v1"]:
            return self._storage(method, parts[2:], body)
        return self._kube(method, path, parts, body)

    def _storage(self, method: str, parts: list[str], body: object) -> tuple[int, object]:
        if parts[:1] != ["b"] or parts[2:3] != ["managedFolders"]:
            return _gcs_error(404, "not served here")
        bucket = parts[1]
        if len(parts) == 3 and method == "POST":
            key = f"gs://{bucket}/{body['name']}"
            if key in self.folders:
                return _gcs_error(409, "The managed folder you tried to create already exists.")
            self.folders[key] = {"kind": "storage#policy", "bindings": [], "etag": "CAE="}
            return 200, {"kind": "storage#managedFolder", "bucket": bucket,
                         "name": body["name"], "metageneration": "1"}
        key = f"gs://{bucket}/{parts[3]}" if len(parts) > 3 else ""
        if key not in self.folders:
            return _gcs_error(404, f"The managed folder {key} does not exist.")
        if parts[4:] == ["iam"] and method == "GET":
            return 200, self.folders[key]
        if parts[4:] == ["iam"] and method == "PUT":
            self.folders[key] = {**body, "kind": "storage#policy", "etag": "CAI="}
            return 200, self.folders[key]
        return _gcs_error(400, f"{method} not served here")

    def _kube(self, method: str, path: str, parts: list[str],
              body: object) -> tuple[int, object]:
        static = {
            "/version": {"major": "1", "minor": "32", "gitVersion": "v1.32.0"},
            "/openapi/v3": {"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1"}}},
            "/openapi/v3/api/v1": OPENAPI_V1,
            "/api": {"kind": "APIVersions", "versions": ["v1"],
                     "serverAddressByClientCIDRs": []},
            "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
            "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "serviceaccounts", "singularName": "serviceaccount", "namespaced": True,
                 "kind": "ServiceAccount", "shortNames": ["sa"],
                 "verbs": ["create", "get", "list", "patch", "update"]}]},
        }
        if method == "GET" and path in static:
            return 200, static[path]
        if parts[:3] != ["api", "v1", "namespaces"] or len(parts) < 4:
            return _kube_error(404, "NotFound", "not served here")
        namespace = parts[3]
        if namespace not in self.namespaces:
            return _kube_error(404, "NotFound", f'namespaces "{namespace}" not found')
        if len(parts) == 4 and method == "GET":
            return 200, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        if parts[4:5] != ["serviceaccounts"]:
            return _kube_error(404, "NotFound", "not served here")
        if isinstance(body, dict) and (unknown := set(body) - SERVICE_ACCOUNT_FIELDS):
            return _kube_error(422, "Invalid", f"unknown field {sorted(unknown)}")
        if len(parts) == 5 and method == "POST":
            key = f"{namespace}/{body['metadata']['name']}"
            if key in self.accounts:
                return _kube_error(409, "AlreadyExists", f'serviceaccounts "{key}" already exists')
            self.accounts[key] = _merge({"metadata": {"namespace": namespace, "uid": key,
                                                      "resourceVersion": "1"}}, body)
            return 201, self.accounts[key]
        key = f"{namespace}/{parts[5]}" if len(parts) == 6 else ""
        if key not in self.accounts:
            return _kube_error(404, "NotFound", f'serviceaccounts "{parts[-1]}" not found')
        if method == "GET":
            return 200, self.accounts[key]
        if method == "PATCH":
            return 200, _merge(self.accounts[key], body)
        return _kube_error(405, "MethodNotAllowed", method)


def _gcs_error(code: int, message: str) -> tuple[int, dict]:
    return code, {"error": {"code": code, "message": message,
                            "errors": [{"message": message, "reason": "notFound"}]}}


def _kube_error(code: int, reason: str, message: str) -> tuple[int, dict]:
    return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                  "reason": reason, "message": message}
