"""Request handling of one worker: one method per message type, NumPy only.

Every handler takes the request's metadata and buffers and returns the answer's
metadata and buffers. Bad input raises :class:`~distgnn.server.store.TensorError`
(or another ``DistGNNError``), which the worker sends back as an ERROR frame
without closing the connection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from distgnn.rpc.gather import default_gatherer
from distgnn.rpc.protocol import DTYPES, Gathered, MsgType
from distgnn.server import sampling
from distgnn.server.state import GraphState
from distgnn.server.store import ShmStore, TensorError

Reply = tuple[dict[str, Any], list[Any]]
INITS = ("zeros", "ones", "uniform", "normal", "constant")
OPT_STATE = {"adagrad": ("sum",), "adam": ("step", "mem", "power")}


def _str(meta: dict[str, Any], key: str) -> str:
    v = meta.get(key)
    if not isinstance(v, str):
        raise TensorError(f"field {key!r} must be a string")
    return v


def _num(meta: dict[str, Any], key: str, default: float) -> float:
    v = meta.get(key, default)
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise TensorError(f"field {key!r} must be a number")
    return float(v)


def _ids(bufs: Sequence[np.ndarray], i: int, n: int, what: str) -> np.ndarray:
    if len(bufs) <= i:
        raise TensorError(f"missing buffer {i} ({what})")
    a = bufs[i]
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise TensorError(f"{what} must be a 1-D integer array")
    a = a.astype(np.int64, copy=False)
    if a.size and (int(a.min()) < 0 or int(a.max()) >= n):
        raise TensorError(f"{what} out of range [0, {n})")
    return a


def fill_init(arr: np.ndarray, spec: dict[str, Any], seed: int) -> None:
    """Initialise a new tensor by name (no code on the wire)."""
    kind = spec.get("kind", "zeros")
    if kind not in INITS:
        raise TensorError(f"init kind {kind!r} is not one of {INITS}")
    rng = np.random.default_rng(seed)
    rows = arr.shape[0] if arr.ndim else 1
    step = max(1, (16 << 20) // max(1, arr.itemsize * max(1, arr.size // max(1, rows))))
    for i in range(0, rows, step):
        blk = arr[i : i + step]
        if kind == "zeros":
            blk[...] = 0
        elif kind == "ones":
            blk[...] = 1
        elif kind == "constant":
            blk[...] = _num(spec, "value", 0.0)
        elif kind == "uniform":
            blk[...] = rng.uniform(_num(spec, "low", -1.0), _num(spec, "high", 1.0), blk.shape)
        else:
            blk[...] = rng.normal(_num(spec, "mean", 0.0), _num(spec, "std", 1.0), blk.shape)


class Handlers:
    """Dispatch of one worker; stateless apart from its RNG.

    With ``zero_copy`` (server workers), PULL answers are streamed straight from the
    shared memory (:class:`~distgnn.rpc.protocol.Gathered`); in-process callers get copies.
    """

    def __init__(self, store: ShmStore, graph: GraphState, zero_copy: bool = False) -> None:
        self.store, self.g = store, graph
        self.zero_copy = zero_copy
        self.rng = np.random.default_rng()
        self.table: dict[MsgType, Callable[[dict[str, Any], list[np.ndarray]], Reply]] = {
            MsgType.GET_META: self.get_meta,
            MsgType.PING: self.ping,
            MsgType.PULL: self.pull,
            MsgType.PUSH: self.push,
            MsgType.INIT_TENSOR: self.init_tensor,
            MsgType.DELETE_TENSOR: self.delete_tensor,
            MsgType.LIST_TENSORS: self.list_tensors,
            MsgType.SPARSE_UPDATE: self.sparse_update,
            MsgType.SAMPLE_NEIGHBORS: self.sample_neighbors,
            MsgType.FIND_EDGES: self.find_edges,
            MsgType.DEGREES: self.degrees,
        }

    def handle(self, mtype: MsgType, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        fn = self.table.get(mtype)
        if fn is None:
            raise TensorError(f"message type {mtype.name} is not a request")
        return fn(meta, bufs)

    # --- metadata ---------------------------------------------------------------
    def get_meta(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        info = {k: v for k, v in self.g.info.items() if k != "manifest_url"}
        return info, []

    def ping(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        return {"part_id": self.g.part_id}, []

    def list_tensors(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        out = {}
        for name in self.store.names():
            if name.startswith("graph/"):
                continue
            try:
                a = self.store.get(name)
            except TensorError:
                continue
            out[name] = {"dtype": a.dtype.name, "shape": list(a.shape)}
        return {"tensors": out}, []

    def _tensor(self, meta: dict[str, Any]) -> tuple[str, np.ndarray]:
        name = _str(meta, "name")
        if name.startswith("graph/"):
            raise TensorError(f"tensor {name!r} is internal")
        return name, self.store.get(name)

    # --- tensors ------------------------------------------------------------------
    def pull(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        name, arr = self._tensor(meta)
        rows = _ids(bufs, 0, arr.shape[0], f"rows of {name!r}")
        if self.zero_copy and arr.ndim > 1:
            return {}, [Gathered(arr, rows)]
        out = np.empty((len(rows), *arr.shape[1:]), dtype=arr.dtype)
        default_gatherer().gather(arr, rows, out)
        return {}, [out]

    def _values(self, name: str, arr: np.ndarray, bufs: list[np.ndarray], n: int) -> np.ndarray:
        if len(bufs) < 2:
            raise TensorError(f"write to {name!r}: missing values buffer")
        v = bufs[1]
        if v.shape != (n, *arr.shape[1:]):
            raise TensorError(
                f"write to {name!r}: values of shape {list(v.shape)} for {n} rows of "
                f"{list(arr.shape[1:])}"
            )
        return v.astype(arr.dtype, copy=False)

    def push(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        name, arr = self._tensor(meta)
        rows = _ids(bufs, 0, arr.shape[0], f"rows of {name!r}")
        vals = self._values(name, arr, bufs, len(rows))
        op = meta.get("op", "set")
        if op not in ("set", "add"):
            raise TensorError(f"push op {op!r} is not 'set' or 'add'")
        with self.store.lock_rows(name, rows):
            if op == "set":
                arr[rows] = vals
            else:
                np.add.at(arr, rows, vals)
        return {}, []

    def init_tensor(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        name = _str(meta, "name")
        dtype = _str(meta, "dtype")
        if dtype not in DTYPES:
            raise TensorError(f"dtype {dtype!r} is not allowed")
        shape = meta.get("shape")
        if (
            not isinstance(shape, list)
            or not shape
            or not all(isinstance(s, int) and s >= 0 for s in shape)
        ):
            raise TensorError("field 'shape' must be a non-empty list of sizes")
        spec = meta.get("init") or {"kind": "zeros"}
        if not isinstance(spec, dict):
            raise TensorError("field 'init' must be an object")
        if meta.get("attach_only") and name not in self.store.names():
            return {"created": False, "exists": False}, []
        seed = int(_num(meta, "seed", 0)) + 7919 * self.g.part_id
        kind = spec.get("kind", "zeros")
        if kind == "data":  # the initial values come with the request
            if len(bufs) != 1 or bufs[0].shape != tuple(shape):
                raise TensorError(f"init 'data' of {name!r} needs one buffer of shape {shape}")
            values = bufs[0]

            def fill(a: np.ndarray) -> None:
                a[...] = values

        elif kind in INITS:

            def fill(a: np.ndarray) -> None:
                fill_init(a, spec, seed)

        else:
            raise TensorError(f"init kind {kind!r} is not one of {(*INITS, 'data')}")
        created, persistent = self.store.init(
            name, np.dtype(dtype), tuple(shape), fill, bool(meta.get("persistent", False))
        )
        return {"created": created, "persistent": persistent}, []

    def delete_tensor(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        name = _str(meta, "name")
        if name.startswith("graph/") or "/" not in name:
            raise TensorError(f"tensor {name!r} cannot be deleted")
        removed = self.store.delete(name)
        return {"removed": removed}, []

    def _state(self, meta: dict[str, Any], which: str, rows: int) -> np.ndarray:
        states = meta.get("state")
        if not isinstance(states, dict) or not isinstance(states.get(which), str):
            raise TensorError(f"sparse update: field 'state' must name the {which!r} tensor")
        arr = self.store.get(states[which])
        if arr.shape[0] != rows or arr.dtype.kind != "f":
            raise TensorError(f"state tensor {states[which]!r} does not match the table")
        return arr

    def sparse_update(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        """Apply Adagrad/Adam to the rows given (duplicates summed); the client names the
        state tensors (``state``: ``{sum}`` or ``{step, mem, power}``)."""
        name, emb = self._tensor(meta)
        if emb.dtype.kind != "f":
            raise TensorError(f"sparse update of {name!r}: not a float tensor")
        rows = _ids(bufs, 0, emb.shape[0], f"rows of {name!r}")
        grads = self._values(name, emb, bufs, len(rows)).astype(np.float32, copy=False)
        opt = meta.get("opt")
        if opt not in OPT_STATE:
            raise TensorError(f"optimizer {opt!r} is not one of {sorted(OPT_STATE)}")
        lr, eps = _num(meta, "lr", 0.01), _num(meta, "eps", 1e-10)
        uniq, inv = np.unique(rows, return_inverse=True)
        g = np.zeros((len(uniq), *emb.shape[1:]), dtype=np.float32)
        np.add.at(g, inv, grads)
        n = emb.shape[0]
        if opt == "adagrad":
            state = self._state(meta, "sum", n)
            with self.store.lock_rows(name, uniq):
                s = state[uniq] + g * g
                state[uniq] = s
                emb[uniq] -= (lr * g / (np.sqrt(s) + eps)).astype(emb.dtype)
        else:
            b1, b2 = _num(meta, "beta1", 0.9), _num(meta, "beta2", 0.999)
            t_s = self._state(meta, "step", n)
            m_s = self._state(meta, "mem", n)
            v_s = self._state(meta, "power", n)
            with self.store.lock_rows(name, uniq):
                m = b1 * m_s[uniq] + (1 - b1) * g
                v = b2 * v_s[uniq] + (1 - b2) * g * g
                t = t_s[uniq] + 1
                m_s[uniq], v_s[uniq], t_s[uniq] = m, v, t
                tb = t.reshape((-1,) + (1,) * (emb.ndim - 1)).astype(np.float64)
                mhat = m / (1 - b1**tb)
                vhat = v / (1 - b2**tb)
                emb[uniq] -= (lr * mhat / (np.sqrt(vhat) + eps)).astype(emb.dtype)
        return {}, []

    # --- structure ------------------------------------------------------------------
    def sample_neighbors(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        g = self.g
        seeds = _ids(bufs, 0, g.n_owned, "seeds (local owned node IDs)")
        fanout = meta.get("fanout")
        replace = bool(meta.get("replace", False))
        prob = meta.get("prob")
        rng = np.random.default_rng(meta["seed"]) if "seed" in meta else self.rng
        if isinstance(fanout, int) and not isinstance(fanout, bool) and prob is None:
            pos, seg = sampling.sample_uniform(g.indptr, seeds, fanout, replace, rng)
        elif isinstance(fanout, int | dict) and not isinstance(fanout, bool):
            pos, seg = self._sample_typed(seeds, fanout, replace, prob, rng)
        else:
            raise TensorError("field 'fanout' must be an int or an object etype -> int")
        # np.take: several times faster than fancy indexing for these int64 gathers
        src = np.take(g.local2global, np.take(g.indices, pos))
        dst = g.node_offset + np.take(seeds, seg)
        eid = np.take(g.eid, pos)
        et = np.take(g.etype, pos) if g.etype is not None else np.zeros(len(pos), np.int32)
        return {}, [src, dst, eid, et.astype(np.int32, copy=False)]

    def _weights(self, prob: str, pos: np.ndarray) -> np.ndarray:
        g = self.g
        w = np.zeros(len(pos), dtype=np.float64)
        et = g.etype[pos] if g.etype is not None else np.zeros(len(pos), np.int32)
        for t, name in enumerate(g.manifest.etype_names):
            sel = np.flatnonzero(et == t)
            if not len(sel):
                continue
            try:
                arr = self.store.get(f"edge/{name}/{prob}")
            except TensorError:
                raise TensorError(f"prob {prob!r}: no edge data of that name for {name}") from None
            if arr.ndim != 1:
                raise TensorError(f"prob {prob!r} of {name} must be 1-D")
            w[sel] = arr[g.eid[pos[sel]] - g.edge_offset - g.etype_starts[name]]
        if (w < 0).any() or not np.isfinite(w).all():
            raise TensorError(f"prob {prob!r} has negative or non-finite weights")
        return w

    def _sample_typed(
        self,
        seeds: np.ndarray,
        fanout: int | dict[str, Any],
        replace: bool,
        prob: str | None,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, np.ndarray]:
        g = self.g
        start = g.indptr[seeds]
        cand, seg = sampling.ranges(start, g.indptr[seeds + 1] - start)
        names = g.manifest.etype_names
        if isinstance(fanout, int):
            plan: list[tuple[int | None, int]] = [(None, fanout)]
        else:
            plan = []
            for k, f in fanout.items():
                if k not in names or not isinstance(f, int):
                    raise TensorError(f"fanout key {k!r} is not an edge type of {names}")
                plan.append((names.index(k), f))
        out_p, out_s = [], []
        for t, f in plan:
            c, s = cand, seg
            if t is not None and g.etype is not None:
                keep = g.etype[c] == t
                c, s = c[keep], s[keep]
            w = self._weights(prob, c) if prob is not None else None
            p, q = sampling.sample_candidates(c, s, len(seeds), f, replace, rng, w)
            out_p.append(p)
            out_s.append(q)
        return np.concatenate(out_p), np.concatenate(out_s)

    def find_edges(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        g = self.g
        pos = g.eidpos[_ids(bufs, 0, g.m_owned, "edge IDs (local owned)")]
        dst_local = np.searchsorted(g.indptr, pos, side="right") - 1
        return {}, [g.local2global[g.indices[pos]], g.node_offset + dst_local]

    def degrees(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        g = self.g
        if meta.get("dir") == "in":
            v = _ids(bufs, 0, g.n_owned, "node IDs (local owned)")
            return {}, [g.indptr[v + 1] - g.indptr[v]]
        if len(bufs) < 1 or bufs[0].ndim != 1 or bufs[0].dtype.kind not in "iu":
            raise TensorError("out-degrees need a 1-D integer array of global node IDs")
        loc = g.global_to_local(bufs[0].astype(np.int64, copy=False))
        out = np.zeros(len(loc), dtype=np.int64)
        hit = loc >= 0
        out[hit] = g.outdeg[loc[hit]]
        return {}, [out]
