"""Reading a ``.npy`` header without NumPy's pickle-capable loader."""

from __future__ import annotations

from typing import Any, BinaryIO

import numpy as np


def read_header(f: BinaryIO | Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of the ``.npy`` data at ``f``'s position, which is
    left at the first data byte; format versions 1.0, 2.0 and 3.0, another version is a
    ValueError (as is a malformed header)."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    if version in ((2, 0), (3, 0)):
        return np.lib.format.read_array_header_2_0(f)
    raise ValueError(f"unknown .npy version {version}")
