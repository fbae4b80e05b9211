"""The inference output format: ``.npy`` shards per node type and partition, a JSON index.

Layout under the output URL (see docs/inference.md)::

    URL/index.json                                   written last: the output is complete
    URL/run-RUN/NTYPE/part-00000/orig_id.npy         int64 (n,)  original node IDs
    URL/run-RUN/NTYPE/part-00000/embedding.npy       float32 (n, d)
    URL/run-RUN/NTYPE/part-00000/pred.npy            int64 (n,)   (node classification)
    URL/run-RUN/NTYPE/part-00000/prob.npy            float32 (n,) (node classification)
    URL/run-RUN/NTYPE/part-00000/input_embedding.npy float32 (n, h) (a featureless type's
                                                     learnt input, its DistEmbedding row)

Arrays every type has are listed in the index's ``arrays``; one only some types have
(``input_embedding``) under ``node_types.NTYPE.arrays``. The edge apps also write their
test edges' predictions (:mod:`distgnn.train.edge_output`)::

    URL/run-RUN/_E/part-00000/src_id.npy             int64 (m,)  original source node IDs
    URL/run-RUN/_E/part-00000/dst_id.npy             int64 (m,)  original destination IDs
    URL/run-RUN/_E/part-00000/edge_id.npy            int64 (m,)  original edge IDs
    URL/run-RUN/_E/part-00000/pred.npy               int64 (m,) class, or float32 target
    URL/run-RUN/_E/part-00000/prob.npy               float32 (m,) (edge classification)

listed under the index's ``edge_types._E`` (``num_edges``, ``edges``: the mask,
``arrays``, ``shards``); on a heterogeneous graph the folder and the key are the target
canonical edge type (``run-RUN/author:writes:paper/...``, ``edge_types."author:writes:paper"``)
and the IDs its type-wise original IDs.

Each run writes its own ``run-RUN`` folder; the index names it, so a reader never mixes
runs, and a run killed before its index leaves the previous complete output intact.
Shards are streamed chunk by chunk (``.npy`` header first), their size and sha256
recorded in the index. No pickle anywhere: ``np.load(f, allow_pickle=False)`` reads them.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distgnn import storage
from distgnn.errors import StorageError, StorageNotFound
from distgnn.log import kv

log = logging.getLogger("distgnn.train")

FORMAT = "distgnn-node-output"
VERSION = 1
INDEX = "index.json"


def shard_path(run: str, ntype: str, part: int, array: str) -> str:
    """Path of one shard relative to the output URL."""
    return f"run-{run}/{ntype}/part-{part:05d}/{array}.npy"


def write_shard_record(base: str, run: str, key: str, part: int, rec: dict[str, Any]) -> None:
    """One shard's record (``shard.json``: its rows and files), which rank 0 gathers into
    the index (:func:`read_shard_record`)."""
    rel = f"run-{run}/{key}/part-{part:05d}/shard.json"
    storage.write_bytes(storage.join(base, rel), json.dumps(rec).encode())


def read_shard_record(base: str, run: str, key: str, part: int) -> dict[str, Any]:
    """The record :func:`write_shard_record` wrote; a missing or unreadable one is the
    output left incomplete (StorageError)."""
    rel = f"run-{run}/{key}/part-{part:05d}/shard.json"
    try:
        rec: dict[str, Any] = json.loads(storage.read_bytes(storage.join(base, rel)))
    except (StorageError, ValueError) as e:
        raise StorageError(f"inference output incomplete: {rel} ({e})") from e
    return rec


@dataclass
class Index:
    """The index: what was written and where (``index.json``)."""

    run: str
    num_nodes: int
    arrays: dict[str, dict[str, Any]]
    node_types: dict[str, dict[str, Any]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    edge_types: dict[str, dict[str, Any]] = field(default_factory=dict)
    """the edge apps' per-edge predictions (:mod:`distgnn.train.edge_output`), by edge type"""

    def to_dict(self) -> dict[str, Any]:
        out = {
            "format": FORMAT,
            "version": VERSION,
            "run": self.run,
            "num_nodes": self.num_nodes,
            "arrays": self.arrays,
            "node_types": self.node_types,
            **self.info,
        }
        return out | ({"edge_types": self.edge_types} if self.edge_types else {})


def write_index(base: str, index: Index) -> str:
    """Write ``index.json`` atomically (a temporary name, then renamed); returns its URL."""
    url = storage.join(base, INDEX)
    data = (json.dumps(index.to_dict(), indent=1, sort_keys=True) + "\n").encode()
    tmp = storage.join(base, f".{INDEX}.{index.run}.tmp")
    storage.write_bytes(tmp, data)
    fs, path = storage.get_fs(url)
    try:
        fs.mv(storage.get_fs(tmp)[1], path)
    except OSError as e:
        raise StorageError(f"{storage.redact(url)}: {e}") from e
    log.info("inference index written", extra=kv(url=storage.redact(url), run=index.run))
    return url


def read_index(base: str) -> dict[str, Any]:
    """The index of a complete output; StorageError when there is none (or it is foreign)."""
    url = storage.join(base, INDEX)
    try:
        obj = json.loads(storage.read_bytes(url))
    except StorageNotFound as e:
        raise StorageNotFound(
            f"{e}: {storage.redact(base)} holds no complete inference output (its {INDEX} is "
            "written last, by `distgnn train inference` or a job's inferAfterTraining)"
        ) from e
    except ValueError as e:
        raise StorageError(f"{storage.redact(url)}: not JSON ({e})") from e
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise StorageError(f"{storage.redact(url)}: not a {FORMAT} index")
    if int(obj.get("version", 0)) > VERSION:
        raise StorageError(f"{storage.redact(url)}: version {obj.get('version')} is too new")
    return obj


def _load_npy(url: str, info: dict[str, Any], verify: bool) -> np.ndarray:
    data = storage.read_bytes(url)
    if len(data) != int(info["bytes"]):
        raise StorageError(f"{storage.redact(url)}: {len(data)} bytes, index says {info['bytes']}")
    if verify and hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise StorageError(f"{storage.redact(url)}: sha256 does not match the index")
    return np.asarray(np.load(io.BytesIO(data), allow_pickle=False))


def read_output(
    base: str,
    ntype: str | None = None,
    arrays: list[str] | None = None,
    verify: bool = True,
) -> dict[str, np.ndarray]:
    """All rows of one node type (the only one when None), shards concatenated in
    partition order: ``{"orig_id": ..., "embedding": ..., ...}``."""
    idx = read_index(base)
    types = idx["node_types"]
    if ntype is None:
        if len(types) != 1:
            raise StorageError(f"the output has node types {sorted(types)}: name one")
        ntype = next(iter(types))
    if ntype not in types:
        raise StorageError(f"node type {ntype!r} is not in the output ({sorted(types)})")
    own = list(types[ntype].get("arrays", {}))  # this type's own arrays (input_embedding)
    names = arrays or ["orig_id", *[a for a in [*idx["arrays"], *own] if a != "orig_id"]]
    return _read_shards(base, types[ntype]["shards"], names, verify)


def read_edge_output(
    base: str, arrays: list[str] | None = None, verify: bool = True, etype: str | None = None
) -> dict[str, np.ndarray]:
    """The edge apps' per-edge predictions (of ``etype``, ``SRC:REL:DST``; default the
    only edge type written), shards concatenated in partition order:
    ``{"src_id", "dst_id", "edge_id", "pred", ...}``; StorageError when the output has
    none."""
    idx = read_index(base)
    types = idx.get("edge_types") or {}
    if not types:
        raise StorageError(f"{storage.redact(base)}: the output has no per-edge predictions")
    if etype is None and len(types) != 1:
        raise StorageError(f"the output has edge types {sorted(types)}: name one")
    key = etype or next(iter(types))
    if key not in types:
        raise StorageError(f"edge type {key!r} is not in the output ({sorted(types)})")
    entry = types[key]
    return _read_shards(base, entry["shards"], arrays or list(entry["arrays"]), verify)


def _read_shards(
    base: str, shards: list[dict[str, Any]], names: list[str], verify: bool
) -> dict[str, np.ndarray]:
    out: dict[str, list[np.ndarray]] = {a: [] for a in names}
    for shard in shards:
        for a in names:
            if a not in shard["files"]:
                raise StorageError(f"array {a!r} is not in the output")
            f = shard["files"][a]
            out[a].append(_load_npy(storage.join(base, f["path"]), f, verify))
    return {a: np.concatenate(v) if v else np.zeros(0) for a, v in out.items()}


def stale_runs(base: str, keep: str) -> Iterator[str]:
    """``run-*`` folders under ``base`` other than ``run-KEEP`` (left by earlier runs)."""
    fs, path = storage.get_fs(base)
    try:
        names = fs.ls(path, detail=False) if fs.exists(path) else []
    except OSError as e:
        raise StorageError(f"{storage.redact(base)}: {e}") from e
    for n in names:
        leaf = str(n).rstrip("/").rsplit("/", 1)[-1]
        if leaf.startswith("run-") and leaf != f"run-{keep}":
            yield storage.join(base, leaf)


def remove_stale_runs(base: str, keep: str) -> int:
    """Delete the folders of earlier runs (best effort); returns how many went."""
    n = 0
    for url in list(stale_runs(base, keep)):
        fs, path = storage.get_fs(url)
        try:
            fs.rm(path, recursive=True)
            n += 1
        except OSError as e:
            log.warning("could not remove", extra=kv(url=storage.redact(url), error=str(e)))
    return n
