"""What a Kubernetes API server decides before it stores a Kubeflow object or lets a request
through, for the stand-in in ``tests/test_kubeflow_release.py`` and the manifest checks in
``tests/test_deploy.py``: the served schema of a custom resource (strict field validation, as
``kubectl apply --validate=strict`` and server-side apply use) and RBAC for a service account.

Schemas: ``tests/data/crds/{plural}.{version}.json`` hold each CRD's served
``openAPIV3Schema``, copied from the upstream file named in its ``source`` (descriptions dropped,
nothing else changed). ``check_object`` walks an object against it the way the API server's
structural schema does: an unknown field, a wrong type, a missing required field, a string
outside its length/pattern/enum is an error naming the field's path. CEL rules
(``x-kubernetes-validations``) are not evaluated.

RBAC: ``Rbac`` holds ClusterRoles and the namespaced RoleBindings that bind them to service
accounts, built from what deploy/ ships and what the controllers create:

- Kubeflow v1: the profile controller binds each profile's ``default-editor`` to the
  ``kubeflow-edit`` ClusterRole, which aggregates every ClusterRole labelled
  ``rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit: "true"``
  (kubeflow/kubeflow components/profile-controller/controllers/profile_controller.go);
- Kubeflow v2: the Workspace controller gives each Workspace the service account ``ws-{name}`` and
  one RoleBinding per ClusterRole of its WorkspaceKind's ``spec.podTemplate.serviceAccount.
  clusterRoles``, and no other (kubeflow/notebooks notebooks-v2
  workspaces/controller/internal/controller/workspace_controller.go ``reconcileRoleBindings``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

CRDS = Path(__file__).parent / "data" / "crds"
KUBEFLOW_EDIT_LABEL = "rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit"
# metav1.ObjectMeta's fields: the API server decodes metadata strictly as well.
OBJECT_META = {"name", "generateName", "namespace", "uid", "resourceVersion", "generation",
               "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
               "annotations", "ownerReferences", "finalizers", "managedFields", "selfLink"}


# What Kubeflow v1 itself aggregates into kubeflow-edit for Notebooks (kubeflow/notebooks
# notebooks-v1 components/notebook-controller/config/rbac/user_cluster_roles.yaml).
KUBEFLOW_NOTEBOOKS_EDIT = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": "kubeflow-notebooks-edit", "labels": {KUBEFLOW_EDIT_LABEL: "true"}},
    "rules": [{"apiGroups": ["kubeflow.org"], "resources": ["notebooks", "notebooks/status"],
               "verbs": ["get", "list", "watch", "create", "delete", "deletecollection", "patch",
                         "update"]}],
}


def send_json(handler, code: int, payload) -> None:
    """Answer an ``http.server`` request as the API servers do: ``payload`` as JSON, its length
    given (the stand-ins' one way to reply)."""
    data = json.dumps(payload).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class Invalid(ValueError):
    """The object does not match the served schema; the message names every bad field."""


def served_schema(plural: str, version: str) -> dict:
    return json.loads((CRDS / f"{plural}.{version}.json").read_text())


def schema_for(obj: dict) -> dict:
    """The served schema of ``obj``'s apiVersion and kind (KeyError: not one we serve)."""
    for path in CRDS.glob("*.json"):
        crd = json.loads(path.read_text())
        if obj.get("apiVersion") == f"{crd['group']}/{crd['version']}" and obj.get(
                "kind") == crd["kind"]:
            return crd
    raise KeyError(f"{obj.get('apiVersion')} {obj.get('kind')}: no served schema here")


def check_object(obj: dict, crd: dict | None = None) -> None:
    """Raise ``Invalid`` naming every field of ``obj`` its served schema does not allow."""
    crd = crd or schema_for(obj)
    errors: list[str] = []
    # status belongs to the status subresource (Notebook, Workspace, WorkspaceKind): the server
    # drops it on create and on updates of the main resource, so it is not validated here
    # apiVersion, kind and metadata are implicit in every structural schema (some CRDs, e.g.
    # Istio's, leave them out of their openAPIV3Schema)
    root = crd["openAPIV3Schema"]
    root = {**root, "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                   "metadata": {"type": "object"}, **root.get("properties", {})}}
    _walk({k: v for k, v in obj.items() if k != "status"}, root, "", errors)
    unknown_meta = sorted(set(obj.get("metadata") or {}) - OBJECT_META)
    errors += [f'unknown field "metadata.{k}"' for k in unknown_meta]
    if errors:
        raise Invalid(f"{crd['kind']}.{crd['group']} is invalid: " + "; ".join(errors))


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "number": (int, float)}


def _walk(value, schema: dict, path: str, errors: list[str]) -> None:
    where = path or "<root>"
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            errors.append(f"{where}: must be an integer or a string")
        return
    kind = schema.get("type")
    if kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append(f"{where}: must be an integer")
        return
    if kind in _TYPES and (not isinstance(value, _TYPES[kind]) or (
            kind == "number" and isinstance(value, bool))):
        errors.append(f"{where}: must be {kind}")
        return
    if isinstance(value, str):
        if "enum" in schema and value not in schema["enum"]:
            errors.append(f"{where}: must be one of {schema['enum']}")
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 1e9):
            errors.append(f"{where}: length {len(value)} out of range")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: does not match {schema['pattern']}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk(item, schema.get("items", {}), f"{path}[{i}]", errors)
    elif isinstance(value, dict) and path != "metadata":
        errors += [f'{where}: missing required field "{k}"' for k in schema.get("required", ())
                   if k not in value]
        props, extra = schema.get("properties"), schema.get("additionalProperties")
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if props is not None and key in props:
                _walk(item, props[key], sub, errors)
            elif isinstance(extra, dict):
                _walk(item, extra, sub, errors)
            elif props is not None or extra is False:
                errors.append(f'unknown field "{sub}"')


@dataclass
class Rbac:
    """ClusterRoles by name, and RoleBindings as (namespace, service account, ClusterRole)."""

    cluster_roles: dict[str, list[dict]] = field(default_factory=dict)
    bindings: set[tuple[str, str, str]] = field(default_factory=set)

    def add_cluster_role(self, role: dict) -> None:
        """A ClusterRole from deploy/; one labelled for kubeflow-edit also joins that role."""
        self.cluster_roles[role["metadata"]["name"]] = list(role["rules"])
        if role["metadata"].get("labels", {}).get(KUBEFLOW_EDIT_LABEL) == "true":
            self.cluster_roles.setdefault("kubeflow-edit", []).extend(role["rules"])

    def add_profile(self, namespace: str) -> None:
        """What the profile controller binds in a profile namespace."""
        self.bindings.add((namespace, "default-editor", "kubeflow-edit"))

    def add_workspace(self, namespace: str, name: str, workspace_kind: dict) -> str:
        """What the Workspace controller binds for one Workspace; returns its service account."""
        account = f"ws-{name}"
        roles = workspace_kind["spec"]["podTemplate"].get("serviceAccount", {}).get(
            "clusterRoles", [])
        self.bindings.update((namespace, account, r["name"]) for r in roles)
        return account

    def allows(self, namespace: str, account: str, verb: str, group: str, plural: str) -> bool:
        """Whether ``system:serviceaccount:{namespace}:{account}`` may ``verb`` ``plural``."""
        return self.allowing_role(namespace, account, verb, group, plural) is not None

    def allowing_role(self, namespace: str, account: str, verb: str, group: str,
                      plural: str) -> str | None:
        """The first bound ClusterRole that lets the account ``verb`` ``plural``, or None."""
        for ns, sa, role in sorted(self.bindings):
            if ns == namespace and sa == account and any(
                    _matches(rule, verb, group, plural) for rule in self.cluster_roles.get(role, ())):
                return role
        return None


def _matches(rule: dict, verb: str, group: str, plural: str) -> bool:
    return all(want in rule.get(key, ()) or "*" in rule.get(key, ())
               for key, want in (("verbs", verb), ("apiGroups", group), ("resources", plural)))


# -- the Kubeflow PodDefault admission webhook ---------------------------------------------------
class PodDefaultConflict(ValueError):
    """The webhook rejects the pod ("conflict occurred while applying poddefaults")."""


def apply_pod_defaults(pod_spec: dict, annotations: dict[str, str],
                       pod_defaults: list[dict]) -> tuple[dict, dict[str, str]]:
    """What the admission webhook makes of a pod that ``pod_defaults`` select: kubeflow/kubeflow
    v1.10-branch components/admission-webhook/main.go ``safeToApplyPodDefaultsOnPod`` then
    ``applyPodDefaultsOnPod``. An env entry, volume or mount (by name; mounts also by path) or
    an annotation the pod already has must be identical (``reflect.DeepEqual``), else the pod
    is rejected; missing ones are appended in order. Returns the new spec and annotations."""
    errors: list[str] = []

    def merge(have: list[dict], keys: tuple[str, ...], field: str) -> list[dict]:
        out = [dict(item) for item in have]
        for pd in pod_defaults:
            for item in pd["spec"].get(field, ()):
                found = [o for o in out if any(o.get(k) == item.get(k) for k in keys)]
                if not found:
                    out.append(item)
                elif any(o != item for o in found):
                    errors.append(f"merging {field} for {pd['metadata']['name']} has a conflict "
                                  f"on {item.get(keys[0])}")
        return out

    spec = dict(pod_spec)
    spec["volumes"] = merge(pod_spec.get("volumes", []), ("name",), "volumes")
    spec["containers"] = []
    for container in pod_spec["containers"]:
        container = dict(container)
        container["env"] = merge(container.get("env", []), ("name",), "env")
        container["volumeMounts"] = merge(container.get("volumeMounts", []),
                                          ("name", "mountPath"), "volumeMounts")
        spec["containers"].append(container)
    merged = dict(annotations)
    for pd in pod_defaults:
        for key, value in pd["spec"].get("annotations", {}).items():
            if merged.setdefault(key, value) != value:
                errors.append(f"merging has conflict on {key}")
    if errors:
        raise PodDefaultConflict("; ".join(errors))
    return spec, merged
