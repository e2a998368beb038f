"""RBAC as the API server evaluates it, for the emulated cluster: the roles and bindings of
deploy/kubernetes/rbac.yaml as written, applied to every request the service makes.

Small enough to check against https://kubernetes.io/docs/reference/access-authn-authz/rbac/ by
reading: a request is (verb, API group, resource[/subresource], namespace, name); a ClusterRole
bound by a ClusterRoleBinding grants in every namespace, a Role bound by a RoleBinding only in its
own; a rule matches when its apiGroups, resources and verbs contain the request's (or "*") and,
if it names resourceNames, the request names one of them (so never a list, watch or create).
Discovery (GET /api, /apis/..., /version) is what the default `system:discovery` role grants
every authenticated user.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DEPLOY_RBAC = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "rbac.yaml"
Obj = dict[str, Any]
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


@dataclass(frozen=True)
class Attributes:
    verb: str
    group: str
    resource: str  # "pods" or "pods/log"
    namespace: str | None
    name: str | None

    def __str__(self) -> str:
        where = f' in the namespace "{self.namespace}"' if self.namespace else " at the cluster scope"
        return f'cannot {self.verb} resource "{self.resource}" in API group "{self.group}"{where}'


def attributes(method: str, group: str, plural: str, namespace: str | None, name: str | None,
               subresource: str | None, params: dict[str, str]) -> Attributes:
    """What the API server authorizes a resource request as."""
    method = method.upper()
    if method == "GET":
        verb = "get" if name else ("watch" if params.get("watch") in ("true", "1") else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = VERBS[method]
    resource = f"{plural}/{subresource}" if subresource else plural
    return Attributes(verb, group, resource, namespace, name)


def _grants(rule: Obj, want: Attributes) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    if not (has("apiGroups", want.group) and has("resources", want.resource) and has("verbs", want.verb)):
        return False
    names = rule.get("resourceNames") or []
    return not names or (want.name is not None and want.name in names)


class Authorizer:
    """The permissions of one ServiceAccount under a set of RBAC objects."""

    def __init__(self, documents: list[Obj], namespace: str, account: str):
        self.subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
        roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d.get("rules") or []
                 for d in documents if d["kind"] in ("ClusterRole", "Role")}
        # (namespace the grant is limited to, or None for every namespace, rules)
        self.grants: list[tuple[str | None, list[Obj]]] = []
        for d in documents:
            if d["kind"] not in ("ClusterRoleBinding", "RoleBinding") or not self._binds(d):
                continue
            ref, bound_ns = d["roleRef"], d["metadata"].get("namespace")
            role_ns = None if ref["kind"] == "ClusterRole" else bound_ns
            rules = roles.get((ref["kind"], role_ns, ref["name"]), [])
            self.grants.append((bound_ns if d["kind"] == "RoleBinding" else None, rules))

    @classmethod
    def from_deploy(cls, path: Path = DEPLOY_RBAC) -> Authorizer:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        account = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]
        return cls(docs, account["namespace"], account["name"])

    def _binds(self, binding: Obj) -> bool:
        return any(s.get("kind") == "ServiceAccount" and s.get("name") == self.subject["name"]
                   and s.get("namespace") == self.subject["namespace"] for s in binding.get("subjects") or [])

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.subject['namespace']}:{self.subject['name']}"

    def allows(self, want: Attributes) -> bool:
        for limited_to, rules in self.grants:
            if limited_to is not None and want.namespace != limited_to:
                continue
            if any(_grants(rule, want) for rule in rules):
                return True
        return False
