"""The one ``.npy`` header reader the partition loader, the server store and the
co-located reader share."""

from __future__ import annotations

import io

import numpy as np
import pytest

from distgnn import npy


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_header_of_each_version_and_position_after_it(version: tuple[int, int]) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    f = io.BytesIO()
    np.lib.format.write_array(f, a, version=version)
    f.seek(0)
    assert npy.read_header(f) == ((3, 4), False, np.dtype(np.float32))
    assert np.frombuffer(f.read(), dtype=np.float32).reshape(3, 4).tolist() == a.tolist()


def test_unknown_version_and_garbage_are_value_errors() -> None:
    f = io.BytesIO()
    np.lib.format.write_array(f, np.zeros(2), version=(1, 0))
    raw = bytearray(f.getvalue())
    raw[6] = 9  # major version 9
    with pytest.raises(ValueError, match=r"unknown \.npy version \(9, 0\)"):
        npy.read_header(io.BytesIO(bytes(raw)))
    with pytest.raises(ValueError):
        npy.read_header(io.BytesIO(b"not an npy file at all"))
