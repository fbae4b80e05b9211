"""One-hop distributed neighbour sampling: DGL's ``sample_neighbors``,
``sample_etype_neighbors`` and ``in_subgraph`` on a DistGraph.

Seeds (homogeneous global node IDs) are grouped by owner partition; each server
gets one SAMPLE_NEIGHBORS request, all in flight at once, and samples in-edges of
its seeds from its CSC with vectorised NumPy (:mod:`distgnn.server.sampling`).
The answer gives each edge's destination as runs over the request's seeds (``runs``:
``run_len[i]`` edges of seed ``run_seed[i]``), not per edge, and the edge type only
on graphs that have edge types; :func:`sample_hop_edges` turns them into positions in
the caller's seed array (what a block needs), :func:`sample_hop` into global IDs. A
co-located trainer answers its own partition's request in-process from the server's
shared memory with the same handler (:mod:`distgnn.distributed.localsample`).
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import numpy as np
import torch

from distgnn.distributed.subgraph import SubGraph
from distgnn.distributed.tensor import as_ids, group
from distgnn.errors import ConfigError, IDOutOfRange, ProtocolError, UnknownType
from distgnn.rpc.client import Call
from distgnn.rpc.protocol import Frame, Into, MsgType


class SampledEdges(NamedTuple):
    """Sampled in-edges: homogeneous global ``src``/``dst``/``eid`` and edge type index."""

    src: torch.Tensor
    dst: torch.Tensor
    eid: torch.Tensor
    etype: torch.Tensor


class HopEdges(NamedTuple):
    """Sampled in-edges as NumPy arrays: global ``src``/``eid`` (int64), the edge type
    index (int32; None on a graph without edge types) and ``dst_index``, the position
    of each edge's destination in the seed array that was sampled."""

    src: np.ndarray
    eid: np.ndarray
    etype: np.ndarray | None
    dst_index: np.ndarray


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


def seed_ids(g: Any, nodes: Any) -> np.ndarray:
    """Homogeneous global seed IDs from IDs or a dict ``{ntype: type-wise IDs}``."""
    if isinstance(nodes, dict):
        book = g.get_partition_book()
        parts = []
        for ntype, ids in nodes.items():
            if ntype not in book.ntypes:
                raise UnknownType(f"nodes: unknown node type {ntype!r} (known: {book.ntypes})")
            typed = as_ids(ids, g.num_nodes(ntype))
            if typed.size and (int(typed.min()) < 0 or int(typed.max()) >= g.num_nodes(ntype)):
                raise IDOutOfRange(f"nodes[{ntype!r}] out of range [0, {g.num_nodes(ntype)})")
            parts.append(g.book.to_homogeneous_nids(ntype, typed))
        return np.concatenate(parts) if parts else np.empty(0, np.int64)
    gid = as_ids(nodes, g.num_nodes())
    if gid.size and (int(gid.min()) < 0 or int(gid.max()) >= g.num_nodes()):
        raise IDOutOfRange(f"seed IDs out of range [0, {g.num_nodes()})")
    return gid


def _excluded(g: Any, exclude_edges: Any) -> np.ndarray:
    if isinstance(exclude_edges, dict):
        out = [
            g.book.to_homogeneous_eids(g.to_canonical_etype(et), as_ids(e, g.num_edges(et)))
            for et, e in exclude_edges.items()
        ]
        return np.concatenate(out) if out else np.empty(0, np.int64)
    return as_ids(exclude_edges, g.num_edges())


def _call(ctx: Any, calls: dict[int, Call], cols: _Columns | None = None) -> dict[int, Frame]:
    """The servers' answers; a co-located trainer's own partition is sampled here
    (:mod:`distgnn.distributed.localsample`) while the others' requests are in flight,
    or over TCP when the local sampler declines. With ``cols`` laid out around the local
    partition, its answer is written into its slot there."""
    local = getattr(ctx, "local_sampler", None)
    if local is None or local.part not in calls:
        return cast(dict[int, Frame], ctx.call_many(calls))
    mine = calls[local.part]
    rest = {p: c for p, c in calls.items() if p != local.part}
    got: list[Frame | None] = []

    def between() -> None:
        if cols is None or cols.local != local.part:
            got.append(local.answer(mine))
            return
        f = local.answer(mine, cols.slot())
        if f is not None:
            cols.adopt(local.part, f)
        got.append(f)

    frames: dict[int, Frame] = ctx.call_many(rest, between=between)
    frames[local.part] = got[0] if got and got[0] is not None else ctx.call(local.part, mine)
    return frames


def _int_column(frame: Frame, i: int, part: int, what: str) -> np.ndarray:
    a = frame.bufs[i]
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ProtocolError(
            f"SAMPLE_NEIGHBORS answer of server {part}: {what} must be a 1-D integer array, "
            f"got {a.dtype}{list(a.shape)}"
        )
    return a


def decode_sample_answer(
    frame: Frame, num_seeds: int, part: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]:
    """``(src, eid, etype or None, run_seed, run_len)`` of one server's answer (the
    destinations as runs over the ``num_seeds`` seeds of its request); a malformed
    answer raises ProtocolError. From a server that does not know ``runs`` (per-edge
    layout), ``run_seed`` holds each edge's destination as a global node ID and
    ``run_len`` is None."""
    runs = frame.meta.get("runs") is True
    n = len(frame.bufs)
    if n not in ((4, 5) if runs else (4,)):
        raise ProtocolError(
            f"SAMPLE_NEIGHBORS answer of server {part}: {n} buffers "
            f"({'4 or 5' if runs else '4'} expected)"
        )
    names = (
        ("src", "eid", "run_seed", "run_len", "etype") if runs else ("src", "dst", "eid", "etype")
    )
    cols = [_int_column(frame, i, part, names[i]) for i in range(n)]
    src = cols[0]
    if runs:
        eid, run_seed, run_len = cols[1], cols[2], cols[3]
        et = cols[4] if n == 5 else None
        if len(run_seed) != len(run_len):
            raise ProtocolError(
                f"SAMPLE_NEIGHBORS answer of server {part}: {len(run_seed)} run seeds for "
                f"{len(run_len)} run lengths"
            )
        if len(run_len) and (int(run_len.min()) < 0 or int(run_len.sum()) != len(src)):
            raise ProtocolError(
                f"SAMPLE_NEIGHBORS answer of server {part}: run lengths do not add up to its "
                f"{len(src)} edges"
            )
        if len(run_seed) and (int(run_seed.min()) < 0 or int(run_seed.max()) >= num_seeds):
            raise ProtocolError(
                f"SAMPLE_NEIGHBORS answer of server {part}: a run's seed is outside the "
                f"{num_seeds} seeds of the request"
            )
        if not len(run_len) and len(src):
            raise ProtocolError(f"SAMPLE_NEIGHBORS answer of server {part}: edges without runs")
        per_edge: tuple[np.ndarray, ...] = (eid,) if et is None else (eid, et)
    else:
        run_seed, eid, et, run_len = cols[1], cols[2], cols[3], None
        per_edge = (run_seed, eid, et)
    if any(len(c) != len(src) for c in per_edge):
        raise ProtocolError(
            f"SAMPLE_NEIGHBORS answer of server {part}: columns of different lengths"
        )
    return src, eid, et, run_seed, run_len


def _legacy_dst_index(dst: np.ndarray, local_seeds: np.ndarray, part: int) -> np.ndarray:
    """Indices into ``local_seeds`` of per-edge destinations (server-local node IDs)."""
    order = np.argsort(local_seeds, kind="stable")
    pos = np.minimum(np.searchsorted(local_seeds[order], dst), max(len(order) - 1, 0))
    if len(dst) and (not len(order) or not np.array_equal(local_seeds[order[pos]], dst)):
        raise ProtocolError(
            f"SAMPLE_NEIGHBORS answer of server {part}: an edge's destination is not a seed"
        )
    return order[pos]


class _Columns:
    """Receives the ``src`` and ``eid`` columns of every server's answer back to back into
    one array each, so that the hop's columns need no concatenation afterwards. ``bounds``:
    at most this many edges per partition (its seeds x fanout), in partition order.

    Without a ``local`` partition the answers are placed from the start as they arrive
    (in partition order). A co-located trainer's own partition is answered in-process
    before any answer arrives: its slot starts after the bounds of the partitions before
    it (the native draw writes there, :meth:`slot`); the answers of higher partitions
    are placed after it as they arrive, those of lower ones right-aligned before it, so
    they must arrive in descending order (``order`` gives the calls' order). Answers that
    do not fit or arrive out of order are received as usual and concatenated."""

    def __init__(self, bounds: dict[int, int], local: int | None = None) -> None:
        bound = sum(bounds.values())
        self.cols = [np.empty(bound, np.int64), np.empty(bound, np.int64)]
        self.local = local
        start = 0 if local is None else sum(b for p, b in bounds.items() if p < local)
        self.lo, self.hi = [start, start], [start, start]
        self.local_bound = 0 if local is None else bounds.get(local, 0)
        self.got: dict[tuple[int, int], tuple[int, np.ndarray]] = {}

    def order(self, parts: list[int]) -> list[int]:
        """The order to call (and receive from) ``parts`` in."""
        if self.local is None:
            return sorted(parts)
        low = sorted((p for p in parts if p < self.local), reverse=True)
        return [*(p for p in sorted(parts) if p >= self.local), *low]

    def slot(self) -> tuple[np.ndarray, np.ndarray]:
        """The local partition's ``(src, eid)`` slot, for the in-process answer."""
        s = self.lo[0]
        return self.cols[0][s : s + self.local_bound], self.cols[1][s : s + self.local_bound]

    def adopt(self, part: int, frame: Frame) -> None:
        """Note the in-process answer of ``part`` when its columns are in its slot."""
        for i in (0, 1):
            a = frame.bufs[i] if len(frame.bufs) > i else None
            s = self.lo[i]
            at = self.cols[i].__array_interface__["data"][0] + 8 * s
            if (
                a is None or a.dtype != np.int64 or a.ndim != 1 or self.hi[i] != s
                or len(a) > self.local_bound or a.__array_interface__["data"][0] != at
            ):  # fmt: skip
                continue
            self.got[part, i] = (s, a)
            self.hi[i] = s + len(a)

    def into(self, part: int) -> Into:
        def into(i: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray | None:
            if i > 1 or dtype != np.int64 or len(shape) != 1:
                return None
            n = shape[0]
            if self.local is not None and part < self.local:  # right-aligned, descending
                start = self.lo[i] - n
                if start < 0:
                    return None
                self.lo[i] = start
            else:
                if part == self.local and (part, i) in self.got:
                    return None
                start = self.hi[i]
                if start + n > len(self.cols[i]):
                    return None
                self.hi[i] = start + n
            view = self.cols[i][start : start + n]
            self.got[part, i] = (start, view)
            return view

        return into

    def joined(self, frames: list[tuple[int, Frame]], i: int) -> np.ndarray | None:
        """Column ``i`` of the answers (in ``frames``' order) when received back to back."""
        first = self.lo[i]
        pos = first
        for part, f in frames:
            start, view = self.got.get((part, i), (-1, None))
            if start != pos or view is None or f.bufs[i] is not view:
                return None
            pos += len(view)
        return self.cols[i][first:pos]


def sample_hop_edges(
    g: Any,
    gid: np.ndarray,
    fanout: int | dict[Any, int],
    replace: bool = False,
    prob: str | None = None,
    seed: int | None = None,
) -> HopEdges:
    """One request per owning server (all in flight at once): sampled in-edges of
    ``gid``, destinations as positions in ``gid``."""
    fo = _fanout(g, fanout)
    offsets = np.asarray(g.book.node_offsets, dtype=np.int64)
    nparts = len(offsets) - 1
    parts = (np.searchsorted(offsets, gid, side="right") - 1).astype(np.int16)
    meta: dict[str, Any] = {"fanout": fo, "replace": bool(replace), "runs": True}
    if prob is not None:
        meta["prob"] = prob
    calls: dict[int, Call] = {}
    where: dict[int, np.ndarray | None] = {}
    if nparts == 1 or (len(gid) and (parts == parts[0]).all()):
        p = int(parts[0]) if len(gid) else 0
        calls[p] = Call(MsgType.SAMPLE_NEIGHBORS, dict(meta), [gid - offsets[p]])
        where[p] = None  # request seed i is gid[i]
    else:
        order, b = group(parts, nparts)
        for p in range(nparts):
            if b[p + 1] > b[p]:
                where[p] = order[b[p] : b[p + 1]]
                calls[p] = Call(MsgType.SAMPLE_NEIGHBORS, dict(meta), [gid[where[p]] - offsets[p]])
    cols = None
    if len(calls) > 1 and isinstance(fo, int) and fo >= 0 and prob is None:
        local = getattr(getattr(g.ctx, "local_sampler", None), "part", None)
        # uniform: at most fanout edges per seed
        bounds = {p: len(c.bufs[0]) * fo for p, c in calls.items()}
        cols = _Columns(bounds, local if local in calls else None)
        calls = {p: calls[p] for p in cols.order(list(calls))}
        for p, c in calls.items():
            c.into = cols.into(p)
    if seed is not None:
        for p, c in calls.items():
            c.meta["seed"] = int(seed) * 1000003 + p
    frames = _call(g.ctx, calls, cols)
    got = [(p, frames[p]) for p in sorted(frames)]
    srcs, eids, run_seeds, run_lens = [], [], [], []
    ets: list[np.ndarray | None] = []
    legacy = False
    for p, frame in got:
        local_seeds = calls[p].bufs[0]
        src, eid, et, run_seed, run_len = decode_sample_answer(frame, len(local_seeds), p)
        if run_len is None:  # per-edge layout: destinations as global IDs, one run each
            legacy = True
            run_seed = _legacy_dst_index(run_seed.astype(np.int64) - offsets[p], local_seeds, p)
            run_len = np.ones(len(run_seed), np.int64)
        w = where[p]
        run_seeds.append(run_seed.astype(np.int64, copy=False) if w is None else w[run_seed])
        run_lens.append(run_len)
        srcs.append(src)
        eids.append(eid)
        ets.append(et)

    def cat(parts: list[np.ndarray], dtype: type = np.int64) -> np.ndarray:
        return (parts[0] if len(parts) == 1 else np.concatenate(parts)).astype(dtype, copy=False)

    etype = None
    if any(e is not None for e in ets):  # a server of the per-edge layout sends zeros
        zeros = [np.zeros(len(s), np.int32) for s in srcs]
        etype = cat([z if e is None else e for e, z in zip(ets, zeros, strict=True)], np.int32)
    src_all = eid_all = None
    if cols is not None and not legacy:
        src_all, eid_all = cols.joined(got, 0), cols.joined(got, 1)
    return HopEdges(
        cat(srcs) if src_all is None else src_all,
        cat(eids) if eid_all is None else eid_all,
        etype,
        np.repeat(cat(run_seeds), cat(run_lens)),
    )


def sample_hop(
    g: Any,
    gid: np.ndarray,
    fanout: int | dict[Any, int],
    replace: bool = False,
    prob: str | None = None,
    seed: int | None = None,
) -> SampledEdges:
    """:func:`sample_hop_edges` with global destination IDs and an edge type always."""
    h = sample_hop_edges(g, gid, fanout, replace, prob, seed)
    dst = np.take(gid, h.dst_index)
    et = np.zeros(len(h.src), np.int32) if h.etype is None else h.etype
    return SampledEdges(
        *(torch.from_numpy(np.ascontiguousarray(c)) for c in (h.src, dst, h.eid, et))
    )


def sample_neighbors(
    g: Any,
    nodes: Any,
    fanout: int | dict[Any, int],
    edge_dir: str = "in",
    prob: str | None = None,
    exclude_edges: Any = None,
    replace: bool = False,
    etype_sorted: bool = True,
    output_device: Any = None,
    *,
    seed: int | None = None,
) -> SubGraph:
    """DGL's ``sample_neighbors``: up to ``fanout`` in-edges of every seed (``-1``: all).

    ``nodes`` are homogeneous IDs, or ``{ntype: type-wise IDs}``; ``fanout`` an int (on
    a typed graph: per edge type, as DGL) or ``{etype: int}`` (types not named are not
    sampled); ``prob`` names an edge-data
    tensor used as unnormalised weights; ``exclude_edges`` (IDs, or ``{etype: IDs}``)
    are dropped from the sample, as DGL does on a distributed graph. ``seed`` (DistGNN)
    makes the draw reproducible. Servers keep in-edges only: ``edge_dir="out"`` raises
    (sample the in-edges of a graph partitioned with reversed edges instead).
    Returns a :class:`SubGraph` (``edges()``, ``edata[EID]``, ...).
    """
    if edge_dir != "in":
        raise ConfigError(
            "edge_dir: graph servers keep in-edges (CSC) only, so edge_dir='out' is not "
            "supported; partition the graph with reversed edges and sample 'in'"
        )
    if isinstance(fanout, int) and len(g.canonical_etypes) > 1:
        fanout = {c: fanout for c in g.canonical_etypes}  # DGL: the fanout of every type
    s = sample_hop(g, seed_ids(g, nodes), fanout, replace, prob, seed)
    src, dst, eid, et = s
    if exclude_edges is not None:
        keep = torch.from_numpy(~np.isin(eid.numpy(), _excluded(g, exclude_edges)))
        src, dst, eid, et = src[keep], dst[keep], eid[keep], et[keep]
    if output_device is not None:
        src, dst, eid, et = (x.to(output_device) for x in (src, dst, eid, et))
    return SubGraph(g, src, dst, eid, et.to(torch.int64))


def sample_etype_neighbors(
    g: Any,
    nodes: Any,
    fanout: int | dict[Any, int],
    edge_dir: str = "in",
    prob: str | None = None,
    exclude_edges: Any = None,
    replace: bool = False,
    etype_sorted: bool = True,
    output_device: Any = None,
    *,
    seed: int | None = None,
) -> SubGraph:
    """DGL's ``sample_etype_neighbors``: ``fanout`` per edge type (same as above)."""
    return sample_neighbors(
        g, nodes, fanout, edge_dir, prob, exclude_edges, replace, etype_sorted, output_device,
        seed=seed,
    )  # fmt: skip


def in_subgraph(g: Any, nodes: Any, output_device: Any = None) -> SubGraph:
    """DGL's ``in_subgraph``: every in-edge of ``nodes``."""
    return sample_neighbors(g, nodes, -1, output_device=output_device)
