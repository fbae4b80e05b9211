"""Checked dtype casts: values that do not fit a tensor's dtype are refused, never cast.

Used by the server on every write and by ``DistTensor`` before it sends values, so a
trainer's ``t[ids] = x`` with values its dtype cannot hold fails where it was written.
"""

from __future__ import annotations

import numpy as np

from distgnn.errors import TensorError


def cast_checked(v: np.ndarray, dtype: np.dtype, what: str) -> np.ndarray:
    """``v`` as ``dtype``, refusing values that do not fit: non-finite results from finite
    inputs (1e300 into float32), and for integer/bool targets anything not exactly
    representable (NaN, out of range, fractional). Free when the dtypes already match."""
    if v.dtype == dtype:
        return v
    with np.errstate(all="ignore"):
        out = v.astype(dtype)
        if dtype.kind == "f":
            ok = np.isfinite(out) | ~np.isfinite(v) if v.dtype.kind == "f" else np.isfinite(out)
            fits = bool(ok.all())
        else:
            fits = bool((out.astype(v.dtype) == v).all())
    if not fits:
        raise TensorError(f"{what}: values do not fit {dtype.name} (refused, not cast)")
    return out
