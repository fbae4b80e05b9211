"""Parse and validate manifests against the API types (defaults applied).

The checks mirror the CRD schema built from the same field metadata: types, enums,
bounds, required fields, unknown fields and the rules' Python equivalents. Errors
name the field path, e.g. ``spec.trainers.replicas: must be >= 1``.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from distgnn import contract
from distgnn.api import k8s_shapes
from distgnn.api import types as t
from distgnn.api.fields import (
    DNS_1035_LABEL,
    DNS_LABEL,
    QUANTITY,
    Meta,
    Quantity,
    default_of,
    has_default,
    json_name,
    meta_of,
    scheme_problem,
)
from distgnn.api.manifest_yaml import MAX_DEPTH, MAX_NODES, short
from distgnn.errors import ConfigError

MAX_ERRORS = 8
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
"""NUL and lone surrogates: never valid in a name, URL or command."""
JOB_NAME_MAX = 40
"""Job names are short enough for every child name (``NAME-server-1023``) to be a DNS label."""


def unwrap(tp: Any) -> tuple[Any, bool]:
    """(type without ``None``, whether it was optional)."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {tp}")
        return args[0], True
    return tp, False


def _key(k: Any) -> str:
    """A field name as written when short and printable, else a bounded repr."""
    if isinstance(k, str) and len(k) <= 64 and k.isprintable():
        return k
    return short(k, 40)


def hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


class _Errors:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, msg: str) -> None:
        self.items.append(f"{path}: {msg}")


def _check_scalar(tp: Any, m: Meta, v: Any, path: str, errs: _Errors) -> Any:
    if tp is Quantity:
        if isinstance(v, bool) or not isinstance(v, int | str):
            errs.add(path, "must be a quantity (integer or string like 500m, 2Gi)")
            return v
        if isinstance(v, str) and (len(v) > m.max_length or not re.match(QUANTITY, v)):
            errs.add(path, f"{short(v)} is not a quantity (like 500m, 2Gi)")
        return v
    if tp is str:
        if not isinstance(v, str):
            errs.add(path, "must be a string")
            return v
        if _BAD_CHARS.search(v):
            errs.add(path, "must not contain NUL or unpaired surrogate characters")
            return v
        if m.enum is not None and v not in m.enum:
            errs.add(path, f"must be one of {', '.join(m.enum)} (got {short(v)})")
        if len(v) > m.max_length:
            errs.add(path, f"must be at most {m.max_length} characters")
        if m.min_length is not None and len(v) < m.min_length:
            errs.add(
                path,
                "must not be empty"
                if m.min_length == 1
                else f"must be at least {m.min_length} characters",
            )
        if m.pattern is not None and not re.match(m.pattern, v):
            errs.add(path, f"{short(v)} does not match {m.pattern}")
        problem = scheme_problem(m, v)
        if problem is not None:
            errs.add(path, problem)
        return v
    if tp is bool:
        if not isinstance(v, bool):
            errs.add(path, "must be true or false")
        return v
    if tp is int or tp is float:
        ok = isinstance(v, int) if tp is int else isinstance(v, int | float)
        if isinstance(v, bool) or not ok:
            errs.add(path, "must be an integer" if tp is int else "must be a number")
            return v
        if isinstance(v, float) and not math.isfinite(v):
            errs.add(path, f"must be a finite number (got {v})")
            return v
        if m.minimum is not None:
            if m.exclusive_minimum and v <= m.minimum:
                errs.add(path, f"must be > {m.minimum:g}")
            elif v < m.minimum:
                errs.add(path, f"must be >= {m.minimum:g}")
        why = f" ({m.hint})" if m.hint else ""
        if m.maximum is not None:
            if m.exclusive_maximum and v >= m.maximum:
                errs.add(path, f"must be < {m.maximum:g}{why}")
            elif v > m.maximum:
                errs.add(path, f"must be <= {m.maximum:g}{why}")
        return float(v) if tp is float else v
    raise TypeError(f"unsupported field type {tp}")


def _load_value(tp: Any, m: Meta, v: Any, path: str, errs: _Errors) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return load(tp, v, path, errs)
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(v, list):
            errs.add(path, "must be a list")
            return v
        if len(v) > m.max_items:
            errs.add(path, f"must have at most {m.max_items} items")
        if m.min_items is not None and len(v) < m.min_items:
            errs.add(path, f"must have at least {m.min_items} item(s)")
        return [_load_value(item, m.for_items(), x, f"{path}[{i}]", errs) for i, x in enumerate(v)]
    if origin is dict:
        _, val = typing.get_args(tp)
        if not isinstance(v, Mapping):
            errs.add(path, "must be a mapping")
            return v
        if m.preserve_unknown:
            if m.shape is not None:
                k8s_shapes.check(m.shape, v, path, errs.add)
            return copy.deepcopy(dict(v))
        if len(v) > m.max_items:
            errs.add(path, f"must have at most {m.max_items} entries")
        out = {}
        for k, x in v.items():
            if not isinstance(k, str) or not k or len(k) > 253 or _BAD_CHARS.search(k):
                errs.add(path, f"key {short(k)} must be a non-empty string of <= 253 characters")
                continue
            problem = _key_problem(m, k)
            if problem:
                errs.add(path, f"key {short(k)} {problem}")
                continue
            out[k] = _load_value(val, m.for_items(), x, f"{path}.{k}", errs)
        return out
    return _check_scalar(tp, m, v, path, errs)


def _key_problem(m: Meta, k: str) -> str | None:
    """Why map key ``k`` is refused by ``m.keys`` (a Kubernetes label or annotation key),
    else None. The API server would refuse the pods' StatefulSet or Job on every pass."""
    if m.keys is None:
        return None
    prefix, _, name = k.rpartition("/")
    if re.match(m.keys, k) and len(prefix) <= 253:
        return None
    return (
        "must be a Kubernetes label or annotation key: an optional DNS subdomain prefix "
        "and '/', then a name of at most 63 characters (letters, digits, '-', '_', '.'; "
        f"got {short(name)})"
    )


def _closest(key: Any, names: Mapping[str, Any]) -> str | None:
    """The known field a mistyped ``key`` most likely meant: the same name in another
    case or spelling (``num_parts``, ``NumParts`` -> ``numParts``), else a close one."""
    if not isinstance(key, str):
        return None
    flat = {n.lower(): n for n in names}
    same = flat.get(key.replace("_", "").replace("-", "").lower())
    if same:
        return same
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.75)
    return close[0] if close else None


def load(cls: Any, obj: Any, path: str, errs: _Errors) -> Any:
    """Build dataclass ``cls`` from a camelCase mapping, applying defaults and checks."""
    if not isinstance(obj, Mapping):
        errs.add(path, "must be a mapping")
        return None
    fields = dataclasses.fields(cls)
    names = {json_name(f): f for f in fields}
    for k in obj:
        if k not in names:
            mean = _closest(k, names)
            hint = f"did you mean {mean!r}? " if mean else ""
            errs.add(
                f"{path}.{_key(k)}", f"unknown field ({hint}known: {', '.join(sorted(names))})"
            )
    th = hints(cls)
    n_before = len(errs.items)
    kwargs: dict[str, Any] = {}
    for jn, f in names.items():
        m = meta_of(f)
        tp, _ = unwrap(th[f.name])
        sub = f"{path}.{jn}"
        if jn not in obj or obj[jn] is None:
            if has_default(f):
                kwargs[f.name] = default_of(f)
            else:
                errs.add(sub, "is required")
                kwargs[f.name] = None
            continue
        kwargs[f.name] = _load_value(tp, m, obj[jn], sub, errs)
    try:
        inst = cls(**kwargs)
    except TypeError as e:  # pragma: no cover - all fields are passed
        errs.add(path, str(e))
        return None
    if len(errs.items) == n_before:
        for rule in getattr(cls, "RULES", ()):
            if rule.check is not None and not rule.check(inst):
                errs.add(f"{path}.{rule.field}" if rule.field else path, rule.message)
    return inst


def _str_map(md: Mapping[str, Any], key: str, max_value: int, errs: _Errors) -> dict[str, str]:
    """``metadata.labels`` / ``annotations``: a mapping of strings to strings, or absent."""
    v = md.get(key)
    if v is None:
        return {}
    path = f"metadata.{key}"
    if not isinstance(v, Mapping):
        errs.add(path, "must be a mapping of strings to strings")
        return {}
    if len(v) > 256:
        errs.add(path, "must have at most 256 entries")
        return {}
    out: dict[str, str] = {}
    for k, x in v.items():
        if not isinstance(k, str) or not k or len(k) > 253 or _BAD_CHARS.search(k):
            errs.add(path, f"key {short(k)} must be a non-empty string of <= 253 characters")
        elif not isinstance(x, str) or len(x) > max_value or _BAD_CHARS.search(x):
            errs.add(f"{path}.{k}", f"must be a string of <= {max_value} characters")
        else:
            out[k] = x
    return out


def _metadata(obj: Mapping[str, Any], errs: _Errors) -> t.ObjectMeta:
    md = obj.get("metadata")
    if not isinstance(md, Mapping):
        errs.add("metadata", "must be a mapping with a name")
        md = {}
    name = md.get("name")
    if not isinstance(name, str) or not name:
        errs.add("metadata.name", "is required")
        name = ""
    elif len(name) > JOB_NAME_MAX or not re.match(DNS_1035_LABEL, name):
        errs.add(
            "metadata.name",
            f"{short(name)} must be a DNS label of at most {JOB_NAME_MAX} "
            "characters (lower-case letters, digits, '-') starting with a letter "
            "(its Services are named after it)",
        )
    ns = md.get("namespace")
    if ns is None:
        ns = "default"
    elif not isinstance(ns, str) or not re.match(DNS_LABEL, ns) or len(ns) > 63:
        errs.add("metadata.namespace", f"{short(ns)} must be a DNS label")
        ns = "default"
    uid = md.get("uid")
    if uid is not None and (not isinstance(uid, str) or len(uid) > 128 or _BAD_CHARS.search(uid)):
        errs.add("metadata.uid", "must be a string of <= 128 characters")
        uid = None
    gen = md.get("generation")
    return t.ObjectMeta(
        name=name,
        namespace=ns,
        uid=uid or "",
        generation=gen if isinstance(gen, int) and not isinstance(gen, bool) else 0,
        labels=_str_map(md, "labels", 63, errs),
        annotations=_str_map(md, "annotations", 256 * 1024, errs),
    )


def check_bounds(obj: Any, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> None:
    """Refuse a document nested deeper than ``max_depth`` or holding more than ``max_nodes``
    values (shared sub-objects counted each time): an iterative walk that stops at the cap."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    seen = 0
    while stack:
        v, depth = stack.pop()
        seen += 1
        if seen > max_nodes:
            raise ConfigError(f"manifest: more than {max_nodes} values")
        if depth > max_depth:
            raise ConfigError(f"manifest: nested deeper than {max_depth} levels")
        if isinstance(v, Mapping):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list | tuple):
            stack.extend((x, depth + 1) for x in v)


def _header(obj: Any, kind: str, errs: _Errors) -> None:
    if not isinstance(obj, Mapping):
        raise ConfigError(f"a {kind} manifest must be a mapping, not {type(obj).__name__}")
    want = f"{contract.API_GROUP}/{contract.API_VERSION}"
    if obj.get("apiVersion") != want:
        errs.add("apiVersion", f"must be {want} (got {short(obj.get('apiVersion'))})")
    if obj.get("kind") != kind:
        errs.add("kind", f"must be {kind} (got {short(obj.get('kind'))})")


def _raise(errs: _Errors, kind: str) -> None:
    if errs.items:
        more = len(errs.items) - MAX_ERRORS
        text = "; ".join(errs.items[:MAX_ERRORS]) + (f"; and {more} more" if more > 0 else "")
        raise ConfigError(f"invalid {kind}: {text}")


def parse_job(obj: Any) -> t.DistGNNJob:
    """Validate a DistGNNJob manifest and return it with defaults applied."""
    check_bounds(obj)
    errs = _Errors()
    _header(obj, "DistGNNJob", errs)
    md = _metadata(obj, errs)
    spec = load(t.DistGNNJobSpec, obj.get("spec"), "spec", errs)
    _raise(errs, "DistGNNJob")
    return t.DistGNNJob(metadata=md, spec=spec)


def parse_graphserver(obj: Any) -> t.GraphServer:
    """Validate a GraphServer manifest and return it with defaults applied."""
    check_bounds(obj)
    errs = _Errors()
    _header(obj, "GraphServer", errs)
    md = _metadata(obj, errs)
    spec = load(t.GraphServerSpec, obj.get("spec"), "spec", errs)
    _raise(errs, "GraphServer")
    return t.GraphServer(metadata=md, spec=spec)


def parse_manifest(obj: Any) -> t.DistGNNJob | t.GraphServer:
    """Parse a DistGNNJob or GraphServer, by its ``kind``."""
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    if kind == "DistGNNJob":
        return parse_job(obj)
    if kind == "GraphServer":
        return parse_graphserver(obj)
    raise ConfigError(f"kind: must be DistGNNJob or GraphServer (got {short(kind)})")


def to_dict(inst: Any) -> Any:
    """A dataclass as its camelCase manifest form, leaving out ``None`` fields."""
    if dataclasses.is_dataclass(inst) and not isinstance(inst, type):
        out = {}
        for f in dataclasses.fields(inst):
            v = getattr(inst, f.name)
            if v is not None:
                out[json_name(f)] = to_dict(v)
        return out
    if isinstance(inst, list):
        return [to_dict(x) for x in inst]
    if isinstance(inst, dict):
        return {k: to_dict(v) for k, v in inst.items()}
    return inst
