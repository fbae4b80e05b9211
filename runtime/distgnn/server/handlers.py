"""Request handling of one worker: one method per message type, NumPy only.

Every handler takes a :class:`Request` (type, metadata, buffers, the client's session)
and returns the answer's metadata and buffers. Input is validated before any work
(types, ranges, and the :class:`~distgnn.server.limits.ServerLimits` on IDs, reply bytes
and sampled edges; all checks O(1) or vectorised); bad input raises
:class:`~distgnn.server.store.TensorError`, which the worker sends back as an ERROR frame
without closing the connection.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np

from distgnn import native
from distgnn.rpc.gather import default_gatherer
from distgnn.rpc.protocol import DTYPES, Gathered, MsgType
from distgnn.rpc.values import cast_checked
from distgnn.server import sampling
from distgnn.server.limits import ServerLimits
from distgnn.server.state import GraphState
from distgnn.server.store import SERVER_SESSION, ShmStore, TensorError, check_name, check_shape

Reply = tuple[dict[str, Any], list[Any]]
INITS = ("zeros", "ones", "uniform", "normal", "constant")
OPT_STATE = {"adagrad": ("sum",), "adam": ("step", "mem", "power")}
LIST_PAGE = 512
"""Tensors per LIST_TENSORS answer (names <= 120 bytes: an answer stays far below 1 MiB)."""
MAX_FANOUT = 1 << 31


@dataclass
class Request:
    """One decoded request and who sent it (the session given at HELLO)."""

    type: MsgType
    meta: dict[str, Any]
    bufs: list[np.ndarray] = field(default_factory=list)
    session: str = SERVER_SESSION


def _str(meta: dict[str, Any], key: str) -> str:
    v = meta.get(key)
    if not isinstance(v, str):
        raise TensorError(f"field {key!r} must be a string")
    return v


def _num(meta: dict[str, Any], key: str, default: float) -> float:
    v = meta.get(key, default)
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise TensorError(f"field {key!r} must be a number")
    try:
        f = float(v)
    except OverflowError:
        raise TensorError(f"field {key!r} is out of range") from None
    if not math.isfinite(f):
        raise TensorError(f"field {key!r} must be finite")
    return f


def _seed(meta: dict[str, Any], key: str = "seed") -> int:
    v = meta.get(key, 0)
    if type(v) is not int or not 0 <= v < 1 << 63:
        raise TensorError(f"field {key!r} must be an integer in [0, 2**63)")
    return v


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

    def __init__(
        self,
        store: ShmStore,
        graph: GraphState,
        zero_copy: bool = False,
        limits: ServerLimits | None = None,
    ) -> None:
        self.store, self.g = store, graph
        self.zero_copy = zero_copy
        self.lim = limits or ServerLimits()
        self.rng = np.random.default_rng()
        self.native = native.kernels()  # C sampling kernel, or None: the NumPy one
        self._local = threading.local()  # the session of the request this thread handles
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
            MsgType.ATTACH_TENSOR: self.attach_tensor,
            MsgType.DETACH_TENSOR: self.detach_tensor,
        }

    def handle(
        self,
        mtype: MsgType,
        meta: dict[str, Any],
        bufs: list[np.ndarray],
        session: str = SERVER_SESSION,
    ) -> Reply:
        """Answer one request (``session`` names the client for tensor ownership)."""
        return self.dispatch(Request(mtype, meta, bufs, session))

    def dispatch(self, req: Request) -> Reply:
        fn = self.table.get(req.type)
        if fn is None:
            raise TensorError(f"message type {req.type.name} is not a request")
        self._local.session = req.session
        return fn(req.meta, req.bufs)

    @property
    def session(self) -> str:
        """The session of the request being handled by the calling thread."""
        return getattr(self._local, "session", SERVER_SESSION)

    def _ids(self, bufs: Sequence[np.ndarray], i: int, n: int, what: str) -> np.ndarray:
        """Buffer ``i`` as int64 IDs in ``[0, n)``, at most ``max_ids`` of them."""
        if len(bufs) <= i:
            raise TensorError(f"missing buffer {i} ({what})")
        a = bufs[i]
        if a.ndim != 1 or a.dtype.kind not in "iu":
            raise TensorError(f"{what} must be a 1-D integer array")
        self._count(a.size, what)
        a = a.astype(np.int64, copy=False)
        if a.size and (int(a.min()) < 0 or int(a.max()) >= n):
            raise TensorError(f"{what} out of range [0, {n})")
        return a

    def _count(self, n: int, what: str) -> None:
        if n > self.lim.max_ids:
            raise TensorError(
                f"{n} {what} in one request exceed the limit of {self.lim.max_ids} "
                f"({self.lim.env_name('max_ids')}); split the request"
            )

    # --- metadata ---------------------------------------------------------------
    def get_meta(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        info = {k: v for k, v in self.g.info.items() if k != "manifest_url"}
        return info, []

    def ping(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        return {"part_id": self.g.part_id}, []

    def list_tensors(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        """One page of at most ``LIST_PAGE`` tensors after the name ``after`` (sorted);
        ``next`` is the ``after`` of the next page, or null after the last."""
        after = meta.get("after") or ""
        if not isinstance(after, str):
            raise TensorError("field 'after' must be a string")
        out: dict[str, Any] = {}
        nxt = None
        for name in self.store.names():
            if name.startswith("graph/") or name <= after:
                continue
            if len(out) == LIST_PAGE:
                nxt = max(out)
                break
            try:
                dt, shape = self.store.describe(name)
            except TensorError:
                continue
            out[name] = {"dtype": dt.name, "shape": list(shape)}
        return {"tensors": out, "next": nxt}, []

    def _public_name(self, meta: dict[str, Any]) -> str:
        """The request's tensor name; TensorError for the partition's internal ones."""
        name = _str(meta, "name")
        if name.startswith("graph/"):
            raise TensorError(f"tensor {name[:60]!r} is internal")
        return name

    def _tensor(self, meta: dict[str, Any]) -> tuple[str, np.ndarray]:
        name = self._public_name(meta)
        return name, self.store.get(name)

    # --- tensors ------------------------------------------------------------------
    def pull(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        """Rows of a tensor. With ``gen`` (clients with a feature cache) the answer also
        carries the tensor's write generation, read before any row is gathered: a write
        acknowledged before this request changed it (:mod:`distgnn.server.store`)."""
        want_gen = meta.get("gen", False)
        if not isinstance(want_gen, bool):
            raise TensorError("field 'gen' must be true or false")
        arr, gen = self.store.get_gen(self._public_name(meta))
        answer: dict[str, Any] = {"gen": gen} if want_gen else {}
        rows = self._ids(bufs, 0, arr.shape[0], "rows")
        row_bytes = arr.itemsize * math.prod(arr.shape[1:])
        if len(rows) * row_bytes > self.lim.max_reply_bytes:
            raise TensorError(
                f"PULL of {len(rows)} rows of {row_bytes} bytes exceeds the answer limit of "
                f"{self.lim.max_reply_bytes} bytes ({self.lim.env_name('max_reply_bytes')}); "
                "split the request"
            )
        if self.zero_copy and arr.ndim > 1:
            return answer, [Gathered(arr, rows)]
        out = np.empty((len(rows), *arr.shape[1:]), dtype=arr.dtype)
        default_gatherer().gather(arr, rows, out)
        return answer, [out]

    def _values(self, name: str, arr: np.ndarray, bufs: list[np.ndarray], n: int) -> np.ndarray:
        if len(bufs) < 2:
            raise TensorError(f"write to {name!r}: missing values buffer")
        v = bufs[1]
        if v.shape != (n, *arr.shape[1:]):
            raise TensorError(
                f"write to {name!r}: values of shape {list(v.shape)} for {n} rows of "
                f"{list(arr.shape[1:])}"
            )
        return v

    def push(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        name, arr = self._tensor(meta)
        rows = self._ids(bufs, 0, arr.shape[0], "rows")
        vals = cast_checked(self._values(name, arr, bufs, len(rows)), arr.dtype, "PUSH")
        op = meta.get("op", "set")
        if op not in ("set", "add"):
            raise TensorError(f"push op {op!r} is not 'set' or 'add'")
        with self.store.lock_rows(name, rows):
            if op == "set":
                arr[rows] = vals
            else:
                np.add.at(arr, rows, vals)
        self.store.bump(name)
        return {}, []

    def init_tensor(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        name = check_name(meta.get("name"), client=True)
        dtype = _str(meta, "dtype")
        if dtype not in DTYPES:
            raise TensorError(f"dtype {dtype[:20]!r} is not allowed")
        shape = check_shape(meta.get("shape"))
        spec = meta.get("init") or {"kind": "zeros"}
        if not isinstance(spec, dict):
            raise TensorError("field 'init' must be an object")
        if meta.get("attach_only") and name not in self.store.names():
            return {"created": False, "exists": False}, []
        seed = _seed(meta) + 7919 * self.g.part_id
        kind = spec.get("kind", "zeros")
        fill: Callable[[np.ndarray], None]
        if kind == "data":  # the initial values come with the request
            if len(bufs) != 1 or bufs[0].shape != shape:
                raise TensorError(f"init 'data' of {name!r} needs one buffer of shape {shape}")
            values = cast_checked(bufs[0], np.dtype(dtype), "init data")

            def fill(a: np.ndarray) -> None:
                a[...] = values

        elif kind in INITS:
            for key in ("value", "low", "high", "mean", "std"):
                if key in spec:
                    x = np.array([_num(spec, key, 0.0)])
                    if kind == "constant" or np.dtype(dtype).kind == "f":
                        cast_checked(x, np.dtype(dtype), f"init {key}")

            def fill(a: np.ndarray) -> None:
                fill_init(a, spec, seed)

        else:
            raise TensorError(f"init kind {str(kind)[:20]!r} is not one of {(*INITS, 'data')}")
        persistent = meta.get("persistent", False)
        if not isinstance(persistent, bool):
            raise TensorError("field 'persistent' must be true or false")
        created, persistent = self.store.init(
            name, np.dtype(dtype), shape, fill, persistent, self.session
        )
        return {"created": created, "persistent": persistent}, []

    def attach_tensor(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        """Hold a reference to an existing tensor (one DETACH releases it)."""
        name = check_name(meta.get("name"))
        if name.startswith("graph/"):
            raise TensorError(f"tensor {name[:60]!r} is internal")
        return self.store.attach(name, self.session), []

    def detach_tensor(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        """Release one reference; the last one removes the tensor."""
        name = check_name(meta.get("name"))
        if name.startswith("graph/"):
            raise TensorError(f"tensor {name[:60]!r} is internal")
        return {"removed": self.store.detach(name, self.session)}, []

    def delete_tensor(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        """The creator with ``force`` removes the tensor; a holder detaches (the last removes);
        any other session is refused."""
        name = check_name(meta.get("name"))
        if name.startswith("graph/"):
            raise TensorError(f"tensor {name[:60]!r} cannot be deleted")
        force = meta.get("force", False)
        if not isinstance(force, bool):
            raise TensorError("field 'force' must be true or false")
        if self.session == SERVER_SESSION and not force:
            force = True  # in-process callers own everything
        return {"removed": self.store.delete(name, self.session, force)}, []

    def _state(self, meta: dict[str, Any], which: str, rows: int) -> np.ndarray:
        states = meta.get("state")
        if not isinstance(states, dict) or not isinstance(states.get(which), str):
            raise TensorError(f"sparse update: field 'state' must name the {which!r} tensor")
        arr = self.store.get(states[which])
        if arr.shape[0] != rows or arr.dtype.kind != "f":
            raise TensorError(f"state tensor {states[which][:60]!r} does not match the table")
        return arr

    def sparse_update(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        """Apply Adagrad/Adam to the rows given (duplicates summed); the client names the
        state tensors (``state``: ``{sum}`` or ``{step, mem, power}``)."""
        name, emb = self._tensor(meta)
        if emb.dtype.kind != "f":
            raise TensorError(f"sparse update of {name!r}: not a float tensor")
        rows = self._ids(bufs, 0, emb.shape[0], "rows")
        grads = cast_checked(
            self._values(name, emb, bufs, len(rows)), np.dtype(np.float32), "gradients"
        )
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
            self._bump(name, meta, ("sum",))
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
            self._bump(name, meta, ("step", "mem", "power"))
        return {}, []

    def _bump(self, name: str, meta: dict[str, Any], states: tuple[str, ...]) -> None:
        """A sparse update wrote the table and its state tensors: new generations."""
        self.store.bump(name)
        for which in states:
            self.store.bump(meta["state"][which])

    # --- structure ------------------------------------------------------------------
    def sample_neighbors(
        self,
        meta: dict[str, Any],
        bufs: list[np.ndarray],
        into: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> Reply:
        """Sampled in-edges of the seeds. With ``runs`` (current clients) the answer is
        ``src, eid, run_seed, run_len[, etype]``: ``run_len[i]`` consecutive edges go to
        seed ``run_seed[i]`` (an index into the request's seeds), the edge type only on a
        graph with edge types; without it (older clients), per-edge
        ``src, dst, eid, etype``. ``into`` (a co-located trainer, in-process): int64
        arrays the native uniform draw may write the answer's ``src`` and ``eid`` into
        (its first edges; otherwise fresh arrays, the same answer)."""
        g = self.g
        seeds = self._ids(bufs, 0, g.n_owned, "seeds (local owned node IDs)")
        fanout = meta.get("fanout")
        replace = meta.get("replace", False)
        prob = meta.get("prob")
        runs = meta.get("runs", False)
        if not isinstance(replace, bool):
            raise TensorError("field 'replace' must be true or false")
        if not isinstance(runs, bool):
            raise TensorError("field 'runs' must be true or false")
        if prob is not None and not isinstance(prob, str):
            raise TensorError("field 'prob' must be an edge-data name")
        raw = list(fanout.values()) if isinstance(fanout, dict) else [fanout]
        fans = [f for f in raw if type(f) is int and -1 <= f < MAX_FANOUT]
        if not fans or len(fans) != len(raw) or not isinstance(fanout, int | dict):
            raise TensorError(
                "field 'fanout' must be an int in [-1, 2**31) or an object etype -> such int"
            )
        typed = isinstance(fanout, dict) or prob is not None
        rng = np.random.default_rng(_seed(meta)) if "seed" in meta else self.rng
        if isinstance(fanout, int) and prob is None and self.native is not None:
            # the kernel counts the edges (the limit) and gathers the sources as it draws
            # with ``into``: pos into the eid column (made in place below), src[pos] into src
            got = native.sample_uniform_src(
                self.native, g.indptr, g.src, seeds, fanout, replace, rng,
                self.lim.max_sample_edges,
                None if into is None or not g.eid_contiguous else (into[1], into[0]),
            )  # fmt: skip
            if isinstance(got, int):
                self._refuse_sample_work(len(seeds), got)
            pos, run_seed, run_len, src = got
        else:
            start_deg = sampling.seed_ranges(g.indptr, seeds)  # once: the check and the draw
            self._check_sample_work(len(seeds), start_deg[1], fans, replace, typed)
            if isinstance(fanout, int) and prob is None:
                pos, run_seed, run_len = sampling.sample_uniform_runs(
                    g.indptr, seeds, fanout, replace, rng, start_deg
                )
            else:
                pos, seg = self._sample_typed(seeds, fanout, replace, prob, rng)
                run_seed, run_len = sampling.runs_of(seg)
            src = np.take(g.src, pos)  # np.take: several times faster than fancy indexing
        et = np.take(g.etype, pos) if g.etype is not None else None
        # pos is this request's own array: contiguous edge IDs are computed in place
        eid = np.add(pos, g.edge_offset, out=pos) if g.eid_contiguous else np.take(g.eid, pos)
        if runs:
            out = [src, eid, run_seed.astype(np.int32), run_len.astype(np.int32)]
            return {"runs": True}, out if et is None else [*out, et.astype(np.int32, copy=False)]
        dst = g.node_offset + np.take(seeds, np.repeat(run_seed, run_len))
        et = np.zeros(len(pos), np.int32) if et is None else et.astype(np.int32, copy=False)
        return {}, [src, dst, eid, et]

    def _check_sample_work(
        self, num_seeds: int, deg: np.ndarray, fans: list[int], replace: bool, typed: bool
    ) -> None:
        """Refuse a request that would touch more than ``max_sample_edges`` edges: all
        in-edges of the seeds (``deg``: their in-degrees) for typed or weighted sampling
        (candidates are listed), else ``min(degree, fanout)`` per seed (``fanout`` per
        seed with edges, with replacement). The native kernel counts the uniform case
        itself (the same count)."""
        if typed or any(f < 0 for f in fans):
            work = int(deg.sum())
            if replace:
                work += int(np.count_nonzero(deg)) * sum(max(f, 0) for f in fans)
        elif replace:
            work = int(np.count_nonzero(deg)) * fans[0]
        else:
            work = int(np.minimum(deg, fans[0]).sum())
        if work > self.lim.max_sample_edges:
            self._refuse_sample_work(num_seeds, work)

    def _refuse_sample_work(self, num_seeds: int, work: int) -> NoReturn:
        raise TensorError(
            f"SAMPLE_NEIGHBORS of {num_seeds} seeds would touch {work} edges, over the "
            f"limit of {self.lim.max_sample_edges} "
            f"({self.lim.env_name('max_sample_edges')}); use fewer seeds or a smaller fanout"
        )

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
                raise TensorError(
                    f"prob {prob[:60]!r}: no edge data of that name for {name}"
                ) from None
            if arr.ndim != 1:
                raise TensorError(f"prob {prob[:60]!r} of {name} must be 1-D")
            w[sel] = arr[g.eid[pos[sel]] - g.edge_offset - g.etype_starts[name]]
        if (w < 0).any() or not np.isfinite(w).all():
            raise TensorError(f"prob {prob[:60]!r} has negative or non-finite weights")
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
                if k not in names:
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
        pos = g.eidpos[self._ids(bufs, 0, g.m_owned, "edge IDs (local owned)")]
        dst_local = np.searchsorted(g.indptr, pos, side="right") - 1
        return {}, [g.src[pos], g.node_offset + dst_local]

    def degrees(self, meta: dict[str, Any], bufs: list[np.ndarray]) -> Reply:
        g = self.g
        if meta.get("dir") == "in":
            v = self._ids(bufs, 0, g.n_owned, "node IDs (local owned)")
            return {}, [g.indptr[v + 1] - g.indptr[v]]
        if len(bufs) < 1 or bufs[0].ndim != 1 or bufs[0].dtype.kind not in "iu":
            raise TensorError("out-degrees need a 1-D integer array of global node IDs")
        self._count(bufs[0].size, "node IDs")
        loc = g.global_to_local(bufs[0].astype(np.int64, copy=False))
        out = np.zeros(len(loc), dtype=np.int64)
        hit = loc >= 0
        out[hit] = g.outdeg[loc[hit]]
        return {}, [out]
