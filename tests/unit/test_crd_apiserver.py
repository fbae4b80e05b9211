"""The CRDs as a real API server checks them when they are applied (kmock checks none of
this): structural schema rules, defaults valid against their own schema, CEL rules that
name only fields that exist and iterate only bounded data, unknown fields preserved only
where intended, printer columns that point at declared fields of the right type.

Rules from https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
custom-resource-definitions/ (structural schema, defaulting, validation rules, additional
printer columns).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from tests.support.crd_schema import closed

from distgnn.api import schema

Obj = dict[str, Any]
CRDS = {"DistGNNJob": schema.job_crd(), "GraphServer": schema.graphserver_crd()}
PRESERVE_UNKNOWN = {".spec.trainers.podTemplate.affinity", ".spec.servers.podTemplate.affinity"}
"""The only free-form fields: a Kubernetes Affinity, passed to the pods as given."""


def _root(kind: str) -> Obj:
    return dict(CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def nodes(s: Obj, path: str = "") -> Iterator[tuple[str, Obj]]:
    yield path, s
    for k, v in s.get("properties", {}).items():
        yield from nodes(v, f"{path}.{k}")
    if "items" in s:
        yield from nodes(s["items"], f"{path}[]")
    if isinstance(s.get("additionalProperties"), dict):
        yield from nodes(s["additionalProperties"], f"{path}{{}}")


ALL = [(kind, path, node) for kind in CRDS for path, node in nodes(_root(kind))]


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_schema_is_structural(kind: str) -> None:
    """Every node has a type (bar int-or-string, which needs none, and preserve-unknown
    objects); no node has both properties and additionalProperties; value validations
    (type, default, description, nullable) never sit inside allOf/anyOf/oneOf/not; the
    root's metadata constrains nothing but name/generateName."""
    for path, node in nodes(_root(kind)):
        if node.get("x-kubernetes-int-or-string"):  # the one anyOf the rules allow types in
            assert "type" not in node, path
            assert node.get("anyOf", [{"type": "integer"}, {"type": "string"}]) == [
                {"type": "integer"},
                {"type": "string"},
            ], path
            continue
        else:
            assert node.get("type") in (
                "object",
                "array",
                "string",
                "integer",
                "number",
                "boolean",
            ), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert "items" in node, path
        for key in ("allOf", "anyOf", "oneOf", "not"):
            for sub in (
                node.get(key)
                if isinstance(node.get(key), list)
                else [node.get(key)] * (key in node)
            ):
                bad = {"type", "default", "description", "nullable", "additionalProperties"} & set(
                    sub
                )
                assert not bad, (path, key, bad)
    meta = _root(kind)["properties"]["metadata"]
    assert set(meta.get("properties", {})) <= {"name", "generateName"}
    assert set(meta) <= {"type", "properties"}


def test_unknown_fields_are_preserved_only_where_intended() -> None:
    found = {p for _, p, n in ALL if n.get("x-kubernetes-preserve-unknown-fields")}
    assert found == PRESERVE_UNKNOWN
    for _, p, n in ALL:
        if p in PRESERVE_UNKNOWN:
            assert n["type"] == "object" and "properties" not in n, p


DEFAULTS = [(k, p, n) for k, p, n in ALL if "default" in n]


@pytest.mark.parametrize(
    ("kind", "path", "node"), DEFAULTS, ids=[f"{k}{p}" for k, p, _ in DEFAULTS]
)
def test_every_default_is_valid_against_its_own_schema(kind: str, path: str, node: Obj) -> None:
    """The API server refuses a CRD whose default does not validate (after pruning) against
    the schema it sits in; an object default is also defaulted inside before that."""
    value = copy.deepcopy(node["default"])
    errors = [e.message for e in jsonschema.Draft4Validator(closed(node)).iter_errors(value)]
    assert not errors, (path, errors)
    assert ".metadata" not in path, path  # no defaults in metadata


# --- CEL ------------------------------------------------------------------------------------

_REF = re.compile(r"\b(self|oldSelf)((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def _resolve(node: Obj, names: list[str], at_root: bool) -> bool:
    for i, name in enumerate(names):
        if at_root and i == 0 and name == "metadata":  # CEL sees metadata.name/generateName
            return len(names) >= 2 and names[1] in ("name", "generateName")
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return True
        props = node.get("properties") or {}
        if name not in props:
            return False
        node = props[name]
    return True


RULES = [
    (kind, path, node, r)
    for kind, path, node in ALL
    for r in node.get("x-kubernetes-validations", [])
]


@pytest.mark.parametrize(
    ("kind", "path", "node", "rule"),
    RULES,
    ids=[f"{k}{p}:{r['rule'][:30]}" for k, p, _, r in RULES],
)
def test_cel_rules_name_only_declared_fields(kind: str, path: str, node: Obj, rule: Obj) -> None:
    """The API server type-checks each rule against the schema: ``self.x`` for an ``x``
    that is not declared fails the CRD (celpy, used by test_crd_cel.py, only parses)."""
    refs = _REF.findall(rule["rule"])
    assert refs or "self" in rule["rule"], rule
    for _, chain in refs:
        names = chain.lstrip(".").split(".")
        assert _resolve(node, names, at_root=path == ""), (path, rule["rule"], chain)


def _unbounded(node: Obj) -> list[str]:
    """Subpaths whose size the API server's cost estimator cannot bound."""
    out = []
    for p, n in nodes(node):
        if n.get("x-kubernetes-preserve-unknown-fields"):
            out.append(p or ".")
        if n.get("type") == "string" and "maxLength" not in n and "enum" not in n:
            out.append(p)
        if n.get("type") == "array" and "maxItems" not in n:
            out.append(p)
        if isinstance(n.get("additionalProperties"), dict) and "maxProperties" not in n:
            out.append(p)
    return out


@pytest.mark.parametrize(
    ("kind", "path", "node", "rule"),
    RULES,
    ids=[f"{k}{p}:{r['rule'][:30]}" for k, p, _, r in RULES],
)
def test_cel_rules_only_touch_bounded_data(kind: str, path: str, node: Obj, rule: Obj) -> None:
    """The estimated cost of a rule scales with the largest value it may see: a rule over
    ``self`` as a whole (``self == oldSelf``) or over a field that is a list, map or string
    must see only bounded ones, or the API server refuses the CRD (cost budget)."""
    text = rule["rule"]
    whole = re.search(r"\b(self|oldSelf)\b(?!\.)", text) is not None
    if whole:
        assert _unbounded(node) == [], (path, text)
    for _, chain in _REF.findall(text):
        names = chain.lstrip(".").split(".")
        if path == "" and names[0] == "metadata":
            continue
        sub = node
        for name in names:
            sub = sub["properties"][name]
        assert _unbounded(sub) == [], (path, text, chain)


# --- printer columns and subresources -------------------------------------------------------

_COLUMN_TYPES = {"integer": "integer", "number": "number", "string": "string", "boolean": "boolean"}


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_printer_columns_point_at_declared_fields(kind: str) -> None:
    ver = CRDS[kind]["spec"]["versions"][0]
    assert ver["subresources"] == {"status": {}}
    root = _root(kind)
    for col in ver["additionalPrinterColumns"]:
        path = col["jsonPath"]
        assert re.fullmatch(r"(\.[A-Za-z][A-Za-z0-9]*)+", path), col
        if path == ".metadata.creationTimestamp":
            assert col["type"] == "date"
            continue
        node = root
        for name in path.lstrip(".").split("."):
            if isinstance(node.get("additionalProperties"), dict):  # a key of a map
                node = node["additionalProperties"]
                continue
            assert name in node.get("properties", {}), (kind, col)
            node = node["properties"][name]
        want = "number" if col["type"] == "number" else col["type"]
        have = node.get("type")
        assert _COLUMN_TYPES.get(str(have)) == want or (want == "number" and have == "integer"), (
            kind,
            col,
            have,
        )
