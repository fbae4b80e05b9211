"""Cora partitioned with METIS, and a server's request handlers over one of its
partitions in a fresh shared-memory store (what the server process runs, in-process)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from distgnn.partition.partitioner import partition_graph
from distgnn.server.handlers import Handlers
from distgnn.server.state import GraphState, load_into_store
from distgnn.server.store import ShmStore


def partition_cora(out: Path, cora_path: Path, parts: int) -> str:
    """Cora in ``parts`` METIS partitions written to ``out``; the manifest's path."""
    partition_graph(str(cora_path), parts, str(out), "cora", method="metis", progress=False)
    return str(out / "cora.json")


@contextlib.contextmanager
def handlers_on(manifest: str, part_id: int = 0, **kw: Any) -> Iterator[Handlers]:
    """``Handlers(store, state, **kw)`` serving partition ``part_id`` of ``manifest``."""
    store = ShmStore.create()
    try:
        load_into_store(manifest, part_id, store)
        yield Handlers(store, GraphState.attach(store), **kw)
    finally:
        store.close()
