"""values.yaml, values.schema.json and docs/helm-values.md agree.

The table in docs/helm-values.md is generated from the schema (types, descriptions) and
values.yaml (defaults); after changing either, regenerate it with

    python tests/unit/test_chart_docs.py
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "distgnn"
DOC = REPO / "docs" / "helm-values.md"
BEGIN = "<!-- BEGIN VALUES TABLE (generated: python tests/unit/test_chart_docs.py) -->"
END = "<!-- END VALUES TABLE -->"
_MISSING = object()


def load_schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())


def load_values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def leaves(schema: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted key, schema) of every documented value: nodes without sub-properties."""
    for key, sub in schema["properties"].items():
        path = f"{prefix}{key}"
        if "properties" in sub and sub.get("additionalProperties") is False:
            yield from leaves(sub, f"{path}.")
        else:
            yield path, sub


def lookup(values: Any, path: str) -> Any:
    node = values
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _type(sub: dict[str, Any]) -> str:
    t = sub.get("type", "object")
    text = " or ".join(t) if isinstance(t, list) else t
    if "enum" in sub:
        text += " (" + ", ".join(f"`{e}`" for e in sub["enum"]) + ")"
    if "minimum" in sub:
        text += f", >= {sub['minimum']}"
    if "maximum" in sub:
        text += f", <= {sub['maximum']}"
    return text


def table() -> str:
    values = load_values()
    rows = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for path, sub in leaves(load_schema()):
        default = lookup(values, path)
        shown = "unset" if default is _MISSING else f"`{json.dumps(default)}`"
        desc = sub["description"].replace("|", "\\|")
        rows.append(f"| `{path}` | {_type(sub)} | {shown} | {desc} |")
    return "\n".join(rows)


def render_doc(current: str) -> str:
    head, rest = current.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def test_helm_values_doc_matches_values_and_schema() -> None:
    current = DOC.read_text()
    assert BEGIN in current and END in current, f"{DOC} lost its table markers"
    assert render_doc(current) == current, (
        "docs/helm-values.md is stale: run `python tests/unit/test_chart_docs.py`"
    )


def test_values_yaml_passes_its_own_schema() -> None:
    jsonschema.Draft7Validator.check_schema(load_schema())
    jsonschema.Draft7Validator(load_schema()).validate(load_values())


def _objects(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path or "(root)", schema
    for key, sub in schema.get("properties", {}).items():
        yield from _objects(sub, f"{path}.{key}" if path else key)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from _objects(items, f"{path}[]")


def test_schema_rejects_unknown_keys_at_every_level() -> None:
    for path, node in _objects(load_schema()):
        if "properties" in node:
            assert node.get("additionalProperties") is False, path
        if path != "(root)":
            assert node.get("description") or path.endswith("[]"), f"{path} has no description"


def test_every_value_is_commented() -> None:
    """Each key the schema declares has a comment line just above it, at its indentation."""
    declared = {path for path, _ in _objects(load_schema())}
    lines = (CHART / "values.yaml").read_text().splitlines()
    key = re.compile(r"^(\s*)([A-Za-z][A-Za-z0-9_]*):")
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing mappings
    checked: set[str] = set()
    for i, line in enumerate(lines):
        m = key.match(line)
        if not m:
            continue
        indent = len(m[1])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m[2]))
        path = ".".join(k for _, k in stack)
        if path not in declared:
            continue  # an entry of a free-form map (resources.requests.cpu, ...)
        checked.add(path)
        prev = lines[i - 1] if i else ""
        assert prev.startswith(m[1] + "#"), f"values.yaml:{i + 1}: {path} has no comment above"
    values = load_values()
    assert checked == {p for p in declared if lookup(values, p) is not _MISSING} - {"(root)"}


def test_every_values_key_is_in_the_schema_and_the_doc() -> None:
    documented = dict(leaves(load_schema()))
    doc = DOC.read_text()

    def walk(node: dict[str, Any], prefix: str) -> Iterator[str]:
        for k, v in node.items():
            path = f"{prefix}{k}"
            if path in documented:
                yield path
            else:
                assert isinstance(v, dict), f"{path} is not in values.schema.json"
                yield from walk(v, f"{path}.")

    seen = list(walk(load_values(), ""))
    assert seen
    for path in seen:
        assert f"| `{path}` |" in doc, path


if __name__ == "__main__":
    DOC.write_text(render_doc(DOC.read_text()))
    sys.stdout.write(f"wrote {DOC}\n")
