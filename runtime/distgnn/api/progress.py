"""Rank 0's ``/progress`` snapshot turned into ``status.progress`` (and a log line).

Shared by the operator (which writes it into a DistGNNJob's status) and ``distgnn run``
(which prints it), so both show the same thing. Pure and defensive: the snapshot comes
over the network, so only known fields of the right type are kept and strings are cut.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

FIELDS: dict[str, type] = {
    "completedEpochs": int,
    "totalEpochs": int,
    "loss": float,
    "validationMetric": str,
    "validationValue": float,
    "epochSeconds": float,
    "samplesPerSecond": float,
}
"""camelCase field -> type, as in ``TrainingProgress`` (``distgnn.api.types``)."""
NON_NEGATIVE = frozenset({"epochSeconds", "samplesPerSecond"})
"""Fields whose schema has ``minimum: 0`` (a negative one would make the API server refuse
the whole status patch): left out when negative."""


def _valid(v: Any, tp: type) -> bool:
    if isinstance(v, bool):
        return False
    if tp is int:
        return isinstance(v, int) and 0 <= v < 2**31
    if tp is float:
        return isinstance(v, int | float) and math.isfinite(v)
    return isinstance(v, str)


def progress_status(snapshot: Any) -> dict[str, Any] | None:
    """``status.progress`` of a snapshot, without ``updateTime``; None when it has no
    epoch count yet (or is not a snapshot at all)."""
    if not isinstance(snapshot, Mapping):
        return None
    out: dict[str, Any] = {}
    for key, tp in FIELDS.items():
        v = snapshot.get(key)
        if v is None or not _valid(v, tp) or (key in NON_NEGATIVE and v < 0):
            continue
        if tp is float:
            v = float(v)
            out[key] = round(v, 6) if key != "samplesPerSecond" else round(v, 1)
        elif tp is str:
            out[key] = v[:63]
        else:
            out[key] = v
    if "completedEpochs" not in out or "totalEpochs" not in out:
        return None
    out["epoch"] = f"{out['completedEpochs']}/{out['totalEpochs']}"
    return dict(sorted(out.items()))


def progress_text(p: Mapping[str, Any]) -> str:
    """``epoch 7/25 loss=0.41 valAccuracy=0.78 epoch_seconds=1.2`` for a log line."""
    parts = [f"epoch {p['epoch']}"]
    if "loss" in p:
        parts.append(f"loss={p['loss']:.4g}")
    if "validationMetric" in p and "validationValue" in p:
        parts.append(f"{p['validationMetric']}={p['validationValue']:.4g}")
    if "epochSeconds" in p:
        parts.append(f"epoch_seconds={p['epochSeconds']:.3g}")
    if "samplesPerSecond" in p:
        parts.append(f"samples_per_second={p['samplesPerSecond']:.4g}")
    return " ".join(parts)
