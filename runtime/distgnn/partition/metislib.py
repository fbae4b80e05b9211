"""Which METIS library runs the k-way call, and its index width.

METIS keeps every coarsening level's ``adjncy`` and ``adjwgt`` until the partition is
projected back, so its memory is set by the width of ``idx_t``: a 32-bit build (e.g.
Debian's and Ubuntu's ``libmetis5``, installed in the runtime image) needs half of what
pymetis' bundled 64-bit build needs, and is faster. ``DISTGNN_METIS_LIBRARY`` chooses:

* ``auto`` (default): a system ``libmetis`` with 32-bit indices if one is found, else
  pymetis' own library;
* ``pymetis``: pymetis' own library (64-bit indices);
* a path to a METIS 5 shared library (32- or 64-bit indices, detected).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from distgnn.errors import ConfigError

ENV = "DISTGNN_METIS_LIBRARY"
NOPTIONS = 40  # metis.h (5.1, 5.2): size of the options array


@dataclass(frozen=True)
class MetisLib:
    """A loaded METIS library: ``METIS_PartGraphKway`` and its ``idx_t`` width."""

    path: str
    idx_bits: int
    lib: ctypes.CDLL

    @property
    def dtype(self) -> type[np.signedinteger]:
        return np.int32 if self.idx_bits == 32 else np.int64

    @property
    def ctype(self) -> type[ctypes.c_int32] | type[ctypes.c_int64]:
        return ctypes.c_int32 if self.idx_bits == 32 else ctypes.c_int64

    def fits(self, *values: int) -> bool:
        """Whether every count (nodes, adjacency entries, total vertex weight) fits idx_t."""
        return self.idx_bits == 64 or all(v < 2**31 - 1 for v in values)


def probe_idx_bits(lib: ctypes.CDLL) -> int | None:
    """``idx_t`` width of a METIS library, from what ``METIS_SetDefaultOptions`` writes.

    It sets all ``METIS_NOPTIONS`` entries to -1: 40 int32 words for a 32-bit build, 80
    for a 64-bit one. The buffer is large enough for either.
    """
    buf = np.full(2 * NOPTIONS + 8, 0x5A5A5A5A, dtype=np.int32)
    lib.METIS_SetDefaultOptions(ctypes.c_void_p(buf.ctypes.data))
    written = int(np.count_nonzero(buf == -1))
    if written == NOPTIONS and (buf[NOPTIONS:] == 0x5A5A5A5A).all():
        return 32
    if written == 2 * NOPTIONS and (buf[2 * NOPTIONS :] == 0x5A5A5A5A).all():
        return 64
    return None


def _load(path: str) -> MetisLib | None:
    try:
        lib = ctypes.CDLL(path)
        lib.METIS_SetDefaultOptions  # noqa: B018 (symbol check)
        lib.METIS_PartGraphKway  # noqa: B018
        lib.METIS_PartGraphRecursive  # noqa: B018
    except (OSError, AttributeError):
        return None
    bits = probe_idx_bits(lib)
    return None if bits is None else MetisLib(path, bits, lib)


def _pymetis() -> MetisLib | None:
    from pymetis import _internal

    return _load(str(_internal.__file__))


def find_metis(env: Mapping[str, str] | None = None) -> MetisLib | None:
    """The METIS library to call (see the module docstring); None: use ``pymetis.part_graph``."""
    setting = (env if env is not None else os.environ).get(ENV, "auto").strip() or "auto"
    if setting == "pymetis":
        return _pymetis()
    if setting != "auto":
        found = _load(setting)
        if found is None:
            raise ConfigError(
                f"{ENV}={setting!r}: not a loadable METIS 5 library "
                "(expected 'auto', 'pymetis' or the path of libmetis.so)"
            )
        return found
    name = ctypes.util.find_library("metis")
    system = _load(name) if name else None
    if system is not None and system.idx_bits == 32:
        return system
    return _pymetis()
