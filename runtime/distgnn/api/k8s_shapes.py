"""Known fields of the Kubernetes types a manifest passes through free-form (``affinity``).

The CRD keeps ``podTemplate.affinity`` free-form (``x-kubernetes-preserve-unknown-fields``),
so the API server would store a misspelt key in a DistGNNJob, then prune it from the pods
the operator builds, and the operator would re-send it on every pass. :func:`check` refuses
such a key (and a value of the wrong kind) when the manifest is parsed, naming its path:
the operator reports it in the status, local mode exits with it.

A shape is a mapping of field name to shape; ``[shape]`` is a list of it; a leaf is one
of ``"str"``, ``"int"``, ``"strs"`` (a list of strings), ``"strmap"`` (string values).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

_NODE_REQ = {"key": "str", "operator": "str", "values": "strs"}
_NODE_TERM = {"matchExpressions": [_NODE_REQ], "matchFields": [_NODE_REQ]}
_LABEL_SELECTOR = {"matchLabels": "strmap", "matchExpressions": [_NODE_REQ]}
_POD_TERM = {
    "labelSelector": _LABEL_SELECTOR,
    "namespaceSelector": _LABEL_SELECTOR,
    "namespaces": "strs",
    "topologyKey": "str",
    "matchLabelKeys": "strs",
    "mismatchLabelKeys": "strs",
}
_POD_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": [_POD_TERM],
    "preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": "int", "podAffinityTerm": _POD_TERM}
    ],
}
AFFINITY: dict[str, Any] = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [_NODE_TERM]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": "int", "preference": _NODE_TERM}
        ],
    },
    "podAffinity": _POD_AFFINITY,
    "podAntiAffinity": _POD_AFFINITY,
}
"""core/v1 Affinity (Kubernetes 1.31: ``matchLabelKeys``/``mismatchLabelKeys`` included)."""

SHAPES: dict[str, dict[str, Any]] = {"Affinity": AFFINITY}


def _leaf(kind: str, v: Any) -> str | None:
    """Why ``v`` is not a ``kind`` leaf, else None."""
    if kind == "str":
        return None if isinstance(v, str) else "must be a string"
    if kind == "int":
        return None if isinstance(v, int) and not isinstance(v, bool) else "must be an integer"
    if kind == "strs":
        ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
        return None if ok else "must be a list of strings"
    ok = isinstance(v, Mapping) and all(isinstance(x, str) for x in v.values())
    return None if ok else "must be a mapping of strings"


def check(shape_name: str, value: Any, path: str, add: Callable[[str, str], None]) -> None:
    """Report through ``add(path, message)`` every key of ``value`` that the Kubernetes type
    ``shape_name`` does not have, and every value of the wrong kind."""
    type_name = shape_name
    stack: list[tuple[Any, Any, str]] = [(SHAPES[shape_name], value, path)]
    while stack:
        shape, v, p = stack.pop()
        if isinstance(shape, str):
            why = _leaf(shape, v)
            if why:
                add(p, why)
        elif isinstance(shape, list):
            if not isinstance(v, list):
                add(p, "must be a list")
                continue
            stack += [(shape[0], x, f"{p}[{i}]") for i, x in enumerate(v)]
        else:
            if not isinstance(v, Mapping):
                add(p, "must be a mapping")
                continue
            for k, x in v.items():
                if k not in shape:
                    add(f"{p}.{k!s:.64}", f"not a field of Kubernetes' {type_name}")
                    continue
                stack.append((shape[k], x, f"{p}.{k}"))
