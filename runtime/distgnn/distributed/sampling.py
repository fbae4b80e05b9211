"""One-hop distributed neighbour sampling (DGL's ``sample_neighbors`` on a DistGraph).

Seeds (homogeneous global node IDs) are grouped by owner partition; each server
gets one SAMPLE_NEIGHBORS request, all in flight at once, and samples in-edges of
its seeds from its CSC with vectorised NumPy (:mod:`distgnn.server.sampling`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from distgnn.distributed.tensor import as_ids, group
from distgnn.errors import ConfigError
from distgnn.rpc.client import Call
from distgnn.rpc.protocol import MsgType


class SampledEdges(NamedTuple):
    """Sampled in-edges: homogeneous global ``src``/``dst``/``eid`` and edge type index."""

    src: torch.Tensor
    dst: torch.Tensor
    eid: torch.Tensor
    etype: torch.Tensor


def _fanout(g: Any, fanout: int | dict[Any, int]) -> int | dict[str, int]:
    if isinstance(fanout, bool) or not isinstance(fanout, int | dict):
        raise ConfigError(f"fanout must be an int or a dict etype -> int, got {fanout!r}")
    if isinstance(fanout, int):
        return fanout
    names = g.manifest.etype_names
    out = {}
    for k, v in fanout.items():
        name = ":".join(k) if isinstance(k, tuple) else str(k)
        if name not in names:
            try:
                name = names[g.book.etype_id(name)]
            except Exception as e:
                raise ConfigError(f"fanout: unknown edge type {k!r} (known: {names})") from e
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"fanout[{k!r}] must be an int")
        out[name] = v
    return out


def sample_neighbors(
    g: Any,
    seeds: Any,
    fanout: int | dict[Any, int],
    *,
    replace: bool = False,
    prob: str | None = None,
    seed: int | None = None,
) -> SampledEdges:
    """Sample up to ``fanout`` in-edges of every seed (``-1``: all); see the module doc.

    ``prob`` names an edge-data array used as unnormalised weights. ``seed`` makes
    the draw reproducible (each server derives its own stream from it).
    """
    fo = _fanout(g, fanout)
    gid = as_ids(seeds, g.num_nodes())
    if gid.size and (int(gid.min()) < 0 or int(gid.max()) >= g.num_nodes()):
        raise ConfigError(f"seed IDs out of range [0, {g.num_nodes()})")
    offsets = np.asarray(g.book.node_offsets, dtype=np.int64)
    nparts = len(offsets) - 1
    parts = (np.searchsorted(offsets, gid, side="right") - 1).astype(np.int16)
    meta: dict[str, Any] = {"fanout": fo, "replace": bool(replace)}
    if prob is not None:
        meta["prob"] = prob
    calls = {}
    if nparts == 1 or (len(gid) and (parts == parts[0]).all()):
        p = int(parts[0]) if len(gid) else 0
        calls[p] = Call(MsgType.SAMPLE_NEIGHBORS, dict(meta), [gid - offsets[p]])
    else:
        order, b = group(parts, nparts)
        for p in range(nparts):
            if b[p + 1] > b[p]:
                calls[p] = Call(
                    MsgType.SAMPLE_NEIGHBORS, dict(meta), [gid[order[b[p] : b[p + 1]]] - offsets[p]]
                )
    if seed is not None:
        for p, c in calls.items():
            c.meta["seed"] = int(seed) * 1000003 + p
    frames = g.ctx.call_many(calls)
    res = [frames[p].bufs for p in sorted(frames)]
    cols = res[0] if len(res) == 1 else [np.concatenate([r[i] for r in res]) for i in range(4)]
    return SampledEdges(*(torch.from_numpy(np.ascontiguousarray(c)) for c in cols))
