"""A CRD schema as the API server applies it to stored objects, for jsonschema checks."""

from __future__ import annotations

from typing import Any


def closed(node: Any) -> Any:
    """The schema with ``additionalProperties: false`` wherever the API server prunes
    undeclared fields (objects that neither declare ``additionalProperties`` nor preserve
    unknown fields), and without the CEL rules (``x-kubernetes-validations``), which
    jsonschema does not evaluate."""
    if isinstance(node, dict):
        out = {k: closed(v) for k, v in node.items() if k != "x-kubernetes-validations"}
        if (
            node.get("type") == "object"
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    return [closed(v) for v in node] if isinstance(node, list) else node
