"""How the bench scripts print a figure measured over rounds: the median and the spread
(``1.22 [1.00-1.28]``), one formatter for every script (run as ``python bench/X.py``,
which puts this folder on ``sys.path``)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def value_range(values: Iterable[float], fmt: str = ".2f", scale: float = 1.0) -> str:
    """``min-max`` of ``values`` times ``scale``, each formatted with ``fmt``."""
    v = [x * scale for x in values]
    return f"{min(v):{fmt}}-{max(v):{fmt}}"


def median_range(values: Iterable[float], fmt: str = ".2f", scale: float = 1.0) -> str:
    """``median [min-max]`` of ``values`` times ``scale``, each formatted with ``fmt``."""
    v = [x * scale for x in values]
    return f"{statistics.median(v):{fmt}} [{value_range(v, fmt)}]"
