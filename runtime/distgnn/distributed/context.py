"""``initialize()`` and the explicit :class:`DistContext` every trainer-side object uses.

A context talks to the graph servers through a :class:`~distgnn.rpc.client.ServerPool`
or, in standalone mode, to in-process request handlers over every partition
(:class:`LocalBackend`): the same handlers the servers run, so both modes behave
alike. There is no global state: pass the context (or a ``DistGraph``) around.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from distgnn import contract
from distgnn.errors import ConfigError, DistGNNError
from distgnn.log import kv
from distgnn.partition.book import PartitionBook
from distgnn.partition.manifest import Manifest
from distgnn.rpc.client import Call, ServerPool, Timeouts
from distgnn.rpc.protocol import FLAG_RESPONSE, Frame, MsgType

log = logging.getLogger("distgnn.distributed")


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


@dataclass
class DistContext:
    """Connections (or the standalone backend), the manifest and the partition book."""

    backend: Backend
    manifest: Manifest
    book: PartitionBook
    standalone: bool
    rank: int = 0
    world_size: int = 1
    owned_tensors: list[str] = field(default_factory=list)
    closed: bool = False

    @property
    def num_parts(self) -> int:
        return self.manifest.num_parts

    def call(self, part: int, call: Call) -> Frame:
        return self.backend.call_many({part: call})[part]

    def call_many(self, calls: Mapping[int, Call]) -> dict[int, Frame]:
        if self.closed:
            raise ConfigError("this DistContext is closed")
        return self.backend.call_many(calls)

    def broadcast(self, mtype: MsgType, meta: dict[str, Any]) -> dict[int, Frame]:
        """Send the same request to every partition at once."""
        return self.call_many({p: Call(mtype, meta) for p in range(self.num_parts)})

    def close(self) -> None:
        """Drop this context's references to non-persistent tensors, then disconnect."""
        if self.closed:
            return
        for name in self.owned_tensors:
            try:
                self.broadcast(MsgType.DELETE_TENSOR, {"name": name})
            except DistGNNError as e:
                log.warning("could not delete tensor", extra=kv(name=name, error=str(e)))
        self.owned_tensors.clear()
        self.closed = True
        self.backend.close()

    def __enter__(self) -> DistContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def initialize(
    servers: Sequence[tuple[str, int]] | str | None = None,
    token: str | None = None,
    manifest: str | None = None,
    *,
    standalone: bool | None = None,
    request_timeout: float | None = None,
    connect_timeout: float | None = None,
    env: Mapping[str, str] | None = None,
) -> DistContext:
    """Connect to the graph servers (or load every partition in-process when standalone).

    ``servers`` defaults to ``DISTGNN_SERVERS`` (``host:port,...`` in partition order),
    the token to ``DISTGNN_TOKEN_FILE``/``DISTGNN_TOKEN``. Without servers, ``manifest``
    (or ``DISTGNN_MANIFEST``) selects standalone mode.
    """
    e = os.environ if env is None else env
    tenv = contract.TrainerEnv.from_env(e)
    if isinstance(servers, str):
        servers = contract.parse_servers(servers)
    if servers is None and e.get(contract.ENV_SERVERS) and not standalone:
        try:
            servers = contract.parse_servers(e[contract.ENV_SERVERS])
        except ValueError as err:
            raise ConfigError(str(err)) from err
    if standalone or not servers:
        url = manifest or e.get(contract.ENV_MANIFEST)
        if not url:
            raise ConfigError(
                f"no graph servers ({contract.ENV_SERVERS}) and no manifest "
                f"({contract.ENV_MANIFEST}) for standalone mode"
            )
        from distgnn.partition.loader import load_manifest

        backend = LocalBackend(url)
        man = load_manifest(url)
        return DistContext(backend, man, PartitionBook(man), True, tenv.rank, tenv.world_size)
    t = Timeouts.from_env(e)
    t = Timeouts(
        request=request_timeout if request_timeout is not None else t.request,
        connect=connect_timeout if connect_timeout is not None else t.connect,
    )
    tok = token if token is not None else contract.read_token(e)
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
    return DistContext(pool, man, PartitionBook(man), False, tenv.rank, tenv.world_size)
