"""NetworkPolicy semantics (networking.k8s.io/v1) for tests: may `src` open a connection to
`dst` on a port, given every policy in the cluster? Small enough to check against the
Kubernetes documentation by reading:

- a pod selected by no policy of a type (Ingress/Egress) is unrestricted in that direction;
  a selected one allows only what some rule of those policies allows (policies add up);
- a connection needs the source's egress and the destination's ingress to allow it;
- a peer is a podSelector (the policy's namespace), a namespaceSelector (all pods there),
  both (those pods in those namespaces), or an ipBlock (cidr minus except);
- a rule without ports allows every port; one without peers allows every peer.

ipBlocks are matched against every address, pods' included: some CNIs do so and some do not,
so for a test that proves a denial this is the stricter assumption.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
NAMESPACE_NAME = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Endpoint:
    name: str
    ip: str
    namespace: str | None = None  # None: outside the cluster
    labels: dict[str, str] = field(default_factory=dict)


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        inside = key in labels and labels[key] in values
        ok = {"In": inside, "NotIn": not inside, "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


class Cluster:
    def __init__(self, policies: list[Obj], namespaces: dict[str, dict[str, str]]):
        self.policies = policies
        # The API server labels every namespace with its name (Kubernetes 1.21+).
        self.namespaces = {n: {**labels, NAMESPACE_NAME: n} for n, labels in namespaces.items()}

    def _peer(self, peer: Obj, policy_ns: str, ep: Endpoint) -> bool:
        if "ipBlock" in peer:
            ip = ipaddress.ip_address(ep.ip)
            block = ipaddress.ip_network(peer["ipBlock"]["cidr"])
            if ip.version != block.version or ip not in block:
                return False
            return not any(ip.version == ipaddress.ip_network(c).version and ip in ipaddress.ip_network(c)
                           for c in peer["ipBlock"].get("except") or [])
        if ep.namespace is None:
            return False
        if "namespaceSelector" in peer:
            in_ns = selects(peer["namespaceSelector"], self.namespaces[ep.namespace])
        else:
            in_ns = ep.namespace == policy_ns
        return in_ns and selects(peer.get("podSelector") or {}, ep.labels)

    @staticmethod
    def _types(policy: Obj) -> list[str]:
        spec = policy["spec"]
        return spec.get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in spec else []))

    def _allows(self, kind: str, subject: Endpoint, other: Endpoint, port: int, protocol: str) -> bool:
        if subject.namespace is None:
            return True  # outside the cluster: no policy applies
        rules_key, peers_key = ("ingress", "from") if kind == "Ingress" else ("egress", "to")
        applicable = [p for p in self.policies if p["metadata"]["namespace"] == subject.namespace
                      and kind in self._types(p) and selects(p["spec"]["podSelector"], subject.labels)]
        if not applicable:
            return True
        for policy in applicable:
            for rule in policy["spec"].get(rules_key) or []:
                ports = rule.get("ports")
                if ports and not any(p.get("protocol", "TCP") == protocol and p.get("port") in (None, port)
                                     for p in ports):
                    continue
                peers = rule.get(peers_key)
                if not peers or any(self._peer(peer, policy["metadata"]["namespace"], other) for peer in peers):
                    return True
        return False

    def can_connect(self, src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP") -> bool:
        return (self._allows("Egress", src, dst, port, protocol)
                and self._allows("Ingress", dst, src, port, protocol))
