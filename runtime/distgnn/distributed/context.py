"""``initialize()`` and the :class:`DistContext` every trainer-side object uses.

A context talks to the graph servers through a :class:`~distgnn.rpc.client.ServerPool`
or, in standalone mode, to in-process request handlers over every partition
(:class:`LocalBackend`): the same handlers the servers run, so both modes behave
alike. ``initialize()`` returns the context and also makes it the process default
(held by :data:`DEFAULT`, an explicit holder object), so DGL-style code such as
``DistGraph("cora")`` or ``DistTensor(shape, dtype)`` finds it; every object also
takes ``ctx=`` to use another context explicitly.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from distgnn import contract
from distgnn.distributed.featcache import FeatureCache, cache_budget
from distgnn.distributed.localread import LocalReader
from distgnn.distributed.localsample import (
    LocalSampler,
    local_sampling_enabled,
    open_local_sampler,
)
from distgnn.errors import ConfigError, DistGNNError, RequestTimeout
from distgnn.log import kv
from distgnn.partition.book import PartitionBook
from distgnn.partition.manifest import Manifest
from distgnn.rpc.client import Call, ServerPool, Timeouts
from distgnn.rpc.protocol import FLAG_RESPONSE, Frame, MsgType

log = logging.getLogger("distgnn.distributed")

DEFAULT_SERVER_PORT = 30050
"""Port of an ``ip_config`` line without one (DGL's and ``distgnn serve``'s default)."""


class Backend(Protocol):
    """Where requests go: real servers or in-process handlers."""

    def call_many(self, calls: Mapping[int, Call]) -> dict[int, Frame]: ...

    def close(self) -> None: ...


class LocalBackend:
    """Standalone mode: every partition loaded in this process, no servers or sockets."""

    def __init__(self, manifest_url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        from distgnn.partition.loader import load_manifest
        from distgnn.server.handlers import Handlers
        from distgnn.server.state import GraphState, load_into_store
        from distgnn.server.store import ShmStore

        man = load_manifest(manifest_url)
        self.stores: list[ShmStore] = []
        self.handlers: list[Handlers] = []
        try:
            for p in range(man.num_parts):
                store = ShmStore.create(prefix=f"distgnn-standalone-p{p}-")
                self.stores.append(store)
                load_into_store(manifest_url, p, store, storage_options)
                self.handlers.append(Handlers(store, GraphState.attach(store)))
        except BaseException:
            self.close()
            raise

    def call_many(self, calls: Mapping[int, Call]) -> dict[int, Frame]:
        from distgnn.server.store import TensorError

        out = {}
        for part, c in calls.items():
            try:
                meta, bufs = self.handlers[part].handle(c.mtype, dict(c.meta), list(c.bufs))
            except TensorError as e:
                from distgnn.errors import ServerError

                raise ServerError(f"partition {part}: {c.mtype.name} failed: {e}") from e
            out[part] = Frame(c.mtype, 0, meta, bufs, FLAG_RESPONSE)
        return out

    def close(self) -> None:
        for s in self.stores:
            s.close()
        self.stores.clear()


@dataclass(frozen=True)
class RequestLimits:
    """What one request to a server may carry and one answer may hold, as its HELLO
    answer announced (``DISTGNN_SERVER_MAX_REQUEST_BYTES``, ``DISTGNN_SERVER_MAX_IDS``,
    ``DISTGNN_SERVER_MAX_REPLY_BYTES``; the answer also within what this client receives)."""

    max_bytes: int
    """buffer bytes of one request (the frame's metadata is counted apart)"""
    max_ids: int
    max_reply_bytes: int = 1 << 62
    """buffer bytes of one answer"""

    def rows(self, row_bytes: int, id_bytes: int = 8) -> int:
        """Rows of ``row_bytes`` (plus an ID each) one request can carry (0: not even one)."""
        return min(self.max_ids, self.max_bytes // max(1, row_bytes + id_bytes))

    def pull_rows(self, row_bytes: int, id_bytes: int = 8) -> int:
        """Rows of ``row_bytes`` one PULL can ask for (0: not even one): the IDs within
        the request limits, the rows within the answer limit."""
        return min(
            self.max_ids, self.max_bytes // id_bytes, self.max_reply_bytes // max(1, row_bytes)
        )


def trainer_partition(rank: int, world_size: int, num_parts: int) -> int:
    """The partition a trainer belongs to (DGL: ranks of one machine are contiguous)."""
    if world_size >= num_parts and world_size % num_parts == 0:
        return rank // (world_size // num_parts)
    return rank % num_parts


def _scope(e: Mapping[str, str], token: str | None = None) -> str:
    """What makes generated tensor names unique to one job run on shared servers: the
    job's name, and a digest of its token and rendezvous (never the token itself)."""
    job = re.sub(r"[^A-Za-z0-9_.\-]", "-", e.get(contract.ENV_JOB_NAME, ""))[:40]
    run = (
        f"{token or ''}|{e.get(contract.ENV_MASTER_ADDR, '')}|{e.get(contract.ENV_MASTER_PORT, '')}"
    )
    if run == "||":
        return job or "default"
    digest = hashlib.sha256(run.encode()).hexdigest()[:10]
    return f"{job}-{digest}" if job else digest


@dataclass
class DistContext:
    """Connections (or the standalone backend), the manifest and the partition book."""

    backend: Backend
    manifest: Manifest
    book: PartitionBook
    standalone: bool
    rank: int = 0
    world_size: int = 1
    scope: str = "default"
    request_timeout: float = 60.0
    pending_deletes: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    closed: bool = False
    _anon_count: int = 0
    _barriers: int = 0
    _finalizers: list[Any] = field(default_factory=list)
    _barrier_key: str | None = None
    _gpb: Any = None
    local_reader: LocalReader | None = None
    """Co-located trainer: reads the local partition's rows from shared memory."""
    local_sampler: LocalSampler | None = None
    """Co-located trainer: samples the local partition's seeds from shared memory."""
    feature_cache: FeatureCache | None = None
    """Hot rows of other partitions kept in this process (``DISTGNN_FEATURE_CACHE_MB``)."""

    @property
    def num_parts(self) -> int:
        return self.manifest.num_parts

    @property
    def partid(self) -> int:
        """This trainer's partition: ``rank // (world_size / num_parts)`` as in DGL."""
        return trainer_partition(self.rank, self.world_size, self.num_parts)

    @property
    def partition_book(self) -> Any:
        """DGL's partition book (:class:`RangePartitionBook`) with this trainer's ``partid``."""
        if self._gpb is None:
            from distgnn.distributed.partition_book import RangePartitionBook

            self._gpb = RangePartitionBook(self.book, self.partid)
        return self._gpb

    def next_anonymous_name(self) -> str:
        """``anonymous-SCOPE-N``: the n-th unnamed tensor has the same name on every trainer."""
        name = f"anonymous-{self.scope}-{self._anon_count}"
        self._anon_count += 1
        return name

    def call(self, part: int, call: Call) -> Frame:
        return self.call_many({part: call})[part]

    def call_many(
        self, calls: Mapping[int, Call], between: Callable[[], None] | None = None
    ) -> dict[int, Frame]:
        """Answers of ``calls`` by partition; ``between`` runs while they are in flight."""
        if self.closed:
            raise ConfigError("this DistContext is closed (call initialize() again)")
        if self.pending_deletes:
            self._flush_deletes()
        if between is None:
            return self.backend.call_many(calls)
        if isinstance(self.backend, ServerPool):
            return self.backend.call_many(calls, between)
        between()
        return self.backend.call_many(calls)

    def request_limits(self, part: int) -> RequestLimits | None:
        """The request limits partition ``part``'s server announced (None: in-process, or
        a server that announced none). Read per call: a restarted server may differ."""
        if not isinstance(self.backend, ServerPool):
            return None
        lim = self.backend.conns[part].server_info.get("limits")
        if not isinstance(lim, dict):
            return None
        nbytes, nids = lim.get("max_request_bytes"), lim.get("max_ids")
        if not isinstance(nbytes, int) or not isinstance(nids, int) or nbytes <= 0 or nids <= 0:
            return None
        mine = self.backend.conns[part].limits
        reply = min(mine.max_buf_bytes, mine.max_total_bytes)
        server_reply = lim.get("max_reply_bytes")
        if isinstance(server_reply, int) and server_reply > 0:
            reply = min(reply, server_reply)
        return RequestLimits(nbytes, nids, reply)

    def broadcast(self, mtype: MsgType, meta: dict[str, Any]) -> dict[int, Frame]:
        """Send the same request to every partition at once."""
        return self.call_many({p: Call(mtype, meta) for p in range(self.num_parts)})

    def release(self, key: str, parts: tuple[int, ...] | None = None) -> None:
        """Drop this process's reference to tensor ``key`` before the next request.

        Called from finalizers (``del t``), which may run inside another request; the
        DELETE goes out at the start of the next request (or at ``close``).
        """
        self.pending_deletes.append((key, tuple(range(self.num_parts)) if parts is None else parts))

    def track(self, finalizer: Any) -> None:
        """Remember a live tensor's finalizer so ``close`` releases it too."""
        self._finalizers = [f for f in self._finalizers if f.alive]
        self._finalizers.append(finalizer)

    def flush_releases(self) -> None:
        """Send the pending releases now."""
        if not self.closed:
            self._flush_deletes()

    def _flush_deletes(self) -> None:
        while self.pending_deletes:
            key, parts = self.pending_deletes.pop()
            calls = {p: Call(MsgType.DETACH_TENSOR, {"name": key}) for p in parts}
            try:
                self.backend.call_many(calls)
            except DistGNNError as e:
                log.warning("could not release tensor", extra=kv(name=key, error=str(e)))

    def barrier(self) -> None:
        """Block until every trainer (``world_size`` of them) reached this barrier.

        With ``torch.distributed`` initialised its barrier is used; otherwise a counter
        on partition 0 that every trainer increments and polls until all arrived.
        """
        if self.world_size <= 1:
            return
        import torch.distributed as tdist

        if tdist.is_available() and tdist.is_initialized():
            tdist.barrier()
            return
        key = f"node/_barrier/{self.scope}"
        self._barriers += 1
        if self._barriers == 1:
            self.call(
                0,
                Call(
                    MsgType.INIT_TENSOR,
                    {"name": key, "dtype": "int64", "shape": [1], "init": {"kind": "zeros"}},
                ),
            )
            self._barrier_key = key
        one = [np.zeros(1, np.int64), np.ones(1, np.int64)]
        self.call(0, Call(MsgType.PUSH, {"name": key, "op": "add"}, one))
        target = self._barriers * self.world_size
        deadline = time.monotonic() + self.request_timeout
        wait = 0.001
        while True:
            got = int(self.call(0, Call(MsgType.PULL, {"name": key}, one[:1])).bufs[0][0])
            if got >= target:
                return
            if time.monotonic() > deadline:
                raise RequestTimeout(
                    f"barrier: {got - target + self.world_size} of {self.world_size} trainers "
                    f"arrived within {self.request_timeout:.0f}s"
                )
            time.sleep(wait)
            wait = min(wait * 2, 0.05)

    def close(self) -> None:
        """Release the non-persistent tensors this context holds, then disconnect."""
        if self.closed:
            return
        for fin in self._finalizers:
            fin()  # a live tensor's finalizer: queues its release (no-op if already run)
        self._finalizers.clear()
        if self._barrier_key is not None:
            self.release(self._barrier_key, (0,))
        self._flush_deletes()
        self.closed = True
        if self.local_reader is not None:
            self.local_reader.close()
        if self.local_sampler is not None:
            self.local_sampler.close()
        self.backend.close()
        DEFAULT.forget(self)

    def __enter__(self) -> DistContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DefaultContext:
    """The context ``initialize()`` made the process default (DGL code passes none)."""

    def __init__(self) -> None:
        self.ctx: DistContext | None = None
        self.standalone_pending = False
        """``initialize()`` found neither servers nor a manifest: DGL's standalone mode,
        where ``DistGraph(graph_name, part_config=...)`` loads the graph."""

    def set(self, ctx: DistContext) -> None:
        self.ctx = ctx
        self.standalone_pending = False

    def forget(self, ctx: DistContext) -> None:
        if self.ctx is ctx:
            self.ctx = None

    def get(self) -> DistContext:
        if self.ctx is None or self.ctx.closed:
            if self.standalone_pending:
                raise ConfigError(
                    "standalone mode (initialize() found no graph servers: "
                    f"{contract.ENV_SERVERS} or ip_config): pass the partition manifest, "
                    f"DistGraph(graph_name, part_config='NAME.json'), or set "
                    f"{contract.ENV_MANIFEST}"
                )
            raise ConfigError(
                "no distributed context: call distgnn.distributed.initialize() first (or pass ctx=)"
            )
        return self.ctx


DEFAULT = DefaultContext()


def resolve_ctx(ctx: Any = None) -> DistContext:
    """``ctx`` (a DistContext or anything with ``.ctx``, e.g. a DistGraph) or the default."""
    if ctx is None:
        return DEFAULT.get()
    c = getattr(ctx, "ctx", ctx)
    if not isinstance(c, DistContext):
        raise ConfigError(f"ctx must be a DistContext or a DistGraph, got {type(ctx).__name__}")
    return c


def read_ip_config(path: str) -> list[tuple[str, int]]:
    """DGL's ``ip_config.txt``: one ``IP [PORT]`` line per partition server, in order."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [ln.split() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    except OSError as e:
        raise ConfigError(
            f"ip_config: cannot read {path!r}: {e} (in a DistGNN job leave ip_config out: "
            f"the servers come from {contract.ENV_SERVERS})"
        ) from e
    out = []
    for i, parts in enumerate(lines):
        if len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
            raise ConfigError(f"ip_config: line {i + 1} of {path!r} is not 'IP [PORT]'")
        out.append((parts[0], int(parts[1]) if len(parts) == 2 else DEFAULT_SERVER_PORT))
    if not out:
        raise ConfigError(f"ip_config: {path!r} lists no server")
    return out


DGL_DIST_MODE = "DGL_DIST_MODE"
"""DGL's environment variable: ``standalone`` runs a script without servers."""


def initialize(
    ip_config: str | None = None,
    max_queue_size: int | None = None,
    net_type: str | None = None,
    num_worker_threads: int = 1,
    use_graphbolt: bool = False,
    *,
    num_servers: int | None = None,
    num_workers: int | None = None,
    servers: Sequence[tuple[str, int]] | str | None = None,
    token: str | None = None,
    manifest: str | None = None,
    standalone: bool | None = None,
    request_timeout: float | None = None,
    connect_timeout: float | None = None,
    env: Mapping[str, str] | None = None,
) -> DistContext | None:
    """Connect to the graph servers (DGL's signature); the context becomes the default.

    Servers come from ``servers``, else ``ip_config`` (DGL's file: ``IP [PORT]`` per
    line, in partition order), else ``DISTGNN_SERVERS``; the token from
    ``DISTGNN_TOKEN_FILE``/``DISTGNN_TOKEN``. Without servers, ``manifest`` (or
    ``DISTGNN_MANIFEST``) selects standalone mode (every partition in this process).
    Without servers or a manifest this is DGL's standalone mode as a script run by hand
    sees it: nothing is loaded and None is returned; ``DistGraph(graph_name,
    part_config=...)`` then loads the graph (as in DGL, which returns None always).
    ``DGL_DIST_MODE=standalone`` in the environment is DGL's switch to standalone mode:
    ``ip_config`` and ``DISTGNN_SERVERS`` are then not read (DGL ignores the file too).
    ``max_queue_size``, ``net_type`` and ``num_worker_threads`` are accepted for DGL
    compatibility and have no effect (DistGNN has one TCP protocol, no queues to size).
    DGL 0.x's ``num_servers`` (1) and ``num_workers`` (0) are accepted at those values;
    others are an error naming the job field that sets them.
    """
    if num_servers not in (None, 1):
        raise ConfigError(
            f"num_servers={num_servers}: DistGNN runs one graph server per partition; its "
            "worker processes are the job's spec.servers.workers"
        )
    if num_workers not in (None, 0):
        raise ConfigError(
            f"num_workers={num_workers}: sampler processes are the job's "
            f"spec.trainers.numSamplers ({contract.ENV_NUM_SAMPLERS}), or num_samplers= on "
            "a DistNodeDataLoader / DistEdgeDataLoader"
        )
    if net_type not in (None, "socket", "tensorpipe"):
        raise ConfigError(f"net_type {net_type!r} is not 'socket' or 'tensorpipe'")
    if use_graphbolt:
        raise ConfigError(
            "use_graphbolt: DistGNN servers sample with their own CSC kernels; "
            "leave use_graphbolt=False"
        )
    e = os.environ if env is None else env
    tenv = contract.TrainerEnv.from_env(e)
    if e.get(DGL_DIST_MODE) == "standalone" and servers is None:
        ip_config, e = None, {k: v for k, v in e.items() if k != contract.ENV_SERVERS}
    if isinstance(servers, str):
        try:
            servers = contract.parse_servers(servers)
        except ValueError as err:
            raise ConfigError(str(err)) from err
    if servers is None and ip_config is not None and not standalone:
        servers = read_ip_config(ip_config)
    if servers is None and e.get(contract.ENV_SERVERS) and not standalone:
        try:
            servers = contract.parse_servers(e[contract.ENV_SERVERS])
        except ValueError as err:
            raise ConfigError(str(err)) from err
    t = Timeouts.from_env(e)
    t = Timeouts(
        request=request_timeout if request_timeout is not None else t.request,
        connect=connect_timeout if connect_timeout is not None else t.connect,
    )
    common = {
        "rank": tenv.rank,
        "world_size": tenv.world_size,
        "scope": _scope(e),  # standalone: no token
        "request_timeout": t.request,
    }
    if standalone or not servers:
        url = manifest or e.get(contract.ENV_MANIFEST)
        if not url:
            if standalone:
                raise ConfigError(
                    f"standalone mode needs a partition manifest (manifest= or "
                    f"{contract.ENV_MANIFEST})"
                )
            log.info(
                "standalone mode: no graph servers and no manifest yet; "
                "DistGraph(graph_name, part_config=...) loads the graph"
            )
            DEFAULT.standalone_pending = True
            return None
        from distgnn.partition.loader import load_manifest

        backend = LocalBackend(url)
        man = load_manifest(url)
        ctx = DistContext(backend, man, PartitionBook(man), True, **common)  # type: ignore[arg-type]
        DEFAULT.set(ctx)
        return ctx
    tok = token if token is not None else contract.read_token(e)
    common["scope"] = _scope(e, tok)
    local_sampling_enabled(e)  # a bad DISTGNN_LOCAL_SAMPLING fails before connecting
    budget = cache_budget(e)  # so does a bad DISTGNN_FEATURE_CACHE_MB
    pool = ServerPool(list(servers), tok, t)
    try:
        pool.connect_all()
        meta = pool.call(0, Call(MsgType.GET_META, {})).meta
        man = Manifest.from_dict(meta["manifest"], source=f"server {pool.addrs[0]}")
        if man.num_parts != len(pool):
            raise ConfigError(
                f"{len(pool)} servers given but the graph has {man.num_parts} partitions"
            )
        for p, c in enumerate(pool.conns):
            if c.server_info.get("part_id") != p:
                raise ConfigError(
                    f"server {c.peer} serves partition {c.server_info.get('part_id')}, "
                    f"expected {p} ({contract.ENV_SERVERS} must be in partition order)"
                )
    except BaseException:
        pool.close()
        raise
    log.info("connected to graph servers", extra=kv(servers=len(pool), graph=man.graph_name))
    ctx = DistContext(pool, man, PartitionBook(man), False, **common)  # type: ignore[arg-type]
    ctx.local_reader = open_local_reader(pool, e)
    if ctx.local_reader is not None:
        part = ctx.local_reader.part
        ctx.local_sampler = open_local_sampler(
            ctx.local_reader, man, pool.conns[part].server_info, e
        )
    if budget:
        lp = ctx.local_reader.part if ctx.local_reader is not None else None
        ctx.feature_cache = FeatureCache(budget, lp)
        log.info("feature cache", extra=kv(budget_mb=round(budget / (1 << 20), 1),
                                           skips_partition=lp))  # fmt: skip
    DEFAULT.set(ctx)
    return ctx


def open_local_reader(pool: ServerPool, e: Mapping[str, str]) -> LocalReader | None:
    """A co-located trainer's reader of its server's shared memory
    (``DISTGNN_LOCAL_PARTITION`` and ``DISTGNN_LOCAL_STORE``); None when not co-located
    or when the store cannot be used (logged: every read then goes over TCP)."""
    folder = e.get(contract.ENV_LOCAL_STORE, "")
    part_s = e.get(contract.ENV_LOCAL_PARTITION, "")
    if not folder or not part_s:
        return None
    try:
        part = int(part_s)
    except ValueError:
        raise ConfigError(
            f"{contract.ENV_LOCAL_PARTITION} must be a partition number, got {part_s!r}"
        ) from None
    if not 0 <= part < len(pool):
        raise ConfigError(
            f"{contract.ENV_LOCAL_PARTITION}={part}: the graph has {len(pool)} partitions"
        )
    conn = pool.conns[part]

    def current() -> str | None:
        name = conn.server_info.get("store")
        return name if isinstance(name, str) else None

    try:
        reader = LocalReader.open(folder, part, current(), current)
    except ConfigError as err:
        log.warning("co-located store not usable: reading over TCP", extra=kv(error=str(err)))
        return None
    log.info("co-located trainer: local rows from shared memory",
             extra=kv(partition=part, store=reader.root))  # fmt: skip
    return reader


def exit_client() -> None:
    """DGL's ``exit_client()``: close the default context (its tensors are released)."""
    if DEFAULT.ctx is not None:
        DEFAULT.ctx.close()
