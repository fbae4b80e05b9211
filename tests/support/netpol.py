"""A NetworkPolicy evaluator for tests: does a policy admit a peer to a port?

Follows the Kubernetes semantics the operator's policies use (networking.k8s.io/v1):
a peer with only ``podSelector`` matches pods of the policy's namespace; with
``namespaceSelector`` too, pods of the matching namespaces; a rule without ``from``
admits every source, one without ``ports`` every port; ``matchLabels`` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Peer:
    """A source pod: its labels, namespace and that namespace's labels."""

    labels: dict[str, str]
    namespace: str
    namespace_labels: dict[str, str] = field(default_factory=dict)


def _match(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    want = (selector or {}).get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in want.items())


def selects(policy: dict[str, Any], pod_labels: dict[str, str]) -> bool:
    return _match(policy["spec"]["podSelector"], pod_labels)


def admits(policy: dict[str, Any], peer: Peer, port: int, protocol: str = "TCP") -> bool:
    """Whether ingress from ``peer`` to ``port`` of a selected pod is allowed."""
    ns = policy["metadata"]["namespace"]
    for rule in policy["spec"].get("ingress") or []:
        ports = rule.get("ports")
        if ports is not None and not any(
            p.get("port") == port and p.get("protocol", "TCP") == protocol for p in ports
        ):
            continue
        sources = rule.get("from")
        if sources is None:
            return True
        for src in sources:
            if "namespaceSelector" in src:
                ns_ok = _match(src["namespaceSelector"], peer.namespace_labels)
            else:
                ns_ok = peer.namespace == ns
            if ns_ok and _match(src.get("podSelector"), peer.labels):
                return True
    return False
