"""``DistTensor``: a tensor partitioned like the nodes (or edges) of a graph, on the servers.

Reads group the IDs by owner partition, send one PULL per server with every
request in flight at once, and scatter the rows back in the caller's order (when
every ID is on one server the answer is received straight into the output). A
co-located trainer (``trainers.colocate``) gathers its own partition's rows from the
server's shared memory instead (:mod:`distgnn.distributed.localread`).
New tensors are created on every server with an initialiser given by name (``zeros``,
``ones``, ``uniform``, ``normal``, ``constant``) or with the values a callable
``init_func`` produced in the trainer; no code crosses the wire.
"""

from __future__ import annotations

import math
import weakref
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from distgnn import contract
from distgnn.distributed.context import DistContext, RequestLimits, resolve_ctx
from distgnn.distributed.featcache import answer_gen
from distgnn.distributed.localread import LocalReader
from distgnn.distributed.partition_book import PartitionPolicy
from distgnn.distributed.readplan import group, local_ids, owners, plan_read
from distgnn.errors import ConfigError
from distgnn.rpc.client import Call
from distgnn.rpc.protocol import Frame, Into, MsgType, Segments
from distgnn.rpc.values import cast_checked

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


def resolve_policy(ctx: Any, policy: Any, rows: int | None = None) -> PartitionPolicy:
    """A :class:`PartitionPolicy` from a policy object, a policy string (``node``,
    ``edge``, ``node:NTYPE``, ``edge:S:E:D``), a node or edge type name, or (None) the
    one node or edge type whose size is ``rows`` (DGL's inference)."""
    book = ctx.partition_book
    if isinstance(policy, PartitionPolicy):
        return policy
    if policy is None:
        if rows is None:
            raise ConfigError("part_policy is required (no row count to infer it from)")
        found = [f"node:{t}" for t in book.ntypes if book._num_nodes(t) == rows]
        found += [
            "edge:" + ":".join(c) for c in book.canonical_etypes if book._num_edges(c) == rows
        ]
        if len(found) != 1:
            why = "no node or edge type has" if not found else f"several types ({found}) have"
            raise ConfigError(f"part_policy: {why} {rows} rows; pass part_policy")
        return PartitionPolicy(found[0], book)
    if not isinstance(policy, str):
        raise ConfigError(f"part_policy must be a PartitionPolicy or a string, got {policy!r}")
    kind = policy.replace("~", ":").partition(":")[0]
    if kind in ("node", "edge"):
        return PartitionPolicy(policy, book)
    if policy in book.ntypes:
        return PartitionPolicy(f"node:{policy}", book)
    try:
        return PartitionPolicy("edge:" + ":".join(book.to_canonical_etype(policy)), book)
    except ConfigError:
        raise ConfigError(f"part_policy: {policy!r} is no node or edge type") from None


def _into(dest: np.ndarray) -> Into:
    """Receive a PULL answer straight into ``dest``."""

    def into(i: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        return dest

    return into


def _segments_into(segs: Segments) -> Into:
    def into(i: int, dtype: np.dtype, shape: tuple[int, ...]) -> Segments:
        return segs

    return into


def _in_place(sel: np.ndarray) -> bool:
    """Whether ascending positions ``sel`` are consecutive (a slice of the output)."""
    return int(sel[-1]) - int(sel[0]) + 1 == len(sel)


def _dest(out: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """Where the rows for ascending positions ``sel`` of ``out`` are received: their
    slice of ``out`` when consecutive, else a scratch array (scattered afterwards)."""
    if _in_place(sel):
        return out[int(sel[0]) : int(sel[-1]) + 1]
    return np.empty((len(sel), *out.shape[1:]), dtype=out.dtype)


Gens = dict[int, int | None]
"""The write generation each server's PULL answers reported (None: none or differing)."""


def _note(gens: Gens, p: int, f: Frame, gen: bool) -> None:
    """Record the generation of server ``p``'s answer ``f`` (when asked for)."""
    if not gen:
        return
    g = answer_gen(p, f.meta)
    gens[p] = g if gens.get(p, g) == g else None


InitFunc = str | tuple[str, dict[str, Any]] | Callable[..., Any] | None
_CHUNK_BYTES = 32 << 20


def _init_spec(init_func: InitFunc) -> dict[str, Any]:
    if callable(init_func):
        raise ConfigError("init_func: a function is called by the client, not named")
    kind, args = (init_func, {}) if isinstance(init_func, str) or init_func is None else init_func
    if not isinstance(args, dict):
        raise ConfigError("init_func: a named initialiser is a name or (name, {args})")
    return {"kind": kind or "zeros", **args}


class DistTensor:
    """DGL's distributed tensor: rows partitioned like one node or edge type.

    ``DistTensor(shape, dtype, name=None, init_func=None, part_policy=None,
    persistent=False, is_gdata=True, attach=True, *, ctx=None)``:

    * an existing ``name`` is attached (shape and dtype must match), else created;
    * unnamed tensors get ``anonymous-SCOPE-N`` (the n-th unnamed tensor of a context):
      every trainer creating them in the same order shares them, as in DGL;
    * ``init_func(shape, dtype)`` is called (by the creating trainer) once per partition
      with that partition's shape, as DGL's servers do; DistGNN also takes a named
      initialiser run on the servers (``"zeros"``, ``"ones"``, ``("uniform", {"low":
      -1, "high": 1})``, ``"normal"``, ``("constant", {"value": v})``), seeded by the
      tensor's name;
    * ``part_policy`` is inferred from ``shape[0]`` when one node or edge type has
      that many rows;
    * a non-persistent tensor is released on ``del`` (deleted on the servers when the
      last holder lets go) or when its context closes.

    ``is_gdata`` and ``attach`` are accepted for DGL compatibility (DistGNN has no client
    groups, and every tensor of a node or edge type is listed in ``ndata``/``edata``).
    """

    def __init__(
        self,
        shape: tuple[int, ...] | list[int],
        dtype: Any,
        name: str | None = None,
        init_func: InitFunc = None,
        part_policy: Any = None,
        persistent: bool = False,
        is_gdata: bool = True,
        attach: bool = True,
        *,
        ctx: Any = None,
        seed: int | None = None,
        _view: bool = False,
    ) -> None:
        ctx = resolve_ctx(ctx)
        self.ctx: DistContext = ctx
        self.shape = tuple(int(s) for s in shape)
        self.np_dtype = np_dtype(dtype)
        self.policy = resolve_policy(ctx, part_policy, self.shape[0] if self.shape else None)
        if not self.shape or self.shape[0] != self.policy.size:
            label = "(unnamed)" if name is None else repr(name)
            rows = self.shape[0] if self.shape else "no"
            raise ConfigError(
                f"DistTensor {label}: shape {self.shape} has {rows} rows, but "
                f"{self.policy.policy_str} has {self.policy.size}"
            )
        if name is None:
            if persistent:
                raise ConfigError("persistent: an unnamed DistTensor cannot be persistent")
            name = ctx.next_anonymous_name()
        self.name = name
        self.key = self.policy.key(name)
        self.persistent = persistent
        self.is_gdata = is_gdata
        self._finalizer: Any = None
        if _view:
            return
        if callable(init_func):
            created_persistent = self._create_with(init_func)
        else:
            created_persistent = self._create_named(init_func, seed)
        # hold a reference (released on del / close) unless the servers keep it anyway
        if not created_persistent:
            self._finalizer = weakref.finalize(self, ctx.release, self.key)
            ctx.track(self._finalizer)

    def _init_call(
        self, p: int, n: int, init: dict[str, Any], extra: dict[str, Any], bufs: tuple = ()
    ) -> Call:
        meta = {
            "name": self.key,
            "dtype": self.np_dtype.name,
            "shape": [n, *self.shape[1:]],
            "init": init,
            "persistent": self.persistent,
            **extra,
        }
        return Call(MsgType.INIT_TENSOR, meta, bufs)

    def _create_named(self, init_func: InitFunc, seed: int | None) -> bool:
        spec = _init_spec(init_func)
        s = zlib.crc32(self.key.encode()) if seed is None else int(seed)
        calls = {
            p: self._init_call(p, n, spec, {"seed": s})
            for p, n in enumerate(self.policy.part_sizes())
        }
        res = self.ctx.call_many(calls)
        return all(f.meta.get("persistent", self.persistent) for f in res.values())

    def _create_with(self, init_func: Callable[..., Any]) -> bool:
        """Attach where the tensor exists; elsewhere create it from ``init_func``'s data."""
        sizes = self.policy.part_sizes()
        probe = {
            p: self._init_call(p, n, {"kind": "zeros"}, {"attach_only": True})
            for p, n in enumerate(sizes)
        }
        res = self.ctx.call_many(probe)
        missing = [p for p, f in res.items() if not f.meta.get("exists", True)]
        torch_dtype = self.dtype
        for p in missing:
            data = init_func((sizes[p], *self.shape[1:]), torch_dtype)
            if isinstance(data, torch.Tensor):
                data = data.detach().cpu().numpy()
            arr = np.ascontiguousarray(np.asarray(data, dtype=self.np_dtype))
            if arr.shape != (sizes[p], *self.shape[1:]):
                raise ConfigError(
                    f"init_func returned shape {list(arr.shape)} for a partition of "
                    f"{[sizes[p], *self.shape[1:]]}"
                )
            res[p] = self._init_data(p, arr)
        return all(f.meta.get("persistent", self.persistent) for f in res.values())

    def _init_data(self, p: int, arr: np.ndarray) -> Frame:
        """Create partition ``p``'s slice with the values ``arr``: in one INIT_TENSOR when
        it fits the server's request limit, else created as zeros and written in PUSH
        requests that each fit (rows are visible to others as they arrive)."""
        lim = self.ctx.request_limits(p)
        if lim is None or arr.nbytes <= lim.max_bytes:
            return self.ctx.call(p, self._init_call(p, len(arr), {"kind": "data"}, {}, (arr,)))
        step = self.rows_per_request(lim)
        f = self.ctx.call(p, self._init_call(p, len(arr), {"kind": "zeros"}, {}))
        if f.meta.get("created", True):  # another trainer created it first: keep its data
            for i in range(0, len(arr), step):
                ids = np.arange(i, min(i + step, len(arr)), dtype=np.int64)
                self.ctx.call(p, self._push_call(ids, arr[i : i + len(ids)], "set"))
        return f

    def rows_per_request(self, lim: RequestLimits) -> int:
        """Rows (with their IDs) one write to a server with limits ``lim`` may carry;
        ConfigError when not even one fits."""
        row = self.np_dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        n = lim.rows(row)
        if n < 1:
            raise ConfigError(
                f"DistTensor {self.name!r}: one row is {row} bytes, more than a request to "
                f"the graph servers may carry ({lim.max_bytes} bytes: "
                f"{contract.ENV_SERVER_MAX_REQUEST_BYTES})"
            )
        return n

    def _push_call(self, local: np.ndarray, values: np.ndarray, op: str) -> Call:
        return Call(
            MsgType.PUSH,
            {"name": self.key, "op": op},
            [local, np.ascontiguousarray(values)],
        )

    def release(self) -> None:
        """Drop this handle's reference on the servers now (what ``del`` does later)."""
        if self._finalizer is not None and self._finalizer.alive:
            self._finalizer()
            self.ctx.flush_releases()

    @classmethod
    def view(
        cls, ctx: Any, policy: PartitionPolicy, name: str, dtype: Any, row_shape: tuple
    ) -> DistTensor:
        """A view of an existing server tensor (graph data); holds no reference."""
        return cls(
            (policy.size, *row_shape),
            dtype,
            name,
            part_policy=policy,
            persistent=True,
            ctx=ctx,
            _view=True,
        )

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return torch.from_numpy(np.empty(0, self.np_dtype)).dtype

    @property
    def part_policy(self) -> PartitionPolicy:
        return self.policy

    @property
    def tensor_name(self) -> str:
        return self.name

    @property
    def kvstore_key(self) -> str:
        """The tensor's name on the servers (``node/NTYPE/NAME``)."""
        return self.key

    def __reduce__(self) -> Any:
        """A DistTensor is a handle on server memory: pickling it (``torch.save``) is an
        error that names the replacement instead of an obscure socket error."""
        raise ConfigError(
            f"DistTensor {self.name!r} cannot be pickled or saved with torch.save (it lives "
            "on the graph servers); save its rows instead: torch.save(t[ids], path)"
        )

    def __repr__(self) -> str:
        return (
            f"DistTensor({self.name!r}, shape={self.shape}, dtype={self.np_dtype}, "
            f"{self.policy.policy_str})"
        )

    def _chunks(self) -> Any:
        row = max(1, self.np_dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64)))
        step = max(1, _CHUNK_BYTES // row)
        for i in range(0, self.shape[0], step):
            yield np.arange(i, min(i + step, self.shape[0]), dtype=np.int64)

    def count_nonzero(self) -> int:
        """Number of non-zero elements (read in chunks)."""
        return sum(int(np.count_nonzero(self.pull_numpy(ids))) for ids in self._chunks())

    def __or__(self, other: DistTensor) -> DistTensor:
        """Element-wise OR into a new unnamed tensor of the same policy (as DGL's)."""
        if not isinstance(other, DistTensor) or other.shape != self.shape:
            raise ConfigError("| needs a DistTensor of the same shape")
        out = DistTensor(self.shape, self.dtype, part_policy=self.policy, ctx=self.ctx)
        for ids in self._chunks():
            out[ids] = np.logical_or(self.pull_numpy(ids), other.pull_numpy(ids))
        return out

    def pull_numpy(self, ids: Any) -> np.ndarray:
        """Rows ``ids`` as a NumPy array (in the order given); through the process's
        feature cache when it has one (:mod:`distgnn.distributed.featcache`)."""
        idx = as_ids(ids, self.shape[0])
        cache = self.ctx.feature_cache
        if cache is not None and len(idx):
            out = np.empty((len(idx), *self.shape[1:]), dtype=self.np_dtype)
            if cache.read(self, idx, out) is not None:
                return out
            return self.pull_into(idx, out)[0]
        return self.pull_into(idx)[0]

    def _pull_call(self, ids: np.ndarray, gen: bool, into: Into | None = None) -> Call:
        meta: dict[str, Any] = {"name": self.key, "gen": True} if gen else {"name": self.key}
        return Call(MsgType.PULL, meta, [ids], into=into)

    def pull_into(
        self,
        idx: np.ndarray,
        out: np.ndarray | None = None,
        gen: bool = False,
        check: Sequence[int] = (),
        skip: np.ndarray | None = None,
    ) -> tuple[np.ndarray, Gens]:
        """Rows ``idx`` (int64 IDs) into ``out`` (allocated when None); returns the rows
        (``out``, or an in-process answer's fresh array) and, with ``gen``, the write
        generation each server that answered reported (None: none, or several differing).
        The servers in ``check`` are asked for theirs even without a row to read (a PULL
        of zero rows). Positions where the mask ``skip`` is true are not read (the
        caller fills them afterwards; they may hold anything)."""
        row = self.shape[1:]
        if out is None:
            out = np.empty((len(idx), *row), dtype=self.np_dtype)
        gens: Gens = {}
        if len(idx) == 0:
            if check:
                self._check_gens(check, {}, gens)
            return out, gens
        offsets = self.policy.offsets
        nparts = len(offsets) - 1
        parts = owners(idx, offsets, self.policy.kind, self.policy.type_str)
        first = int(parts[0])
        reader = self.ctx.local_reader
        lp = reader.part if reader is not None else -1
        if skip is not None:  # a partition of its own that is never asked
            parts[skip] = nparts
        one = skip is None and (nparts == 1 or bool((parts == first).all()))
        if one and all(p == first for p in check):
            local = local_ids([idx], offsets, first)  # int32 where the partition fits
            if first == lp and reader is not None and self._read_local(reader, local, [out]):
                return out, gens
            cap = self._pull_cap(first)
            if len(idx) > cap:  # beyond one request: consecutive slices of ``out``
                for i in range(0, len(idx), cap):
                    dest = out[i : i + cap]
                    f = self.ctx.call(first, self._pull_call(local[i : i + cap], gen, _into(dest)))
                    _note(gens, first, f, gen)
                    got = f.bufs[0]
                    if got is not dest:  # in-process answer
                        dest[...] = got
                return out, gens
            f = self.ctx.call(first, self._pull_call(local, gen, _into(out)))
            _note(gens, first, f, gen)
            got = f.bufs[0]
            if got is out:
                return out, gens
            if got.shape == out.shape and got.dtype == out.dtype and got.flags.writeable:
                return got, gens  # in-process answer: already a fresh array
            out[...] = got
            return out, gens
        plan = plan_read(idx, parts, offsets, out)
        if any(len(ids) > self._pull_cap(p) for p, ids in plan.ids.items()):
            order, b = group(parts, nparts + (skip is not None))
            local = idx - offsets[np.minimum(parts, nparts - 1)]
            caps = {p: self._pull_cap(p) for p in plan.ids}
            self._pull_split(local, order, b, out, caps, gen, gens)
            self._check_gens(check, gens, gens)
            return out, gens
        table = None
        if reader is not None and lp in plan.ids:
            table = reader.table(self.key, out, self.policy.part_sizes()[lp])
        segs = {p: Segments(plan.dests[p]) for p in plan.ids if p != lp or table is None}
        calls = {p: self._pull_call(plan.ids[p], gen, _segments_into(s)) for p, s in segs.items()}
        for p in check:
            if p not in calls and p not in plan.ids:
                calls[p] = self._pull_call(np.empty(0, np.int64), True)

        def read_local() -> None:  # while the servers gather and send theirs
            assert reader is not None and table is not None
            reader.gather_from(table, plan.ids[lp], plan.dests[lp])

        for p, f in self.ctx.call_many(calls, read_local if table is not None else None).items():
            _note(gens, p, f, gen or p not in segs)
            if p in segs and not segs[p].received:  # in-process: copy into the destinations
                pos = 0
                for d in segs[p].arrays:
                    d[...] = f.bufs[0][pos : pos + d.shape[0]]
                    pos += d.shape[0]
        plan.scatter_rows(out)
        return out, gens

    def _check_gens(self, check: Sequence[int], asked: Gens, gens: Gens) -> None:
        """Zero-row PULLs (``gen: true``) to the servers of ``check`` not in ``asked``."""
        calls = {p: self._pull_call(np.empty(0, np.int64), True) for p in check if p not in asked}
        if calls:
            for p, f in self.ctx.call_many(calls).items():
                _note(gens, p, f, True)

    def _pull_cap(self, p: int) -> int:
        """Rows one PULL to partition ``p``'s server may ask for (its announced limits)."""
        lim = self.ctx.request_limits(p)
        if lim is None:
            return 1 << 62
        row = self.np_dtype.itemsize * math.prod(self.shape[1:])
        n = lim.pull_rows(row)
        if n < 1:
            raise ConfigError(
                f"DistTensor {self.name!r}: one row is {row} bytes, more than an answer of "
                f"the graph servers may carry ({lim.max_reply_bytes} bytes: "
                f"{contract.ENV_SERVER_MAX_REPLY_BYTES})"
            )
        return n

    def _pull_split(
        self,
        local: np.ndarray,
        order: np.ndarray,
        b: np.ndarray,
        out: np.ndarray,
        caps: dict[int, int],
        gen: bool = False,
        gens: Gens | None = None,
    ) -> None:
        """A read larger than one request to some server: each server's rows in PULLs that
        fit its limits, one request per server in flight per round. Rows at consecutive
        positions of ``out`` (e.g. ``t[0:n]``) are received in place, others scattered.
        A co-located server's partition is read from its shared memory at once."""
        reader = self.ctx.local_reader
        batches: dict[int, list[np.ndarray]] = {}
        for p in range(len(b) - 1):
            if b[p + 1] == b[p] or p not in caps:  # nothing to read, or skipped rows
                continue
            sel = order[b[p] : b[p + 1]]  # ascending positions (the sort is stable)
            if reader is not None and p == reader.part:
                dest = _dest(out, sel)
                if self._read_local(reader, local[sel], [dest]):
                    if not _in_place(sel):
                        out[sel] = dest
                    continue
            step = caps[p]
            batches[p] = [sel[i : i + step] for i in range(0, len(sel), step)]
        for r in range(max((len(v) for v in batches.values()), default=0)):
            dests = {
                p: (sels[r], _dest(out, sels[r])) for p, sels in batches.items() if r < len(sels)
            }
            calls = {
                p: self._pull_call(local[sel], gen, _into(dest)) for p, (sel, dest) in dests.items()
            }
            for p, f in self.ctx.call_many(calls).items():
                if gens is not None:
                    _note(gens, p, f, gen)
                sel, dest = dests[p]
                if f.bufs[0] is not dest:  # in-process answer
                    dest[...] = f.bufs[0]
                if not _in_place(sel):
                    out[sel] = dest

    def _read_local(self, reader: LocalReader, ids: np.ndarray, dests: list[np.ndarray]) -> bool:
        """Co-located trainer: rows of the local partition from shared memory (False: TCP)."""
        return reader.gather(self.key, ids, dests, self.policy.part_sizes()[reader.part])

    def __getitem__(self, ids: Any) -> torch.Tensor:
        return torch.from_numpy(self.pull_numpy(ids))

    def _push(self, ids: Any, values: Any, op: str) -> None:
        idx = as_ids(ids, self.shape[0])
        if isinstance(values, torch.Tensor):
            values = values.detach().cpu().numpy()
        # refused, never cast: 1e300 into float32 or NaN into int32 is the caller's bug
        vals = cast_checked(np.asarray(values), self.np_dtype, f"DistTensor {self.name!r}")
        vals = np.broadcast_to(vals, (len(idx), *self.shape[1:]))
        if len(idx) == 0:
            return
        parts, local = self.policy.locate(idx)
        order, b = group(parts, len(self.policy.offsets) - 1)
        # one request per partition, several where a partition's rows exceed what the
        # server accepts in one; each round sends at most one request to every server
        batches: dict[int, list[np.ndarray]] = {}
        for p in range(len(b) - 1):
            if b[p + 1] > b[p]:
                sel = order[b[p] : b[p + 1]]
                lim = self.ctx.request_limits(p)
                step = len(sel) if lim is None else self.rows_per_request(lim)
                batches[p] = [sel[i : i + step] for i in range(0, len(sel), step)]
        for r in range(max((len(v) for v in batches.values()), default=0)):
            calls = {
                p: self._push_call(local[sels[r]], vals[sels[r]], op)
                for p, sels in batches.items()
                if r < len(sels)
            }
            self.ctx.call_many(calls)

    def __setitem__(self, ids: Any, values: Any) -> None:
        self._push(ids, values, "set")

    def scatter_add_(self, ids: Any, values: Any) -> None:
        """Atomically add ``values`` to rows ``ids`` on the servers (duplicates accumulate)."""
        self._push(ids, values, "add")
