"""``partition_graph``: assign nodes (METIS or random), relabel, write partitions and manifest.

Implements docs/partition-format.md. Everything is vectorised NumPy; node features are
gathered per partition and streamed to storage, never copied whole. The manifest
``NAME.json`` is written last, so its presence means the partitions are complete.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import Any

import numpy as np

from distgnn import __version__, storage
from distgnn.errors import ConfigError, GraphFormatError
from distgnn.graph.data import GraphData, etype_str, release_pages
from distgnn.graph.io import load_graph
from distgnn.log import Progress, kv, step
from distgnn.partition.assign import metis_assign, random_assign, rebalance
from distgnn.partition.local import Relabeled, build_local
from distgnn.partition.manifest import (
    METHODS,
    DataSpec,
    Manifest,
    PartInfo,
    PartitionOptions,
)
from distgnn.partition.metislib import find_metis
from distgnn.partition.sampled import sampled_metis
from distgnn.partition.writer import GatherBuffer, PartWriter

log = logging.getLogger("distgnn.partition")

_MAX_WRITERS = 4
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def part_dir(name: str, part_id: int) -> str:
    """Folder of one partition, relative to the manifest's folder."""
    return f"{name}/part-{part_id:05d}"


def check_options(num_parts: int, name: str, opts: PartitionOptions) -> None:
    if not isinstance(num_parts, int) or num_parts < 1:
        raise ConfigError(f"num_parts must be an integer >= 1, got {num_parts!r}")
    if not _NAME.match(name):
        raise ConfigError(f"name {name!r} must match {_NAME.pattern}")
    if opts.method not in METHODS:
        raise ConfigError(f"method must be one of {list(METHODS)}, got {opts.method!r}")
    if opts.halo_hops < 1:
        raise ConfigError(f"halo_hops must be >= 1, got {opts.halo_hops}")


def train_mask_of(g: GraphData, mask_name: str) -> tuple[np.ndarray, bool]:
    """(N,) bool train mask in homogeneous order (False for types without the mask), and
    whether any node type has it."""
    mask = np.zeros(g.num_nodes, dtype=bool)
    offs = g.ntype_offsets
    found = False
    for t, ntype in enumerate(g.node_types):
        m = g.node_data.get(ntype, {}).get(mask_name)
        if m is not None:
            if m.ndim != 1:
                raise GraphFormatError(f"{g.source}: train mask {mask_name!r} must be 1-D")
            mask[offs[t] : offs[t + 1]] = np.asarray(m).astype(bool)
            found = True
    return mask, found


def assign_parts(
    g: GraphData,
    num_parts: int,
    opts: PartitionOptions,
    train: np.ndarray,
    on_metis_start: Callable[[], object] | None = None,
) -> np.ndarray:
    """Partition of every homogeneous node ID (``on_metis_start``: see :func:`metis_assign`)."""
    n = g.num_nodes
    if opts.method == "random":
        return random_assign(
            n, num_parts, seed=opts.seed, groups=train if opts.balance_train else None
        )
    vw: np.ndarray | None = None
    if opts.balance_edges:
        vw = 1 + np.bincount(g.dst, minlength=n).astype(np.int64)
    if opts.balance_train:
        vw = (np.ones(n, np.int64) if vw is None else vw) + train
    if opts.method == "metis":  # on a dense graph: an edge sample, refined on every edge
        group = train if opts.balance_train else None
        parts = sampled_metis(
            g.src, g.dst, n, num_parts, vw, group, seed=opts.seed, on_start=on_metis_start
        )
    else:
        parts = metis_assign(
            g.src, g.dst, n, num_parts, vweights=vw, seed=opts.seed, on_start=on_metis_start
        )
    if opts.balance_train:
        parts = rebalance(parts, train, num_parts, g.src, g.dst)
    return parts


def stable_order(key: np.ndarray, bound: int) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` for integer keys in ``[0, bound)``.

    Sorts the packed values ``key * m + index`` instead (a SIMD value sort, several
    times faster than a stable argsort) and keeps the low part; falls back to argsort
    when the packed values would not fit in int64.
    """
    m = int(key.shape[0])
    if m == 0 or bound * m >= 2**62:
        return np.argsort(key, kind="stable")
    packed = np.multiply(key, m, dtype=np.int64)
    packed += np.arange(m, dtype=np.int64)
    packed.sort()
    return np.remainder(packed, m, out=packed)


def gather_twice(table: np.ndarray, values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``table[values[index]]`` in two threads (halves of ``index``): random gathers are
    memory-latency bound and ``np.take`` releases the GIL, so two cores nearly halve it."""
    out = np.empty(index.shape[0], dtype=table.dtype)
    half = index.shape[0] // 2
    if half < 1 << 16 or (os.cpu_count() or 1) < 2:
        return np.take(table, np.take(values, index), out=out)

    def run(sl: slice) -> None:
        np.take(table, np.take(values, index[sl]), out=out[sl])

    with ThreadPoolExecutor(2, thread_name_prefix="gather") as pool:
        list(pool.map(run, (slice(0, half), slice(half, None))))
    return out


def relabel(g: GraphData, parts: np.ndarray, num_parts: int) -> Relabeled:
    """New node IDs (by partition, then type, then original ID) and new edge IDs."""
    n = g.num_nodes
    new2orig = stable_order(parts, num_parts)
    orig2new = np.empty(n, dtype=np.int64)
    orig2new[new2orig] = np.arange(n, dtype=np.int64)
    node_offsets = np.concatenate([[0], np.cumsum(np.bincount(parts, minlength=num_parts))])
    etypes = None if len(g.edge_types) == 1 else g.edge_type_ids()
    edge_offsets: np.ndarray | None
    if etypes is None:
        # edges sorted by new destination, ties by original edge ID (np.take: 2-3x
        # faster than fancy indexing for these int64 gathers)
        ndst_orig = np.take(orig2new, np.asarray(g.dst))
        eorder = stable_order(ndst_orig, n)
        del ndst_orig
        # sorted by new destination: each new ID repeated by its in-degree
        in_deg = np.bincount(np.asarray(g.dst), minlength=n)[new2orig]
        ndst = np.repeat(np.arange(n, dtype=np.int64), in_deg)
        edge_offsets = np.concatenate([[0], np.cumsum(in_deg)])[node_offsets]
        del in_deg
    else:
        ndst_orig = orig2new[g.dst]
        pd = parts[g.dst]
        edge_offsets = np.concatenate([[0], np.cumsum(np.bincount(pd, minlength=num_parts))])
        t = len(g.edge_types)
        key = (pd * t + etypes) * n + ndst_orig
        del pd
        eorder = stable_order(key, num_parts * t * n)
        del key
        ndst = ndst_orig[eorder]
        del ndst_orig
    nsrc = gather_twice(orig2new, np.asarray(g.src), eorder)
    return Relabeled(
        num_parts=num_parts,
        num_nodes=n,
        new2orig=new2orig,
        node_offsets=node_offsets.astype(np.int64),
        edge_offsets=edge_offsets.astype(np.int64),
        eorder=eorder,
        nsrc=nsrc,
        ndst=ndst,
        etype=None if etypes is None else etypes[eorder],
        num_etypes=len(g.edge_types),
    )


def _typed_offsets(
    parts_of: np.ndarray, type_offsets: np.ndarray, names: list[str], k: int
) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, name in enumerate(names):
        seg = parts_of[type_offsets[t] : type_offsets[t + 1]]
        out[name] = [0, *np.cumsum(np.bincount(seg, minlength=k)).tolist()]
    return out


def _spec(a: np.ndarray) -> DataSpec:
    return DataSpec(
        dtype=a.dtype.str.lstrip("<>=|") if a.dtype.kind != "b" else "bool",
        shape=tuple(int(x) for x in a.shape[1:]),
    )


def partition_graph(
    graph_or_url: GraphData | str,
    num_parts: int,
    out_url: str,
    name: str,
    *,
    method: str = "metis",
    balance_train: bool = False,
    balance_edges: bool = False,
    halo_hops: int = 1,
    seed: int = 0,
    train_mask: str = "train_mask",
    storage_options: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> Manifest:
    """Partition a graph into ``num_parts`` parts under ``out_url``; returns the manifest."""
    opts = PartitionOptions(method, seed, halo_hops, balance_train, balance_edges, train_mask)
    check_options(num_parts, name, opts)
    storage.check_writable_folder(out_url)  # before any work, in one line
    if method != "random":
        find_metis()  # a bad DISTGNN_METIS_LIBRARY fails before any work
    if isinstance(graph_or_url, GraphData):
        g = graph_or_url
    else:
        with step("read graph", log, url=storage.redact(str(graph_or_url))):
            g = load_graph(str(graph_or_url), storage_options)
    train, has_mask = train_mask_of(g, train_mask)
    if balance_train and not has_mask:  # balanceTrain is on by default: not an error
        log.warning(
            "no node type has the train mask; partitions are balanced without it",
            extra=kv(train_mask=train_mask, graph=g.source),
        )
    # The input fingerprint (full sha256 of every input array, from plain file reads) is
    # computed in a background thread while METIS runs (called so that it releases the
    # GIL and single-threaded), so that the METIS input's build before it has the cores;
    # where the regrouping's cluster step runs beside METIS, once either of them is done;
    # where METIS takes both cores, once METIS is done.
    with ThreadPoolExecutor(1, thread_name_prefix="fingerprint") as fp_pool:
        fp_future: Future[str] | None = None
        fp_lock = threading.Lock()  # the assignment may call it from two threads

        def start_fingerprint() -> None:
            nonlocal fp_future
            with fp_lock:
                if fp_future is None:
                    fp_future = fp_pool.submit(_timed_fingerprint, g)

        if method == "random":
            start_fingerprint()
        with step("assign", log, method=method, parts=num_parts):
            parts = assign_parts(g, num_parts, opts, train, start_fingerprint)
        start_fingerprint()  # no METIS call (one part, no nodes): now
        # relabelling (mostly one core's work) goes on beside a fingerprint still running
        # (where METIS bisects both halves at once it starts only after METIS)
        with step("relabel", log):
            r = relabel(g, parts, num_parts)
        assert fp_future is not None
        fingerprint = fp_future.result()
    release_pages(g.src, g.dst)
    edge_cut = r.edge_cut()
    ntype_offsets = _typed_offsets(parts, g.ntype_offsets, g.node_types, num_parts)
    enames = [etype_str(e) for e in g.edge_types]
    if len(enames) == 1:
        etype_offsets = {enames[0]: r.edge_offsets.tolist()}
    else:
        pd_by_new = np.repeat(np.arange(num_parts), np.diff(r.edge_offsets))
        orig_pd = np.empty(g.num_edges, dtype=np.int64)
        orig_pd[r.eorder] = pd_by_new
        del pd_by_new
        etype_offsets = _typed_offsets(orig_pd, g.etype_offsets, enames, num_parts)
        del orig_pd
    del parts
    if opts.halo_hops > 1:
        r.in_edge_index()  # build the shared index once, before the writer threads
    manifest_url = storage.join(out_url, f"{name}.json")
    if storage.exists(manifest_url, storage_options):
        fs, path = storage.get_fs(manifest_url, storage_options)
        fs.rm(path)
    prog = Progress("write partitions", total=num_parts, logger=log) if progress else None
    if prog:
        prog.__enter__()
    # Partitions are written concurrently: file I/O, sha256 and NumPy gathers release
    # the GIL. Each worker holds one partition's arrays at a time, and gathers rows into
    # one block it reuses for every partition it writes (a GatherBuffer of its own).
    workers = max(1, min(num_parts, os.cpu_count() or 1, _MAX_WRITERS))
    gathers: queue.SimpleQueue[GatherBuffer] = queue.SimpleQueue()
    for _ in range(workers):
        gathers.put(GatherBuffer())

    def write_part(p: int) -> PartInfo:
        gather = gathers.get()  # one is free: at most ``workers`` tasks run at once
        try:
            return _write_part(
                g, r, p, out_url, name, opts, train, ntype_offsets, etype_offsets,
                storage_options, gather,
            )  # fmt: skip
        finally:
            gathers.put(gather)

    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="write-part") as pool:
            futures = [pool.submit(write_part, p) for p in range(num_parts)]
            try:
                for fut in as_completed(futures):
                    fut.result()
                    if prog:
                        prog.update(1)
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
            infos: list[PartInfo] = [fut.result() for fut in futures]
    finally:
        if prog:
            prog.__exit__(None, None, None)
    m = Manifest(
        graph_name=name,
        num_parts=num_parts,
        num_nodes=g.num_nodes,
        num_edges=g.num_edges,
        node_types=list(g.node_types),
        edge_types=list(g.edge_types),
        node_offsets=r.node_offsets.tolist(),
        edge_offsets=r.edge_offsets.tolist(),
        ntype_offsets=ntype_offsets,
        etype_offsets=etype_offsets,
        node_data={t: {k: _spec(v) for k, v in g.node_data[t].items()} for t in g.node_types},
        edge_data={e: {k: _spec(v) for k, v in g.edge_data[e].items()} for e in enames},
        options=opts,
        input_fingerprint=fingerprint,
        edge_cut=round(edge_cut, 6),
        parts=infos,
        created_by=f"distgnn {__version__}",
    )
    Manifest.from_json(m.to_json(), "generated manifest")  # self-check before publishing
    storage.write_bytes(manifest_url, m.to_json().encode(), storage_options)
    log.info(
        "partitioned",
        extra=kv(
            name=name,
            parts=num_parts,
            edge_cut=round(edge_cut, 4),
            url=storage.redact(manifest_url),
        ),
    )
    return m


def _timed_fingerprint(g: GraphData) -> str:
    with step("fingerprint", log):
        return g.fingerprint()


def _write_part(
    g: GraphData,
    r: Relabeled,
    p: int,
    out_url: str,
    name: str,
    opts: PartitionOptions,
    train: np.ndarray,
    ntype_offsets: dict[str, list[int]],
    etype_offsets: dict[str, list[int]],
    storage_options: Mapping[str, Any] | None,
    gather: GatherBuffer | None = None,
) -> PartInfo:
    lg = build_local(r, p, opts.halo_hops)
    a, b = int(r.node_offsets[p]), int(r.node_offsets[p + 1])
    ea, eb = int(r.edge_offsets[p]), int(r.edge_offsets[p + 1])
    w = PartWriter(out_url, part_dir(name, p), storage_options, gather)
    w.write("graph/indptr.npy", lg.indptr)
    w.write("graph/indices.npy", lg.indices)
    w.write("graph/eid.npy", lg.eid)
    if lg.etype is not None:
        w.write("graph/etype.npy", lg.etype.astype(np.int32))
    w.write("graph/halo_nid.npy", lg.halo_nid)
    orig_nid = r.new2orig[a:b]
    w.write("graph/orig_nid.npy", orig_nid)
    w.write("graph/orig_eid.npy", r.eorder[ea:eb])
    num_halo = int(lg.halo_nid.shape[0])
    del lg
    noffs = g.ntype_offsets
    start = a
    for t, ntype in enumerate(g.node_types):
        cnt = ntype_offsets[ntype][p + 1] - ntype_offsets[ntype][p]
        rows = r.new2orig[start : start + cnt] - noffs[t]
        start += cnt
        for dname, arr in sorted(g.node_data[ntype].items()):
            w.write_rows(f"node/{ntype}/{dname}.npy", arr, rows)
    eoffs = g.etype_offsets
    start = ea
    for t, et in enumerate(g.edge_types):
        ename = etype_str(et)
        cnt = etype_offsets[ename][p + 1] - etype_offsets[ename][p]
        rows = r.eorder[start : start + cnt] - eoffs[t]
        start += cnt
        for dname, arr in sorted(g.edge_data[ename].items()):
            w.write_rows(f"edge/{ename}/{dname}.npy", arr, rows)
    return PartInfo(
        part_id=p,
        path=part_dir(name, p),
        owned_nodes=b - a,
        halo_nodes=num_halo,
        edges=eb - ea,
        train_nodes=int(train[orig_nid].sum()),
        files=dict(w.files),
    )
