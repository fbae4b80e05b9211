"""Drift of a child: do the fields *we set* differ from what the API server stored?

The API server adds defaults (``updateStrategy``, ``clusterIPs``, ``fieldRef.apiVersion``,
``terminationGracePeriodSeconds``, ...), drops empty values (``env: []``) and rewrites
quantities (``0.5`` -> ``500m``). A check that compares whole objects, or our strings with
the stored ones, sees a change on every pass and sends a PATCH forever. So:

* only fields present in the desired object are compared (:func:`subset`);
* empty lists/maps and ``None`` in the desired object compare as "not set";
* quantities (``resources.requests``/``limits`` values, ``emptyDir.sizeLimit``) are compared
  in canonical form (:mod:`distgnn_operator.quantity`), and sent in canonical form.
"""

from __future__ import annotations

from typing import Any

from distgnn_operator.quantity import canonical_or_same

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
