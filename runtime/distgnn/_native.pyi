"""Types of the optional C extension (runtime/distgnn/_native.c); see distgnn.native."""

from typing import Any

SAMPLE_INTO: int
"""1: sample_uniform takes out_pos / out_values (a build before it has no such name)."""
HW_POPCNT: int
"""1: relabel's rank lookups use the CPU's POPCNT instruction, 0: the SWAR popcount."""

def sample_uniform(
    indptr: Any, seeds: Any, fanout: int, replace: bool, seed: int, /, *rest: Any
) -> Any: ...
def mean_csr(
    keys: Any, other: Any, nkeys: int, nother: int, inv: Any, wide: bool, /
) -> tuple[bytearray, bytearray, bytearray, bytearray | None]: ...
def relabel(
    dst_nid: Any, src: Any, dst: Any, n: int, swar: bool = ..., /
) -> tuple[bytearray, bytearray, bytearray | None]: ...

# --- the co-located feature read (distgnn.rpc.gather) ---
def gather_rows(table: Any, ids: Any, out: Any, stream: bool, /) -> None: ...
