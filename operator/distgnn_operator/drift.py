"""Drift of a child: do the fields *we set* differ from what the API server stored?

The API server adds defaults (``updateStrategy``, ``clusterIPs``, ``fieldRef.apiVersion``,
``terminationGracePeriodSeconds``, ...), drops empty values (``env: []``) and rewrites
quantities (``0.5`` -> ``500m``). A check that compares whole objects, or our strings with
the stored ones, sees a change on every pass and sends a PATCH forever. So:

* only fields present in the desired object are compared (:func:`subset`);
* empty lists/maps and ``None`` in the desired object compare as "not set";
* quantities (``resources.requests``/``limits`` values, ``emptyDir.sizeLimit``) are compared
  in canonical form (:mod:`distgnn_operator.quantity`), and sent in canonical form.

Comparing only what we set cannot see a field we *stopped* setting (the user took a node
selector, a label or a limit out of the spec), and a JSON merge patch keeps every field it
does not name. So each child carries what was applied last (annotation
``distgnn.dev/applied``, the canonical JSON of the fields we sent, like kubectl's
``last-applied-configuration``): the child is patched when the desired fields differ from it,
and the patch sends ``null`` for each map key it had that the desired fields lack
(:func:`removals`). Keys it never had (other clients', server defaults) are never touched.
"""

from __future__ import annotations

import json
from typing import Any

from distgnn import contract
from distgnn_operator.quantity import canonical_or_same

APPLIED = f"{contract.LABEL_PREFIX}/applied"
"""Annotation: what the operator applied last to a child (canonical JSON)."""
APPLIED_MAX = 64 * 1024
"""Larger records are not kept (annotations total at most 256 KiB per object)."""
ALIASES = {"serviceAccountName": "serviceAccount"}
"""Fields the API server mirrors into a deprecated twin it reads back when the field is
unset: removing one means removing both."""

QUANTITY_MAPS = ("requests", "limits")
QUANTITY_KEYS = ("sizeLimit",)


def canonicalize(obj: Any, key: str | None = None) -> Any:
    """A copy of ``obj`` with every quantity in its canonical form."""
    if isinstance(obj, dict):
        if key in QUANTITY_MAPS:
            return {k: canonical_or_same(v) for k, v in obj.items()}
        return {k: canonicalize(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [canonicalize(v) for v in obj]
    if key in QUANTITY_KEYS:
        return canonical_or_same(obj)
    return obj


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, dict | list) and not v)


def subset(want: Any, have: Any) -> bool:
    """True if every field of ``want`` has the same value in ``have`` (server adds fields).

    An empty list or map, or ``None``, in ``want`` matches an absent or empty field.
    """
    if _empty(want):
        return _empty(have) or want == have
    if isinstance(want, dict):
        return isinstance(have, dict) and all(subset(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(subset(a, b) for a, b in zip(want, have, strict=True))
        )
    return bool(want == have)


def drifted(want: dict[str, Any], have: dict[str, Any]) -> bool:
    """True if a field we set differs from the stored object (both canonicalised)."""
    return not subset(canonicalize(want), canonicalize(have))


def applied_record(fields: dict[str, Any]) -> str | None:
    """The annotation value for ``fields`` (None: too large to keep)."""
    text = json.dumps(canonicalize(fields), sort_keys=True, separators=(",", ":"))
    return text if len(text) <= APPLIED_MAX else None


def last_applied(obj: dict[str, Any]) -> dict[str, Any] | None:
    """What the operator applied last to ``obj`` (None: not recorded, or unreadable)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(APPLIED)
    try:
        prev = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return prev if isinstance(prev, dict) else None


def removals(prev: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """A merge patch nulling the map keys ``prev`` set that ``want`` sets no more (an
    empty value counts as unset): key by key in a map of strings (a node selector, labels,
    a resource map), so that keys other clients added stay; a whole field otherwise.
    Lists need nothing while set: a merge patch replaces them whole."""
    out: dict[str, Any] = {}
    for k, v in prev.items():
        w = want.get(k)
        if _empty(w):
            if isinstance(v, dict) and v and not any(isinstance(x, dict) for x in v.values()):
                out[k] = {kk: None for kk in v}  # a string map: other clients' keys stay
            elif not _empty(v):
                out[k] = None
                if k in ALIASES:
                    out[ALIASES[k]] = None
        elif isinstance(v, dict) and isinstance(w, dict):
            sub = removals(v, w)
            if sub:
                out[k] = sub
    return out


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, maps recursively (``extra`` wins)."""
    out = dict(base)
    for k, v in extra.items():
        cur = out.get(k)
        out[k] = merge(cur, v) if isinstance(cur, dict) and isinstance(v, dict) else v
    return out


def plan(fields: dict[str, Any], have: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch that brings ``have`` to the fields we set now, else None.

    ``fields``: everything we set on the child (``metadata`` holding only its labels).
    Patched when a field we set differs from the stored one, or when ``fields`` differ from
    what was applied last (a field taken out of the spec); the patch nulls what was taken
    out and records ``fields`` as applied. A child without a record (created by an older
    operator) gets one with its next patch, not a write of its own.
    """
    want = canonicalize(fields)
    prev = last_applied(have)
    if not drifted(fields, have) and (prev is None or prev == want):
        return None
    patch = merge(want, removals(prev, want)) if prev is not None else want
    record = applied_record(fields)
    md = dict(patch.get("metadata") or {})
    md["annotations"] = {**(md.get("annotations") or {}), APPLIED: record}
    patch["metadata"] = md
    return patch
