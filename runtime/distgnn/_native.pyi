"""Types of the optional C extension (runtime/distgnn/_native.c); see distgnn.native."""

from typing import Any

def sample_uniform(
    indptr: Any, seeds: Any, fanout: int, replace: bool, seed: int, /
) -> tuple[bytearray, bytearray, bytearray]: ...
def mean_csr(
    keys: Any, other: Any, nkeys: int, nother: int, inv: Any, wide: bool, /
) -> tuple[bytearray, bytearray, bytearray, bytearray | None]: ...
def relabel(
    dst_nid: Any, src: Any, dst: Any, n: int, /
) -> tuple[bytearray, bytearray, bytearray | None]: ...

# --- the co-located feature read (distgnn.rpc.gather) ---
def gather_rows(table: Any, ids: Any, out: Any, stream: bool, /) -> None: ...
