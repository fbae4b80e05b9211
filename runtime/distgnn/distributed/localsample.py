"""Co-located trainers: sample the local partition's seeds from the server's shared memory.

A co-located trainer (``trainers.colocate``, see :mod:`distgnn.distributed.localread`)
maps its server's graph structure (the CSC with global source IDs, edge IDs and types: what
:func:`distgnn.server.state.load_into_store` put in the store) **read-only** and answers
the SAMPLE_NEIGHBORS request for its own partition in-process, with the server's own
request handler (:class:`~distgnn.server.handlers.Handlers`, same validation, limits,
kernels and answer), while the requests for other partitions are in flight over TCP, as
DGL's samplers do with their machine's shared-memory graph. The answer is decoded and
merged exactly as a server's.

Used only when the local reader validated the store (the server's HELLO names the folder,
``info.json`` holds this partition) and the structure matches the graph the trainer
connected to. Every request checks that the server still names this store and that its
``info.json`` is the one mapped (one ``stat``); otherwise local sampling turns off. A
request the handler refuses (a limit, an unknown ``prob``) or anything unexpected is sent
over TCP instead, so the server's answer or error is the one the caller gets.
``DISTGNN_LOCAL_SAMPLING=0`` keeps every request on TCP.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from distgnn import contract
from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.partition.manifest import Manifest
from distgnn.rpc.client import Call
from distgnn.rpc.protocol import FLAG_RESPONSE, Frame, MsgType

if TYPE_CHECKING:
    from distgnn.server.handlers import Handlers

log = logging.getLogger("distgnn.distributed.localsample")

INFO_FILE = "info.json"
ON, OFF = ("1", "on", "true", "yes"), ("0", "off", "false", "no")


@dataclass
class SampleStats:
    """SAMPLE_NEIGHBORS requests answered in this process instead of by the local server."""

    requests: int = 0
    seeds: int = 0
    edges: int = 0
    fallbacks: int = 0
    """requests of the local partition sent over TCP after all"""


def local_sampling_enabled(env: Mapping[str, str]) -> bool:
    """``DISTGNN_LOCAL_SAMPLING`` (default on); ConfigError for another value."""
    raw = env.get(contract.ENV_LOCAL_SAMPLING, "").strip().lower()
    if not raw or raw in ON:
        return True
    if raw in OFF:
        return False
    raise ConfigError(
        f"{contract.ENV_LOCAL_SAMPLING}={raw[:40]!r}: expected 1/on/true or 0/off/false"
    )


class LocalSampler:
    """Answers SAMPLE_NEIGHBORS for partition ``part`` from a read-only map of its store."""

    def __init__(
        self,
        root: str,
        part: int,
        store_name: str,
        current: Callable[[], str | None],
        handlers: Handlers,
        info_ino: int,
    ) -> None:
        self.root, self.part, self.store_name = root, part, store_name
        self._current = current
        self.handlers = handlers
        self._ino = info_ino
        self.stats = SampleStats()
        self.enabled = True
        self._warned = False

    @classmethod
    def open(
        cls,
        root: str,
        part: int,
        store_name: str,
        current: Callable[[], str | None],
        manifest: Manifest,
        limits: Mapping[str, Any] | None = None,
    ) -> LocalSampler:
        """Map the graph of the store folder ``root`` (validated by the local reader);
        ConfigError when it is not partition ``part`` of ``manifest``'s graph. ``limits``:
        the server's HELLO limits (``max_ids``, ``max_sample_edges``), applied alike."""
        from distgnn.server.handlers import Handlers
        from distgnn.server.limits import ServerLimits
        from distgnn.server.state import GraphState
        from distgnn.server.store import ShmStore, TensorError

        store = ShmStore(root, readonly=True)
        try:
            ino = os.stat(os.path.join(root, INFO_FILE)).st_ino
            graph = GraphState.attach(store)
        except (OSError, ValueError, KeyError, TypeError, TensorError) as e:
            store.close()
            raise ConfigError(f"local store {root!r}: cannot map its graph: {e}") from e
        m = graph.manifest
        if graph.part_id != part or (m.graph_name, m.node_offsets, m.edge_offsets) != (
            manifest.graph_name, manifest.node_offsets, manifest.edge_offsets
        ):  # fmt: skip
            store.close()
            raise ConfigError(
                f"local store {root!r} holds partition {graph.part_id} of {m.graph_name!r}, "
                f"not partition {part} of the servers' {manifest.graph_name!r}"
            )
        lim = ServerLimits()
        for k in ("max_ids", "max_sample_edges"):
            v = (limits or {}).get(k)
            if type(v) is int and v > 0:
                lim = replace(lim, **{k: v})
        return cls(root, part, store_name, current, Handlers(store, graph, limits=lim), ino)

    def _usable(self) -> bool:
        if not self.enabled:
            return False
        why = None
        if self._current() != self.store_name:
            why = f"the server now serves store {self._current()!r}"
        else:
            try:
                if os.stat(os.path.join(self.root, INFO_FILE)).st_ino != self._ino:
                    why = "its info.json was replaced"
            except OSError as e:
                why = f"its info.json is gone ({e.strerror or e})"
        if why is not None:
            self.enabled = False
            log.warning("co-located store changed: local sampling off",
                        extra=kv(store=self.store_name, why=why))  # fmt: skip
        return self.enabled

    def answer(self, call: Call, out: tuple[np.ndarray, np.ndarray] | None = None) -> Frame | None:
        """The server's answer to ``call`` (SAMPLE_NEIGHBORS), computed here; None when it
        must go over TCP (counted as a fallback). ``out``: the hop's ``src`` and ``eid``
        receive columns at this answer's place; the native draw writes there (no copy
        into the hop's columns afterwards), else the answer is fresh arrays."""
        from distgnn.server.store import TensorError

        if call.mtype != MsgType.SAMPLE_NEIGHBORS or not self._usable():
            self.stats.fallbacks += 1
            return None
        try:
            meta, bufs = self.handlers.sample_neighbors(dict(call.meta), list(call.bufs), out)
        except TensorError:
            self.stats.fallbacks += 1  # refused: the server answers (or refuses) it
            return None
        except Exception as e:  # anything unexpected: the server's answer instead
            self.stats.fallbacks += 1
            if not self._warned:
                self._warned = True
                log.warning("local sampling failed: sampling over TCP",
                            extra=kv(error=f"{type(e).__name__}: {e}"))  # fmt: skip
            return None
        s = self.stats
        s.requests += 1
        s.seeds += len(call.bufs[0]) if call.bufs else 0
        s.edges += len(bufs[0]) if bufs else 0
        return Frame(call.mtype, 0, meta, bufs, FLAG_RESPONSE)

    def close(self) -> None:
        s = self.stats
        log.info("local sampling from shared memory",
                 extra=kv(partition=self.part, requests=s.requests, seeds=s.seeds,
                          edges=s.edges, fallbacks=s.fallbacks))  # fmt: skip
        self.handlers.store.close()


def open_local_sampler(
    reader: Any, manifest: Manifest, server_info: Mapping[str, Any], env: Mapping[str, str]
) -> LocalSampler | None:
    """A co-located trainer's local sampler over the store its ``reader`` validated; None
    when turned off (``DISTGNN_LOCAL_SAMPLING=0``) or unusable (logged: sampling over TCP)."""
    if reader is None or not local_sampling_enabled(env):
        return None
    lim = server_info.get("limits")
    try:
        s = LocalSampler.open(
            reader.root, reader.part, reader.store_name, reader.current_store, manifest,
            lim if isinstance(lim, dict) else None,
        )  # fmt: skip
    except ConfigError as err:
        log.warning("co-located graph not usable: sampling over TCP", extra=kv(error=str(err)))
        return None
    log.info("co-located trainer: local seeds sampled from shared memory",
             extra=kv(partition=s.part, store=s.root))  # fmt: skip
    return s
