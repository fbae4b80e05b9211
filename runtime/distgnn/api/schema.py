"""OpenAPI v3 structural schemas and CRDs built from the API types.

Every string has a ``maxLength``, every list a ``maxItems``, every map a
``maxProperties``; rules become ``x-kubernetes-validations`` (CEL) whose Python
twins run in :mod:`distgnn.api.validate`.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from distgnn import contract
from distgnn.api import types as t
from distgnn.api.fields import (
    DNS_1035_LABEL,
    QUANTITY,
    Meta,
    Quantity,
    default_of,
    has_default,
    json_name,
    meta_of,
    url_pattern,
)
from distgnn.api.validate import JOB_NAME_MAX, hints, to_dict, unwrap


def _scalar(tp: Any, m: Meta) -> dict[str, Any]:
    if tp is Quantity:
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "maxLength": m.max_length,
            "pattern": QUANTITY,
        }
    if tp is str:
        s: dict[str, Any] = {"type": "string", "maxLength": m.max_length}
        if m.enum is not None:
            s["enum"] = list(m.enum)
        if m.min_length is not None:
            s["minLength"] = m.min_length
        if m.pattern is not None:
            s["pattern"] = m.pattern
        elif m.schemes is not None:
            s["pattern"] = url_pattern(m.schemes)
        if m.fmt is not None:
            s["format"] = m.fmt
        return s
    if tp is bool:
        return {"type": "boolean"}
    if tp is int or tp is float:
        s = {"type": "integer" if tp is int else "number"}
        if tp is int:
            s["format"] = "int64" if (m.maximum or 0) > 2**31 - 1 else "int32"
        if m.minimum is not None:
            s["minimum"] = m.minimum if tp is float else int(m.minimum)
            if m.exclusive_minimum:
                s["exclusiveMinimum"] = True
        if m.maximum is not None:
            s["maximum"] = m.maximum if tp is float else int(m.maximum)
            if m.exclusive_maximum:
                s["exclusiveMaximum"] = True
        return s
    raise TypeError(f"unsupported field type {tp}")


def _value(tp: Any, m: Meta) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return object_schema(tp)
    if origin is list:
        (item,) = typing.get_args(tp)
        s: dict[str, Any] = {
            "type": "array",
            "maxItems": m.max_items,
            "items": _value(item, m.for_items()),
        }
        if m.min_items is not None:
            s["minItems"] = m.min_items
        return s
    if origin is dict:
        _, val = typing.get_args(tp)
        if m.preserve_unknown:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {
            "type": "object",
            "maxProperties": m.max_items,
            "additionalProperties": _value(val, m.for_items()),
        }
    return _scalar(tp, m)


def _doc(m: Meta) -> str:
    if m.schemes is None:
        return m.doc
    urls = ["file:///" if x == "file" else f"{x}://" for x in m.schemes]
    listed = ", ".join(urls[:-1]) + " or " + urls[-1] if len(urls) > 1 else urls[0]
    return f"{m.doc} In a cluster the URL is {listed}; local mode also takes a path."


def object_schema(cls: Any) -> dict[str, Any]:
    """Structural schema of a dataclass type, with defaults and CEL rules."""
    props: dict[str, Any] = {}
    required: list[str] = []
    th = hints(cls)
    for f in dataclasses.fields(cls):
        m = meta_of(f)
        tp, _ = unwrap(th[f.name])
        s = _value(tp, m)
        s = {"description": _doc(m), **s}
        if has_default(f):
            d = default_of(f)
            if d is not None:
                s["default"] = to_dict(d)
        else:
            required.append(json_name(f))
        props[json_name(f)] = s
    out: dict[str, Any] = {
        "type": "object",
        "description": (cls.__doc__ or "").strip(),
        "properties": props,
    }
    if required:
        out["required"] = required
    rules = [r for r in getattr(cls, "RULES", ()) if r.cel]  # "": checked when parsed
    if rules:
        out["x-kubernetes-validations"] = [_rule(r) for r in rules]
    return out


def _rule(r: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"rule": r.cel, "message": r.message}
    if r.field:
        d["fieldPath"] = f".{r.field}"
    return d


def resource_schema(spec_cls: Any, status_cls: Any) -> dict[str, Any]:
    """openAPIV3Schema of a whole custom resource."""
    return {
        "type": "object",
        "description": (spec_cls.__doc__ or "").strip(),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "maxLength": 64},
            "kind": {"type": "string", "maxLength": 64},
            "metadata": {"type": "object"},
            "spec": object_schema(spec_cls),
            "status": object_schema(status_cls),
        },
        "x-kubernetes-validations": [
            {
                "rule": f"size(self.metadata.name) <= {JOB_NAME_MAX}",
                "message": f"metadata.name must be at most {JOB_NAME_MAX} characters",
            },
            {
                # the API server takes any DNS subdomain as a name, but the Services named
                # after the resource must be RFC 1035 labels (no dots, a letter first)
                "rule": f"self.metadata.name.matches('{DNS_1035_LABEL}')",
                "message": "metadata.name must start with a letter and hold only lower-case "
                "letters, digits and '-' (its Services are named after it)",
            },
        ],
    }


def _col(
    name: str, path: str, typ: str = "string", desc: str = "", priority: int = 0
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "type": typ, "jsonPath": path, "description": desc}
    if priority:
        c["priority"] = priority
    return c


def _crd(
    kind: str, plural: str, short: str, schema: dict[str, Any], cols: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{contract.API_GROUP}",
            "labels": {"app.kubernetes.io/name": "distgnn", "app.kubernetes.io/part-of": "distgnn"},
        },
        "spec": {
            "group": contract.API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": ["distgnn"],
            },
            "versions": [
                {
                    "name": contract.API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        *cols,
                        _col("Age", ".metadata.creationTimestamp", "date"),
                    ],
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def job_crd() -> dict[str, Any]:
    """The DistGNNJob CustomResourceDefinition."""
    return _crd(
        "DistGNNJob",
        "distgnnjobs",
        "dgj",
        resource_schema(t.DistGNNJobSpec, t.DistGNNJobStatus),
        [
            _col("Phase", ".status.phase", desc="Summary phase"),
            _col("Partitions", ".status.partitionsReady", "integer", "Graph servers ready"),
            _col("Trainers", ".status.trainers.active", "integer", "Active trainer pods"),
            _col("Epoch", ".status.progress.epoch", desc="Completed epochs of total (rank 0)"),
            _col("Accuracy", ".status.metrics.testAccuracy", "number", "Test accuracy when known"),
            _col(
                "RMSE",
                ".status.metrics.testRmse",
                "number",
                "Test RMSE (node-regression, edge-regression)",
                1,
            ),
            _col("Restarts", ".status.restarts", "integer", "Trainer group restarts", priority=1),
        ],
    )


def graphserver_crd() -> dict[str, Any]:
    """The GraphServer CustomResourceDefinition."""
    return _crd(
        "GraphServer",
        "graphservers",
        "gsv",
        resource_schema(t.GraphServerSpec, t.GraphServerStatus),
        [
            _col("Phase", ".status.phase", desc="Summary phase"),
            _col("Partitions", ".status.partitionsReady", "integer", "Graph servers ready"),
            _col("Parts", ".status.numParts", "integer", "Partitions"),
            _col("Manifest", ".status.manifestURL", desc="Partition manifest", priority=1),
        ],
    )


def crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD object."""
    return {
        f"distgnnjobs.{contract.API_GROUP}.yaml": job_crd(),
        f"graphservers.{contract.API_GROUP}.yaml": graphserver_crd(),
    }
