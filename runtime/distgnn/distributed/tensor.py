"""``DistTensor``: a tensor partitioned like the nodes (or edges) of a graph, on the servers.

Reads group the IDs by owner partition, send one PULL per server with every
request in flight at once, and scatter the rows back in the caller's order (when
every ID is on one server the answer is received straight into the output).
New named tensors are created on every server with an initialiser given by name
(``zeros``, ``ones``, ``uniform``, ``normal``, ``constant``); no code crosses the wire.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from distgnn.errors import ConfigError
from distgnn.rpc.client import Call
from distgnn.rpc.protocol import Into, MsgType, Segments

_TORCH2NP = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.float16: np.float16,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.int16: np.int16,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
}


def np_dtype(dtype: Any) -> np.dtype:
    """A torch or NumPy dtype as a NumPy dtype (only wire-allowed ones)."""
    if isinstance(dtype, torch.dtype):
        if dtype not in _TORCH2NP:
            raise ConfigError(f"dtype {dtype} is not supported by DistTensor")
        return np.dtype(_TORCH2NP[dtype])
    return np.dtype(dtype)


def as_ids(ids: Any, n: int | None = None) -> np.ndarray:
    """IDs (torch/NumPy/list/int/slice/bool mask) as a 1-D int64 NumPy array."""
    if isinstance(ids, slice):
        if n is None:
            raise ConfigError("a slice needs a known length")
        return np.arange(n, dtype=np.int64)[ids]
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    a = np.asarray(ids)
    if a.dtype == np.bool_:
        return np.flatnonzero(a).astype(np.int64)
    if a.dtype.kind not in "iu":
        raise ConfigError(f"IDs must be integers, got {a.dtype}")
    return a.reshape(-1).astype(np.int64, copy=False)


@dataclass(frozen=True)
class PartPolicy:
    """How rows map to partitions: the type-wise offsets of one node or edge type."""

    kind: str  # "node" or "edge"
    type_name: str  # ntype or "SRC:ETYPE:DST"
    offsets: np.ndarray  # (num_parts+1,) type-wise offsets

    @property
    def policy_str(self) -> str:
        return f"{self.kind}:{self.type_name}"

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    def key(self, name: str) -> str:
        return f"{self.kind}/{self.type_name}/{name}"

    def part_sizes(self) -> list[int]:
        return np.diff(self.offsets).astype(int).tolist()

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(partition, local row) of each ID; out-of-range IDs raise ConfigError."""
        dtype = np.int16 if len(self.offsets) < 30000 else np.int64
        if not ids.size:
            return np.empty(0, dtype), ids
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.size:
            raise ConfigError(f"{self.kind} IDs out of range [0, {self.size}) for {self.type_name}")
        p_lo, p_hi = np.searchsorted(self.offsets, [lo, hi], side="right") - 1
        if p_lo == p_hi:  # all in one partition (always so with one): no per-ID search
            return np.full(len(ids), p_lo, dtype), ids - self.offsets[p_lo]
        part = np.searchsorted(self.offsets, ids, side="right") - 1
        return part.astype(dtype), ids - self.offsets[part]


def resolve_policy(
    ctx: Any, policy: str | PartPolicy | None, rows: int | None = None
) -> PartPolicy:
    """Parse ``node``/``edge``/``node:NTYPE``/``edge:S:E:D``/an ntype/an etype name."""
    if isinstance(policy, PartPolicy):
        return policy
    book, man = ctx.book, ctx.manifest
    if policy is None:
        if rows is not None and len(man.node_types) == 1 and rows == man.num_nodes:
            policy = "node"
        elif rows is not None and len(man.edge_types) == 1 and rows == man.num_edges:
            policy = "edge"
        else:
            raise ConfigError(f"part_policy is required (cannot infer it from {rows} rows)")
    kind, _, rest = policy.partition(":")
    if kind in ("node", "edge") and not rest:
        types = man.node_types if kind == "node" else man.etype_names
        if len(types) != 1:
            raise ConfigError(f"part_policy {policy!r} is ambiguous: name a type among {types}")
        rest = types[0]
    elif kind not in ("node", "edge"):
        kind, rest = ("node", policy) if policy in man.node_types else ("edge", policy)
    if kind == "node":
        if rest not in man.node_types:
            raise ConfigError(f"part_policy: unknown node type {rest!r}")
        return PartPolicy("node", rest, np.asarray(book.ntype_offsets(rest), dtype=np.int64))
    try:
        name = man.etype_names[book.etype_id(rest)]
    except Exception as e:
        raise ConfigError(f"part_policy: unknown edge type {rest!r}") from e
    return PartPolicy("edge", name, np.asarray(book.etype_offsets(name), dtype=np.int64))


def _into(dest: np.ndarray) -> Into:
    """Receive a PULL answer straight into ``dest``."""

    def into(i: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        return dest

    return into


def _segments_into(segs: Segments) -> Into:
    def into(i: int, dtype: np.dtype, shape: tuple[int, ...]) -> Segments:
        return segs

    return into


MIN_DIRECT_RUN = 64
"""Rows of one partition in a row at least this long are received in place."""
MAX_SEGMENTS = 8192


def _segment_plan(
    parts: np.ndarray, order: np.ndarray, b: np.ndarray, out: np.ndarray
) -> tuple[dict[int, Segments], np.ndarray, np.ndarray]:
    """Where each partition's answer lands: ``(destinations per partition, scatter
    positions, scratch)``; after the receive, ``out[positions] = scratch``.

    Sampled input nodes are the seeds followed by each hop's new nodes in ascending ID
    order, i.e. a few long runs per partition (partitions own contiguous ID ranges).
    Each long run is received straight into its rows of ``out``; the rows of short runs
    go to the scratch array. IDs without enough long runs (random IDs) go to the
    scratch array entirely, grouped by partition, and are scattered once.
    """
    brk = np.flatnonzero(parts[1:] != parts[:-1]) + 1
    starts = np.concatenate([[0], brk])
    ends = np.concatenate([brk, [parts.size]])
    long = (ends - starts) >= MIN_DIRECT_RUN
    if brk.size + 1 > MAX_SEGMENTS or int((ends - starts)[long].sum()) * 2 < parts.size:
        tmp = np.empty_like(out)
        whole = {p: Segments([tmp[b[p] : b[p + 1]]]) for p in range(len(b) - 1) if b[p + 1] > b[p]}
        return whole, order, tmp
    # ``order`` is grouped by partition in position order, so this keeps each
    # partition's short rows together, in the order they arrive
    pos_all = order[np.repeat(~long, ends - starts)[order]]
    tmp = np.empty((pos_all.size, *out.shape[1:]), dtype=out.dtype)
    run_part = parts[starts]
    segs: dict[int, Segments] = {}
    cur = 0
    for p in range(len(b) - 1):
        if b[p + 1] == b[p]:
            continue
        dests: list[np.ndarray] = []
        pend = 0
        for i in np.flatnonzero(run_part == p).tolist():
            if long[i]:
                if pend:
                    dests.append(tmp[cur : cur + pend])
                    cur, pend = cur + pend, 0
                dests.append(out[starts[i] : ends[i]])
            else:
                pend += int(ends[i] - starts[i])
        if pend:
            dests.append(tmp[cur : cur + pend])
            cur += pend
        segs[p] = Segments(dests)
    return segs, pos_all, tmp


def group(parts: np.ndarray, nparts: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, bounds): ``order`` sorts by partition; partition p is ``order[b[p]:b[p+1]]``."""
    order = np.argsort(parts, kind="stable")
    counts = np.bincount(parts, minlength=nparts)
    return order, np.concatenate([[0], np.cumsum(counts)])


class DistTensor:
    """A distributed tensor (DGL's name and semantics) bound to an explicit context.

    ``DistTensor(shape, dtype, name=None, init_func=None, part_policy=None,
    persistent=False, ctx=...)``: attaches when ``name`` exists on the servers (shape and
    dtype must match), else creates it with ``init_func`` (a name, or a tuple
    ``("uniform", {"low": -1, "high": 1})``). A non-persistent tensor is released when
    the context closes (deleted when no other context holds it).
    """

    def __init__(
        self,
        shape: tuple[int, ...] | list[int],
        dtype: Any,
        name: str | None = None,
        init_func: str | tuple[str, dict[str, Any]] | Callable[..., Any] | None = None,
        part_policy: str | PartPolicy | None = None,
        persistent: bool = False,
        *,
        ctx: Any,
        attach_only: bool = False,
        seed: int = 0,
    ) -> None:
        ctx = getattr(ctx, "ctx", ctx)  # a DistGraph works too
        self.ctx = ctx
        self.shape = tuple(int(s) for s in shape)
        self.np_dtype = np_dtype(dtype)
        self.policy = resolve_policy(ctx, part_policy, self.shape[0] if self.shape else None)
        if not self.shape or self.shape[0] != self.policy.size:
            raise ConfigError(
                f"DistTensor {name!r}: {self.shape[:1]} rows, but {self.policy.policy_str} "
                f"has {self.policy.size}"
            )
        if name is None:
            name, persistent = f"anon-{uuid.uuid4().hex[:12]}", False
        self.name = name
        self.key = self.policy.key(name)
        self.persistent = persistent
        if attach_only:
            return
        if callable(init_func):
            raise ConfigError(
                "init_func must be a name (zeros, ones, uniform, normal, constant) or "
                "(name, {args}); functions are not shipped to servers"
            )
        kind, args = (
            (init_func, {}) if isinstance(init_func, str) or init_func is None else init_func
        )
        spec = {"kind": kind or "zeros", **args}
        calls = {
            p: Call(
                MsgType.INIT_TENSOR,
                {
                    "name": self.key,
                    "dtype": self.np_dtype.name,
                    "shape": [n, *self.shape[1:]],
                    "init": spec,
                    "persistent": persistent,
                    "seed": seed,
                },
            )
            for p, n in enumerate(self.policy.part_sizes())
        }
        res = ctx.call_many(calls)
        # hold a reference (released by ctx.close) only on tensors the servers keep counted
        if not all(f.meta.get("persistent", persistent) for f in res.values()):
            ctx.owned_tensors.append(self.key)

    @classmethod
    def attach(
        cls, ctx: Any, policy: PartPolicy, name: str, dtype: Any, row_shape: tuple
    ) -> DistTensor:
        """A view of an existing server tensor (partition data)."""
        return cls(
            (policy.size, *row_shape),
            dtype,
            name,
            part_policy=policy,
            ctx=ctx,
            persistent=True,
            attach_only=True,
        )

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return torch.from_numpy(np.empty(0, self.np_dtype)).dtype

    @property
    def part_policy(self) -> PartPolicy:
        return self.policy

    def __repr__(self) -> str:
        return (
            f"DistTensor({self.name!r}, shape={self.shape}, dtype={self.np_dtype}, "
            f"{self.policy.policy_str})"
        )

    def pull_numpy(self, ids: Any) -> np.ndarray:
        """Rows ``ids`` as a NumPy array (in the order given)."""
        idx = as_ids(ids, self.shape[0])
        row = self.shape[1:]
        out = np.empty((len(idx), *row), dtype=self.np_dtype)
        if len(idx) == 0:
            return out
        parts, local = self.policy.locate(idx)
        nparts = len(self.policy.offsets) - 1
        first = int(parts[0])
        if (parts == first).all():
            f = self.ctx.call(
                first, Call(MsgType.PULL, {"name": self.key}, [local], into=_into(out))
            )
            got = f.bufs[0]
            if got is out:
                return out
            if got.shape == out.shape and got.dtype == out.dtype and got.flags.writeable:
                return got  # in-process answer: already a fresh array
            out[...] = got
            return out
        order, b = group(parts, nparts)
        segs, scatter_pos, scratch = _segment_plan(parts, order, b, out)
        calls = {
            p: Call(
                MsgType.PULL,
                {"name": self.key},
                [local[order[b[p] : b[p + 1]]]],
                into=_segments_into(s),
            )
            for p, s in segs.items()
        }
        for p, f in self.ctx.call_many(calls).items():
            if not segs[p].received:  # in-process answer: copy into the destinations
                pos = 0
                for d in segs[p].arrays:
                    d[...] = f.bufs[0][pos : pos + d.shape[0]]
                    pos += d.shape[0]
        if scatter_pos.size:
            out[scatter_pos] = scratch
        return out

    def __getitem__(self, ids: Any) -> torch.Tensor:
        return torch.from_numpy(self.pull_numpy(ids))

    def _push(self, ids: Any, values: Any, op: str) -> None:
        idx = as_ids(ids, self.shape[0])
        if isinstance(values, torch.Tensor):
            values = values.detach().cpu().numpy()
        vals = np.asarray(values, dtype=self.np_dtype)
        vals = np.broadcast_to(vals, (len(idx), *self.shape[1:]))
        if len(idx) == 0:
            return
        parts, local = self.policy.locate(idx)
        order, b = group(parts, len(self.policy.offsets) - 1)
        calls = {}
        for p in range(len(b) - 1):
            if b[p + 1] > b[p]:
                sel = order[b[p] : b[p + 1]]
                calls[p] = Call(
                    MsgType.PUSH,
                    {"name": self.key, "op": op},
                    [local[sel], np.ascontiguousarray(vals[sel])],
                )
        self.ctx.call_many(calls)

    def __setitem__(self, ids: Any, values: Any) -> None:
        self._push(ids, values, "set")

    def scatter_add_(self, ids: Any, values: Any) -> None:
        """Atomically add ``values`` to rows ``ids`` on the servers (duplicates accumulate)."""
        self._push(ids, values, "add")
