"""Differential check of the trainer-side API: the same probes against DGL 2.1 and DistGNN.

A developer script, not part of CI (CI has no DGL). Run from the repository root::

    python bench/dgl_differential.py [--dgl-python .tools/dgl-venv/bin/python] [--json F]

It runs four child processes: for each of two graphs (Cora from
``../shared/datasets/cora.npz`` and a small paper/author/venue graph) one process with
DGL (``.tools/dgl-venv``, ``DGL_DIST_MODE=standalone``) and one with DistGNN (this
interpreter, ``import distgnn as dgl``). Each partitions the graph with its own
``dgl.distributed.partition_graph`` (1 partition for the standalone ``DistGraph``, 2 for
the partition-book and split probes, ``return_mapping=True``), then runs the **same probe
code** with ``dgl`` bound to either package and writes one JSON object of facts per item.
Probes turn IDs into original IDs (or sets, shapes, dtypes, exception types) before
recording, since the two partitioners number nodes and edges differently. The parent
compares the facts and prints a table: item / same / differs (how); ``no*`` marks a
difference listed in ``INTENDED`` (a design choice or a DGL bug, with the reason).

An exception is recorded as its class name and the builtin classes it can be caught
as; two errors are "same" when DistGNN's can be caught as DGL's (``DGLError``: as any
``DistGNNError``, which ``distgnn.DGLError`` names).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CORA = REPO.parent / "shared" / "datasets" / "cora.npz"
DGL_PY = REPO / ".tools" / "dgl-venv" / "bin" / "python"

# the typed graph: node counts and canonical edge types in DGL's (sorted) order
HET_NODES = {"author": 60, "paper": 200, "venue": 10}
HET_ETYPES = [
    ("author", "writes", "paper"),
    ("paper", "cite", "paper"),
    ("paper", "published-in", "venue"),
    ("paper", "written-by", "author"),
]


# ---------------------------------------------------------------------------- recording
def enc(v: Any) -> Any:
    """A JSON form of a probe's value that keeps its type (tensor dtype and shape)."""
    import numpy as np
    import torch

    if isinstance(v, torch.Tensor):
        out: dict[str, Any] = {"tensor": str(v.dtype), "shape": list(v.shape)}
        if v.numel() <= 64:
            out["values"] = v.tolist()
        return out
    if isinstance(v, np.ndarray):
        return {"ndarray": str(v.dtype), "shape": list(v.shape)}
    if isinstance(v, bool | None | str | float):
        return v
    if isinstance(v, int | np.integer):
        return {"int": int(v)} if type(v) is int else {"np": str(type(v).__name__), "v": int(v)}
    if isinstance(v, dict):
        return {str(k): enc(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [enc(x) for x in v]
    if isinstance(v, torch.dtype | torch.device):
        return str(v)
    return {"type": type(v).__name__}


def err(e: BaseException) -> dict[str, Any]:
    import builtins

    catch = sorted(
        {c.__name__ for c in type(e).__mro__ if getattr(builtins, c.__name__, None) is c}
        - {"object", "BaseException", "Exception"}
    )
    family = (
        "DGLError"
        if any(c.__name__ in ("DGLError", "DistGNNError") for c in type(e).__mro__)
        else ""
    )
    return {"raises": type(e).__name__, "catch_as": catch, "family": family, "msg": str(e)[:160]}


class Recorder:
    def __init__(self) -> None:
        self.items: dict[str, Any] = {}

    def __call__(self, name: str, fn: Callable[[], Any]) -> None:
        t0 = time.monotonic()
        try:
            self.items[name] = {"ok": enc(fn())}
        except Exception as e:
            self.items[name] = err(e)
            if os.environ.get("DIFF_TRACE"):
                traceback.print_exc()
        if os.environ.get("DIFF_TRACE"):
            print(f"probe {name}: {time.monotonic() - t0:.2f} s", file=sys.stderr)


# ---------------------------------------------------------------------------- the graphs
def het_arrays() -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(7)
    out: dict[str, Any] = {}
    for s, e, d in HET_ETYPES:
        m = 600
        out[(s, e, d)] = (rng.integers(0, HET_NODES[s], m), rng.integers(0, HET_NODES[d], m))
    out["feat"] = rng.standard_normal((HET_NODES["paper"], 4)).astype(np.float32)
    out["label"] = rng.integers(0, 3, HET_NODES["paper"])
    out["train_mask"] = rng.random(HET_NODES["paper"]) < 0.3
    return out


def cora_arrays() -> dict[str, Any]:
    import numpy as np

    with np.load(CORA) as z:
        return {k: z[k] for k in z.files}


def build_dgl_graph(dgl: Any, graph: str) -> Any:
    import torch

    if graph == "cora":
        a = cora_arrays()
        g = dgl.graph((torch.from_numpy(a["src"]), torch.from_numpy(a["dst"])), num_nodes=2708)
        for k in ("feat", "label", "train_mask", "val_mask", "test_mask"):
            g.ndata[k] = torch.from_numpy(a[k])
        g.edata["w"] = torch.arange(g.num_edges(), dtype=torch.float32)
        return g
    a = het_arrays()
    data = {c: (torch.from_numpy(a[c][0]), torch.from_numpy(a[c][1])) for c in HET_ETYPES}
    g = dgl.heterograph(data, num_nodes_dict=HET_NODES)
    for k in ("feat", "label", "train_mask"):
        g.nodes["paper"].data[k] = torch.from_numpy(a[k])
    return g


def build_distgnn_graph(graph: str) -> Any:
    import numpy as np

    from distgnn.graph.io import graph_from_arrays  # type: ignore[import-not-found]

    if graph == "cora":
        a = cora_arrays()
        arr = {
            "num_nodes/_N": np.array(2708),
            "edges/_N:_E:_N/src": a["src"],
            "edges/_N:_E:_N/dst": a["dst"],
            "edata/_N:_E:_N/w": np.arange(len(a["src"]), dtype=np.float32),
        }
        arr.update(
            {
                f"ndata/_N/{k}": a[k]
                for k in ("feat", "label", "train_mask", "val_mask", "test_mask")
            }
        )
        return graph_from_arrays(arr, "cora")
    a = het_arrays()
    arr = {f"num_nodes/{t}": np.array(c) for t, c in HET_NODES.items()}
    for c in HET_ETYPES:
        arr[f"edges/{':'.join(c)}/src"], arr[f"edges/{':'.join(c)}/dst"] = a[c]
    for k in ("feat", "label", "train_mask"):
        arr[f"ndata/paper/{k}"] = a[k]
    return graph_from_arrays(arr, "het")


# ---------------------------------------------------------------------------- the probes
def inverse(perm: Any) -> Any:
    import torch

    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(len(perm), dtype=perm.dtype)
    return inv


def probe_homo(dgl: Any, side: dict[str, Any], rec: Recorder) -> None:
    import numpy as np
    import torch as th

    dd = dgl.distributed
    a = cora_arrays()
    g = side["g"]
    n2o, e2o = side["nmap"], side["emap"]  # new ID -> original ID
    o2n, o2e = inverse(n2o), inverse(e2o)
    orig = th.tensor([0, 1, 633, 2707])
    new = o2n[orig]
    n = 2708

    # --- attributes
    rec("num_nodes()/num_edges()", lambda: [g.num_nodes(), g.num_edges()])
    rec("num_nodes('_N')/num_edges('_E')", lambda: [g.num_nodes("_N"), g.num_edges("_E")])
    rec("num_edges(('_N','_E','_N'))", lambda: g.num_edges(("_N", "_E", "_N")))
    rec("number_of_nodes()/number_of_edges()", lambda: [g.number_of_nodes(), g.number_of_edges()])
    rec("num_nodes('nope')", lambda: g.num_nodes("nope"))
    rec("ntypes/etypes/canonical_etypes", lambda: [g.ntypes, g.etypes, g.canonical_etypes])
    rec("idtype/device", lambda: [g.idtype, g.device])
    rec("rank()", lambda: g.rank())  # noqa: PLW0108
    rec("graph_name", lambda: g.graph_name)
    rec("DistGraph(wrong name, part_config)", lambda: dd.DistGraph("nope", part_config=side["cfg"]))

    # --- data
    rec("ndata keys", lambda: sorted(g.ndata.keys()))
    rec("edata keys", lambda: sorted(g.edata.keys()))
    rec(
        "ndata['feat'] type/shape/dtype",
        lambda: [
            type(g.ndata["feat"]).__name__,
            list(g.ndata["feat"].shape),
            g.ndata["feat"].dtype,
        ],
    )
    rec(
        "ndata['feat'][ids] == input rows",
        lambda: bool(np.array_equal(g.ndata["feat"][new].numpy(), a["feat"][orig.numpy()])),
    )
    rec("ndata['label'][ids] (by original ID)", lambda: g.ndata["label"][new])
    rec("ndata['train_mask'] dtype", lambda: g.ndata["train_mask"][new].dtype)
    rec("edata['w'][eids] (by original ID)", lambda: g.edata["w"][o2e[th.tensor([0, 5, 10555])]])
    rec("ndata['nope']", lambda: g.ndata["nope"])
    rec("'feat' in ndata / len(ndata)", lambda: ["feat" in g.ndata, len(g.ndata)])
    rec("nodes['_N'].data keys", lambda: sorted(g.nodes["_N"].data.keys()))
    rec("nodes['nope'].data keys (homogeneous)", lambda: sorted(g.nodes["nope"].data.keys()))
    rec("edges['_E'].data keys", lambda: sorted(g.edges["_E"].data.keys()))
    rec("nodes() callable", lambda: g.nodes())  # noqa: PLW0108 (g.nodes raises only when called)
    rec("edges() callable", lambda: g.edges())  # noqa: PLW0108
    rec(
        "node_attr_schemes()",
        lambda: {k: [list(s.shape), s.dtype] for k, s in g.node_attr_schemes().items()},
    )

    # --- structure
    indeg = np.bincount(a["dst"], minlength=n)
    outdeg = np.bincount(a["src"], minlength=n)
    rec("in_degrees(int)", lambda: g.in_degrees(int(new[2])))
    rec("in_degrees(int) value", lambda: int(g.in_degrees(int(new[2]))) == int(indeg[633]))
    rec("out_degrees(int)", lambda: g.out_degrees(int(new[2])))
    rec("in_degrees(tensor)", lambda: g.in_degrees(new))
    rec(
        "in_degrees(tensor) == input",
        lambda: g.in_degrees(new).tolist() == indeg[orig.numpy()].tolist(),
    )
    rec(
        "out_degrees(tensor) == input",
        lambda: g.out_degrees(new).tolist() == outdeg[orig.numpy()].tolist(),
    )
    rec("in_degrees(list)", lambda: g.in_degrees(new.tolist()))
    rec("in_degrees() shape/dtype", lambda: [list(g.in_degrees().shape), g.in_degrees().dtype])
    rec("in_degrees(out of range)", lambda: g.in_degrees(th.tensor([n + 5])))
    rec("in_degrees(-1)", lambda: g.in_degrees(th.tensor([-1])))
    eo = th.tensor([0, 7, 10555])

    def find() -> Any:
        s, d = g.find_edges(o2e[eo])
        return [
            type(g.find_edges(o2e[eo])).__name__,
            s.dtype,
            n2o[s].tolist() == a["src"][eo.numpy()].tolist(),
            n2o[d].tolist() == a["dst"][eo.numpy()].tolist(),
        ]

    rec("find_edges(tensor) (type, dtype, endpoints)", find)
    rec("find_edges(int)", lambda: g.find_edges(int(o2e[eo][0])))
    rec("find_edges(out of range)", lambda: g.find_edges(th.tensor([10556 + 3])))

    # --- partition book (1 partition)
    gpb = g.get_partition_book()
    rec("gpb.num_partitions()/partid", lambda: [gpb.num_partitions(), gpb.partid])
    rec(
        "gpb.ntypes/etypes/canonical_etypes", lambda: [gpb.ntypes, gpb.etypes, gpb.canonical_etypes]
    )
    rec("gpb.metadata()", lambda: [{k: m[k] for k in sorted(m)} for m in gpb.metadata()])
    rec("gpb.nid2partid(tensor)", lambda: gpb.nid2partid(new))
    rec("gpb.eid2partid(tensor)", lambda: gpb.eid2partid(o2e[eo]))
    rec("gpb.partid2nids(0) len/dtype", lambda: [len(gpb.partid2nids(0)), gpb.partid2nids(0).dtype])
    rec("gpb.partid2eids(0) len", lambda: len(gpb.partid2eids(0)))
    rec(
        "gpb.map_to_per_ntype(ids)",
        lambda: (
            [
                x.tolist() == y
                for x, y in zip(gpb.map_to_per_ntype(new), [[0] * 4, new.tolist()], strict=True)
            ]
            + [x.dtype for x in gpb.map_to_per_ntype(new)]
        ),
    )
    rec(
        "gpb.map_to_homo_nid(ids,'_N')",
        lambda: gpb.map_to_homo_nid(new, "_N").tolist() == new.tolist(),
    )
    rec("gpb.nid2localnid(ids,0)", lambda: gpb.nid2localnid(new, 0).tolist() == new.tolist())
    rec("gpb.nid2partid(out of range)", lambda: gpb.nid2partid(th.tensor([n + 1])))
    rec(
        "get_node_partition_policy('_N').policy_str",
        lambda: g.get_node_partition_policy("_N").policy_str,
    )
    rec(
        "get_edge_partition_policy('_E').policy_str",
        lambda: g.get_edge_partition_policy("_E").policy_str,
    )

    # --- DistTensor
    def init1(shape: Any, dtype: Any) -> Any:
        return th.ones(shape, dtype=dtype) * 2

    t = dd.DistTensor((n, 3), th.float32, name="dt1", init_func=init1)
    rec("DistTensor name/shape/dtype/len", lambda: [t.name, list(t.shape), t.dtype, len(t)])
    rec("DistTensor[tensor] (init_func)", lambda: t[new])
    rec("DistTensor[slice]", lambda: t[0:3])
    rec("DistTensor[list]", lambda: t[[0, 1]])
    rec("DistTensor[int]", lambda: t[5])
    rec("DistTensor[numpy]", lambda: t[np.array([0, 1])])
    rec("DistTensor[out of range]", lambda: t[th.tensor([n])])

    def write() -> Any:
        t[new] = th.arange(12, dtype=th.float32).reshape(4, 3)
        return t[new]

    rec("DistTensor write then read", write)
    rec("DistTensor write wrong shape", lambda: t.__setitem__(new, th.zeros(4, 2)))
    rec(
        "DistTensor same name, same shape",
        lambda: dd.DistTensor((n, 3), th.float32, name="dt1")[new],
    )
    rec("DistTensor same name, other shape", lambda: dd.DistTensor((n, 5), th.float32, name="dt1"))
    rec(
        "DistTensor persistent",
        lambda: dd.DistTensor((n, 2), th.int64, name="p1", persistent=True)[new],
    )
    rec("DistTensor persistent unnamed", lambda: dd.DistTensor((n, 2), th.int64, persistent=True))
    rec("DistTensor wrong row count", lambda: dd.DistTensor((n + 1, 2), th.float32, name="bad"))
    rec(
        "DistTensor unnamed name type",
        lambda: type(dd.DistTensor((n, 2), th.float32).name).__name__,
    )
    rec("DistTensor part_policy.policy_str", lambda: t.part_policy.policy_str)

    def slice_write() -> Any:
        t[0:2] = th.full((2, 3), 7.0)
        return t[0:3]

    rec("DistTensor[slice] = values", slice_write)
    rec("gpb.partid2nids(0, '_N') len", lambda: len(gpb.partid2nids(0, "_N")))

    # --- DistEmbedding + sparse optimizers
    for opt_name in ("SparseAdam", "SparseAdagrad"):

        def step(opt_name: str = opt_name) -> Any:
            def init(shape: Any, dtype: Any) -> Any:
                return th.ones(shape, dtype=dtype)

            emb = dd.DistEmbedding(n, 4, name=f"emb_{opt_name}", init_func=init)
            opt = getattr(dd.optim, opt_name)([emb], lr=0.1)
            before = emb.weight[th.arange(n)].clone()
            idx = o2n[th.tensor([3, 3, 10, 2000])]
            with th.autograd.enable_grad():
                out = emb(idx)
                loss = (out * th.arange(4, dtype=th.float32)).sum() + out[0, 0] * 5
                loss.backward()
            opt.step()
            after = emb.weight[th.arange(n)]
            changed = ((after - before).abs().sum(1) > 0).nonzero().flatten()
            return {
                "emb(ids) shape/dtype/requires_grad": [
                    list(out.shape),
                    out.dtype,
                    out.requires_grad,
                ],
                "changed rows (original IDs)": sorted(n2o[changed].tolist()),
                "row 3 after": [round(x, 5) for x in after[o2n[3]].tolist()],
                "row 10 after": [round(x, 5) for x in after[o2n[10]].tolist()],
                "num_embeddings/embedding_dim": [emb.num_embeddings, emb.embedding_dim],
                "name": emb.name,
            }

        rec(f"DistEmbedding + {opt_name} step", step)

    # --- node_split / edge_split (1 partition, 1 trainer)
    mask = g.ndata["train_mask"][th.arange(n)]
    train_orig = set(np.flatnonzero(a["train_mask"]).tolist())
    for fe in (True, False):
        rec(f"node_split(mask, force_even={fe})", lambda fe=fe: [
            dd.node_split(mask, gpb, force_even=fe).dtype,
            set(n2o[dd.node_split(mask, gpb, force_even=fe)].tolist()) == train_orig])  # fmt: skip
    rec("node_split(DistTensor mask)", lambda: len(dd.node_split(g.ndata["train_mask"], gpb)))
    rec("node_split(DistTensor mask, no book)", lambda: len(dd.node_split(g.ndata["train_mask"])))

    def book_files() -> Any:
        cfg = side["cfg"]
        got = dd.load_partition_book(cfg, 0)
        part = dd.load_partition(cfg, 0)
        return {
            "load_partition_book: len, name, ntypes, etypes": [len(got), *got[1:]],
            "load_partition: len, node feature keys": [len(part), sorted(part[1])],
            "load_partition: gpb.partid": part[3].partid,
        }

    rec("load_partition_book / load_partition", book_files)
    rec("node_split(no partition_book, tensor)", lambda: len(dd.node_split(mask)))
    rec("node_split(wrong length)", lambda: dd.node_split(mask[:10], gpb))
    rec("node_split(ID list)", lambda: dd.node_split(th.tensor([0, 1, 2]), gpb))
    emask = th.zeros(g.num_edges(), dtype=th.bool)
    emask[o2e[th.arange(0, 10556, 3)]] = True
    rec(
        "edge_split(mask)",
        lambda: [
            len(dd.edge_split(emask, gpb)),
            set(e2o[dd.edge_split(emask, gpb)].tolist()) == set(range(0, 10556, 3)),
        ],
    )

    # --- splits over 2 partitions, several trainers (each rank with its partition's book)
    n2o2 = side["nmap2"]
    mask2 = th.from_numpy(a["train_mask"])[n2o2]
    for world, kw in (
        (2, {}),
        (4, {}),
        (2, {"force_even": False}),
        (4, {"node_trainer_ids": "tid"}),
    ):
        label = f"node_split 2 parts, {world} trainers {kw or ''}".strip()

        def per_rank(world: int = world, kw: dict[str, Any] = kw) -> Any:
            shares = []
            for r in range(world):
                book = side["book2"](r * 2 // world)
                args = dict(kw)
                if "node_trainer_ids" in args:
                    args["node_trainer_ids"] = n2o2 % world  # by original ID
                shares.append(side["split"](mask2, book, r, world, **args))
            allids = th.cat(shares)
            return {
                "dtype": shares[0].dtype,
                # even shares; by trainer IDs or partition the sizes follow the partitioning
                "sizes": sorted(len(s) for s in shares) if not kw else len(shares),
                "union == mask (original IDs)": set(n2o2[allids].tolist()) == train_orig,
                "disjoint": len(set(allids.tolist())) == len(allids),
                "each in its partition": all(
                    bool((side["book2"](0).nid2partid(s) == r * 2 // world).all())
                    for r, s in enumerate(shares)
                )
                if not kw.get("force_even", True)
                else None,
            }

        rec(label, per_rank)

    # --- one-hop sampling
    src_o, dst_o = a["src"], a["dst"]
    edge_set = set(zip(src_o.tolist(), dst_o.tolist(), strict=True))
    seeds = o2n[th.tensor([0, 1, 633, 1701])]

    def frontier(sg: Any, fanout: int | None) -> Any:
        s, d = sg.edges()
        eid = sg.edata[dgl.EID]
        fs, fd = g.find_edges(eid)
        per = np.bincount(n2o[d].numpy(), minlength=n)[n2o[seeds].numpy()]
        want = indeg[n2o[seeds].numpy()]
        return {
            "type": type(sg).__name__,
            "edges() dtype": s.dtype,
            "num_nodes == g": sg.num_nodes() == g.num_nodes(),
            "edata keys": sorted(sg.edata.keys()),
            "edges are input edges": all(
                (x, y) in edge_set for x, y in zip(n2o[s].tolist(), n2o[d].tolist(), strict=True)
            ),
            "dst in seeds": set(d.tolist()) <= set(seeds.tolist()),
            "edata[EID] matches find_edges": bool((fs == s).all() and (fd == d).all()),
            "per-seed count": (per == (np.minimum(want, fanout) if fanout else want)).all().item(),
        }

    rec("DistGraph.sample_neighbors(seeds, 3)", lambda: frontier(g.sample_neighbors(seeds, 3), 3))
    rec("sample_neighbors(g, seeds, 3)", lambda: frontier(dd.sample_neighbors(g, seeds, 3), 3))
    rec("sample_neighbors(g, seeds, -1)", lambda: frontier(dd.sample_neighbors(g, seeds, -1), None))
    rec("in_subgraph(g, seeds)", lambda: frontier(dd.in_subgraph(g, seeds), None))

    def edge_sub() -> Any:
        eo = th.tensor([0, 7, 300])
        sg = g.edge_subgraph(o2e[eo])
        s, d = sg.edges()
        nid = sg.ndata[dgl.NID]
        return {
            "type/num_edges/num_nodes": [type(sg).__name__, sg.num_edges(), sg.num_nodes()],
            "edata[EID] == eids": sg.edata[dgl.EID].tolist() == o2e[eo].tolist(),
            "endpoints (original IDs)": [
                n2o[nid[s]].tolist() == a["src"][eo.numpy()].tolist(),
                n2o[nid[d]].tolist() == a["dst"][eo.numpy()].tolist(),
            ],
        }

    rec("DistGraph.edge_subgraph(eids)", edge_sub)
    rec(
        "sample_neighbors(edge_dir='out')",
        lambda: type(dd.sample_neighbors(g, seeds, 3, edge_dir="out")).__name__,
    )
    rec("sample_neighbors(out of range)", lambda: dd.sample_neighbors(g, th.tensor([n + 2]), 3))

    # --- loaders
    train = dd.node_split(mask, gpb)

    def dist_dl() -> Any:
        dl = dd.DistDataLoader(
            train, batch_size=32, shuffle=False, collate_fn=lambda x: x, drop_last=False
        )
        batches = list(dl)
        return {
            "type": type(batches[0]).__name__,
            "num": len(batches),
            "first/last": [len(batches[0]), len(batches[-1])],
            "covers": sorted(int(x) for b in batches for x in b) == sorted(train.tolist()),
        }

    rec("DistDataLoader(collate_fn=identity)", dist_dl)
    rec("len(DistDataLoader)", lambda: len(dd.DistDataLoader(train, batch_size=32)))

    def node_loader(cls: Any) -> Any:
        sampler = dgl.dataloading.MultiLayerNeighborSampler([5, 3])
        dl = cls(g, train, sampler, batch_size=64, shuffle=False, drop_last=False)
        it = list(dl)
        inp, out, blocks = it[0]
        b0, b1 = blocks
        ok_edges = True
        for b in blocks:
            s, d = b.edges()
            eid = b.edata[dgl.EID]
            fs, fd = g.find_edges(eid)
            ok_edges &= bool(
                (b.srcdata[dgl.NID][s] == fs).all() and (b.dstdata[dgl.NID][d] == fd).all()
            )
        return {
            "batch": [type(inp).__name__, type(out).__name__, type(blocks).__name__, len(blocks)],
            "num batches": len(it),
            "output_nodes == seeds[:64]": out.tolist() == train[:64].tolist(),
            "input_nodes == blocks[0].srcdata[NID]": bool((inp == b0.srcdata[dgl.NID]).all()),
            "blocks[-1].num_dst_nodes()": b1.num_dst_nodes(),
            "blocks[-1].dstdata[NID] == seeds": bool((b1.dstdata[dgl.NID] == out).all()),
            "dst prefix of src": all(
                bool((b.srcdata[dgl.NID][: b.num_dst_nodes()] == b.dstdata[dgl.NID]).all())
                for b in blocks
            ),
            "chained": bool((b0.dstdata[dgl.NID] == b1.srcdata[dgl.NID]).all()),
            "edata[EID] = graph edges of (src,dst)": ok_edges,
            "max in-degree per layer <= fanout": [
                int(b.in_degrees().max()) <= f for b, f in zip(blocks, [5, 3], strict=True)
            ],
            "block types": [
                b.is_block,
                b.ntypes if hasattr(b, "ntypes") else None,
                b.srctypes,
                b.dsttypes,
                b.canonical_etypes,
            ],
            "srcdata/dstdata/edata keys": [
                sorted(b0.srcdata.keys()),
                sorted(b0.dstdata.keys()),
                sorted(b0.edata.keys()),
            ],
            "num_src_nodes() == len(srcdata[NID])": b0.num_src_nodes() == len(b0.srcdata[dgl.NID]),
            "idtype/device": [b0.idtype, b0.device],
            "ID dtypes": [inp.dtype, out.dtype, b0.edata[dgl.EID].dtype],
        }

    rec(
        "DistNodeDataLoader(MultiLayerNeighborSampler)",
        lambda: node_loader(dgl.dataloading.DistNodeDataLoader),
    )
    rec("dgl.distributed.DistNodeDataLoader", lambda: node_loader(dd.DistNodeDataLoader))
    rec("dgl.dataloading.NodeDataLoader", lambda: node_loader(dgl.dataloading.NodeDataLoader))
    rec(
        "dgl.dataloading.NeighborSampler([5,3]) in DistNodeDataLoader",
        lambda: len(
            list(
                dgl.dataloading.DistNodeDataLoader(
                    g, train, dgl.dataloading.NeighborSampler([5, 3]), batch_size=64
                )
            )
        ),
    )

    def edge_loader() -> Any:
        sampler = dgl.dataloading.MultiLayerNeighborSampler([4])
        eids = o2e[th.arange(0, 200)]
        neg = dgl.dataloading.negative_sampler.Uniform(2)
        dl = dgl.dataloading.DistEdgeDataLoader(
            g, eids, sampler, negative_sampler=neg, batch_size=50, shuffle=False
        )
        it = list(dl)
        inp, pos, negg, blocks = it[0]
        ps, pd = pos.edges()
        fs, fd = g.find_edges(pos.edata[dgl.EID])
        return {
            "batch": [type(inp).__name__, len(it[0]), len(blocks)],
            "num batches": len(it),
            "pos num_edges / neg num_edges": [pos.num_edges(), negg.num_edges()],
            "pos edata[EID] == eids[:50]": pos.edata[dgl.EID].tolist() == eids[:50].tolist(),
            "pos edges are the edges": bool(
                (pos.ndata[dgl.NID][ps] == fs).all() and (pos.ndata[dgl.NID][pd] == fd).all()
            ),
            "pos.ndata[NID] == blocks[-1].dstdata[NID]": bool(
                (pos.ndata[dgl.NID] == blocks[-1].dstdata[dgl.NID]).all()
            ),
            "pair num_nodes == neg num_nodes": pos.num_nodes() == negg.num_nodes(),
        }

    rec("DistEdgeDataLoader(negative_sampler=Uniform(2))", edge_loader)
    rec(
        "DistNodeDataLoader(num_workers=2)",
        lambda: (
            type(
                dgl.dataloading.DistNodeDataLoader(
                    g,
                    train,
                    dgl.dataloading.MultiLayerNeighborSampler([2]),
                    batch_size=8,
                    num_workers=2,
                )
            ).__name__
        ),
    )
    rec("dgl.NID/dgl.EID", lambda: [dgl.NID, dgl.EID])
    rec("dgl.DGLError is an Exception class", lambda: issubclass(dgl.DGLError, Exception))


def probe_hetero(dgl: Any, side: dict[str, Any], rec: Recorder) -> None:
    import numpy as np
    import torch as th

    dd = dgl.distributed
    a = het_arrays()
    g = side["g"]
    nmap, emap = side["nmap"], side["emap"]
    o2n = {t: inverse(v) for t, v in nmap.items()}
    o2e = {c: inverse(v) for c, v in emap.items()}
    W = ("author", "writes", "paper")
    rec("ntypes/etypes/canonical_etypes", lambda: [g.ntypes, g.etypes, g.canonical_etypes])
    rec("num_nodes()/num_edges()", lambda: [g.num_nodes(), g.num_edges()])
    rec("num_nodes(t) per type", lambda: {t: g.num_nodes(t) for t in HET_NODES})
    rec("num_edges(etype str)", lambda: g.num_edges("writes"))
    rec("num_edges(canonical)", lambda: [g.num_edges(c) for c in HET_ETYPES])
    rec("num_nodes('nope')", lambda: g.num_nodes("nope"))
    rec("num_edges('nope')", lambda: g.num_edges("nope"))
    rec("ndata on typed graph", lambda: sorted(g.ndata.keys()))
    rec("edata on typed graph", lambda: sorted(g.edata.keys()))
    rec("nodes['paper'].data keys", lambda: sorted(g.nodes["paper"].data.keys()))
    rec("nodes['author'].data keys", lambda: sorted(g.nodes["author"].data.keys()))
    rec("nodes['nope'].data", lambda: sorted(g.nodes["nope"].data.keys()))
    rec("edges[W].data keys", lambda: sorted(g.edges[W].data.keys()))
    rec("edges['nope'].data", lambda: sorted(g.edges["nope"].data.keys()))
    po = th.tensor([0, 5, 199])
    pn = o2n["paper"][po]
    rec(
        "nodes['paper'].data['feat'][ids] == input",
        lambda: bool(
            np.array_equal(g.nodes["paper"].data["feat"][pn].numpy(), a["feat"][po.numpy()])
        ),
    )
    rec(
        "nodes['paper'].data['label'][ids] (by original ID)",
        lambda: g.nodes["paper"].data["label"][pn],
    )
    rec(
        "get_ntype_id/get_etype_id",
        lambda: [g.get_ntype_id("paper"), g.get_etype_id(W), g.get_etype_id("cite")],
    )
    rec("to_canonical_etype('writes')", lambda: g.to_canonical_etype("writes"))

    def find() -> Any:
        eo = th.tensor([0, 9, 599])
        s, d = g.find_edges(o2e[W][eo], etype=W)
        return [
            s.dtype,
            nmap["author"][s].tolist() == a[W][0][eo.numpy()].tolist(),
            nmap["paper"][d].tolist() == a[W][1][eo.numpy()].tolist(),
        ]

    rec("find_edges(eids, etype=W) (type-wise, by original ID)", find)
    rec("find_edges(eids) without etype", lambda: g.find_edges(th.tensor([0])))
    rec("in_degrees() on typed graph", lambda: g.in_degrees(th.tensor([0])))

    gpb = g.get_partition_book()
    rec(
        "gpb.ntypes/etypes/canonical_etypes", lambda: [gpb.ntypes, gpb.etypes, gpb.canonical_etypes]
    )

    def maps() -> Any:
        homo = gpb.map_to_homo_nid(pn, "paper")
        t, per = gpb.map_to_per_ntype(homo)
        et_homo = gpb.map_to_homo_eid(o2e[W][th.tensor([0, 1])], W)
        et, per_e = gpb.map_to_per_etype(et_homo)
        return {
            "map_to_homo_nid dtype": homo.dtype,
            "map_to_per_ntype round trip": [
                t.tolist() == [gpb.ntypes.index("paper")] * 3,
                per.tolist() == pn.tolist(),
                t.dtype,
                per.dtype,
            ],
            "map_to_per_etype round trip": [
                et.tolist() == [gpb.canonical_etypes.index(W)] * 2,
                per_e.tolist() == o2e[W][th.tensor([0, 1])].tolist(),
            ],
            "nid2partid(ids, 'paper')": gpb.nid2partid(pn, "paper").tolist(),
            "partid2nids(0, 'paper') len": len(gpb.partid2nids(0, "paper")),
            "partid2eids(0, W) len": len(gpb.partid2eids(0, W)),
            "metadata num_nodes": gpb.metadata()[0]["num_nodes"],
        }

    rec("gpb typed maps", maps)
    rec("load_partition_book(cfg, 0)[1:]", lambda: list(dd.load_partition_book(side["cfg"], 0)[1:]))
    rec("gpb.map_to_homo_nid(ids, 'nope')", lambda: gpb.map_to_homo_nid(pn, "nope"))

    pol = g.get_node_partition_policy("paper")
    rec("node policy policy_str", lambda: pol.policy_str)
    rec(
        "edge policy policy_str (str etype)",
        lambda: g.get_edge_partition_policy("writes").policy_str,
    )
    rec("edge policy policy_str (canonical)", lambda: g.get_edge_partition_policy(W).policy_str)

    def typed_tensor() -> Any:
        t = dd.DistTensor((200, 2), th.float32, name="pt", part_policy=pol)
        t[pn] = th.ones(3, 2)
        return [list(t.shape), t[pn].sum().item(), t.part_policy.policy_str]

    rec("DistTensor(part_policy=paper)", typed_tensor)
    rec(
        "DistTensor((200,2)) policy inferred",
        lambda: dd.DistTensor((200, 2), th.float32, name="pt2").part_policy.policy_str,
    )
    rec(
        "DistTensor((60,2)) policy inferred",
        lambda: dd.DistTensor((60, 2), th.float32, name="at2").part_policy.policy_str,
    )

    def typed_emb() -> Any:
        emb = dd.DistEmbedding(
            60,
            3,
            name="aemb",
            init_func=lambda s, d: th.zeros(s, dtype=d),
            part_policy=g.get_node_partition_policy("author"),
        )
        opt = dd.optim.SparseAdagrad([emb], lr=0.5)
        ao = th.tensor([1, 7])
        with th.autograd.enable_grad():
            emb(o2n["author"][ao]).sum().backward()
        opt.step()
        w = emb.weight[th.arange(60)]
        return [
            sorted(nmap["author"][(w.abs().sum(1) > 0).nonzero().flatten()].tolist()),
            [round(x, 5) for x in w[o2n["author"][1]].tolist()],
        ]

    rec("DistEmbedding(author) + SparseAdagrad", typed_emb)

    tm = g.nodes["paper"].data["train_mask"][th.arange(200)]
    train_orig = set(np.flatnonzero(a["train_mask"]).tolist())
    rec(
        "node_split(mask, ntype='paper')",
        lambda: set(nmap["paper"][dd.node_split(tm, gpb, ntype="paper")].tolist()) == train_orig,
    )
    rec("node_split(mask) without ntype", lambda: dd.node_split(tm, gpb))
    rec(
        "edge_split(mask, etype=W)",
        lambda: len(dd.edge_split(th.ones(600, dtype=th.bool), gpb, etype=W)),
    )

    seeds = {"paper": pn}

    def typed_sample() -> Any:
        sg = dd.sample_neighbors(g, seeds, 2)
        return {
            "type": type(sg).__name__,
            "canonical_etypes": sg.canonical_etypes,
            "edata keys": sorted(sg.edata.keys()) if len(sg.canonical_etypes) == 1 else None,
            "per etype counts <= 2 per seed": {
                str(c): int(sg.num_edges(c)) <= 6 for c in sg.canonical_etypes
            },
            "EID per etype dtype": str(sg.edges[W].data[dgl.EID].dtype),
        }

    rec("sample_neighbors(g, {'paper': ids}, 2)", typed_sample)

    def typed_fanout() -> Any:
        fan = {c: (1 if c == W else 0) for c in HET_ETYPES}
        sg = dd.sample_neighbors(g, seeds, fan)
        s, d = sg.edges(etype=W)
        return {
            "writes edges <= 1 per seed": int(sg.num_edges(W)) <= 3,
            "cite edges": int(sg.num_edges(("paper", "cite", "paper"))),
            "writes endpoints typed": [
                bool((d.unsqueeze(1) == pn).any(1).all()),
                bool((s < 60).all()),
            ],
        }

    rec("sample_neighbors(g, seeds, {etype: fanout})", typed_fanout)

    def etype_fanout() -> Any:
        fan = {c: (1 if c == W else 0) for c in HET_ETYPES}
        sg = dd.sample_etype_neighbors(g, seeds, fan)
        return {
            "type": type(sg).__name__,
            "writes edges <= 1 per seed": int(sg.num_edges(W)) <= 3,
            "writes edges > 0": int(sg.num_edges(W)) > 0,
            "EID matches find_edges": bool(
                (g.find_edges(sg.edges[W].data[dgl.EID], etype=W)[1] == sg.edges(etype=W)[1]).all()
            ),
        }

    rec("sample_etype_neighbors(g, seeds, {etype: fanout})", etype_fanout)

    def typed_in_subgraph() -> Any:
        sg = dd.in_subgraph(g, seeds)
        indeg = {c: int(np.isin(a[c][1], po.numpy()).sum()) for c in HET_ETYPES if c[2] == "paper"}
        return {str(c): int(sg.num_edges(c)) == n for c, n in indeg.items()}

    rec("in_subgraph(g, {'paper': ids}) per-etype counts", typed_in_subgraph)

    def typed_loader() -> Any:
        train = {"paper": dd.node_split(tm, gpb, ntype="paper")}
        sampler = dgl.dataloading.MultiLayerNeighborSampler([3, 3])
        dl = dgl.dataloading.DistNodeDataLoader(g, train, sampler, batch_size=16, shuffle=False)
        inp, out, blocks = next(iter(dl))
        b0 = blocks[0]
        return {
            "input_nodes type/keys": [type(inp).__name__, sorted(inp)],
            "output_nodes keys": sorted(out),
            "srctypes/dsttypes": [b0.srctypes, b0.dsttypes],
            "canonical_etypes": b0.canonical_etypes,
            "num_src_nodes('author') == len(input_nodes['author'])": b0.num_src_nodes("author")
            == len(inp["author"]),
            "srcdata[NID] is a dict": type(b0.srcdata[dgl.NID]).__name__,
            "blocks[-1].num_dst_nodes('paper')": blocks[-1].num_dst_nodes("paper"),
            "edata[EID] keys": sorted(str(k) for k in b0.edata[dgl.EID]),
        }

    rec("DistNodeDataLoader typed seeds", typed_loader)


# ---------------------------------------------------------------------------- a side
def run_side(which: str, graph: str, out: str) -> None:
    import numpy as np
    import torch as th

    th.manual_seed(0)
    np.random.seed(0)
    work = tempfile.mkdtemp(prefix=f"diff-{which}-{graph}-")
    name = "cora" if graph == "cora" else "het"
    side: dict[str, Any] = {}
    os.environ["DGL_DIST_MODE"] = "standalone"  # DGL's switch; DistGNN honours it too
    if which == "dgl":
        import dgl  # type: ignore[import-not-found]

        src = build_dgl_graph(dgl, graph)
        role = __import__("dgl.distributed.role", fromlist=["role"])

        def split(mask: Any, book: Any, rank: int, world: int, **kw: Any) -> Any:
            saved = role.get_num_trainers
            role.get_num_trainers = lambda: world
            try:
                return dgl.distributed.node_split(mask, book, rank=rank, **kw)
            finally:
                role.get_num_trainers = saved

        side["split"] = split
    else:
        import distgnn as dgl  # type: ignore[import-not-found,no-redef]

        src = build_distgnn_graph(graph)

        def split(mask: Any, book: Any, rank: int, world: int, **kw: Any) -> Any:
            return dgl.distributed.node_split(mask, book, rank=rank, world_size=world, **kw)

        side["split"] = split
    dd = dgl.distributed
    nmap, emap = dd.partition_graph(
        src, name, 1, f"{work}/p1", part_method="metis", return_mapping=True
    )
    nmap2, _ = dd.partition_graph(
        src, name, 2, f"{work}/p2", part_method="metis", return_mapping=True
    )
    cfg = f"{work}/p1/{name}.json"
    side.update(nmap=nmap, emap=emap, nmap2=nmap2, cfg=cfg)
    side["book2"] = lambda p: dd.load_partition_book(f"{work}/p2/{name}.json", p)[0]
    ip = Path(work) / "ip_config.txt"
    ip.write_text("127.0.0.1\n")
    port = 29000 + os.getpid() % 3000
    th.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1
    )
    rec = Recorder()
    rec("initialize(ip_config) returns", lambda: dd.initialize(str(ip)))
    rec("DistGraph(name) without part_config", lambda: dd.DistGraph(name))
    side["g"] = dd.DistGraph(name, part_config=cfg)
    rec("type(DistGraph)", lambda: type(side["g"]).__name__)
    (probe_homo if graph == "cora" else probe_hetero)(dgl, side, rec)
    Path(out).write_text(json.dumps(rec.items, indent=1, default=str))
    os._exit(0)  # DGL's standalone client has threads that do not stop by themselves


# ---------------------------------------------------------------------------- the parent
_ASSERTS = "DGL asserts; DistGNN raises a DistGNNError naming the mistake"
_PAST_END = (
    "DGL reads past its arrays (garbage, no error); DistGNN raises IDOutOfRange (IndexError)"
)
_DGL_BUG = "DGL 2.1 fails on a non-tensor; DistGNN does what DGL documents (int in, int out)"
_FRONTIER = "a SubGraph, not a DGLGraph (same edges, EID, counts); every edge type kept"
INTENDED: dict[str, str] = {
    "DistGraph(name) without part_config": _ASSERTS,
    "DistTensor persistent unnamed": _ASSERTS,
    "DistTensor wrong row count": _ASSERTS,
    "DistTensor same name, other shape": _ASSERTS,
    "node_split(no partition_book, tensor)": _ASSERTS,
    "node_split(wrong length)": _ASSERTS,
    "node_split(ID list)": _ASSERTS,
    "node_split(mask) without ntype": _ASSERTS,
    "ndata on typed graph": _ASSERTS,
    "edata on typed graph": _ASSERTS,
    "find_edges(eids) without etype": _ASSERTS,
    "DistGraph(wrong name, part_config)": "DistGNN checks the name against the partitions",
    "ndata['train_mask'] dtype": "bool masks stay bool (DGL's partitioner stores uint8)",
    "node_attr_schemes()": "bool masks stay bool (DGL's partitioner stores uint8)",
    "nodes['nope'].data keys (homogeneous)": "DistGNN refuses an unknown type name",
    "in_degrees(int)": _DGL_BUG,
    "in_degrees(int) value": _DGL_BUG,
    "out_degrees(int)": _DGL_BUG,
    "in_degrees(list)": _DGL_BUG,
    "find_edges(int)": _DGL_BUG,
    "in_degrees(out of range)": _PAST_END,
    "in_degrees(-1)": _PAST_END,
    "find_edges(out of range)": _PAST_END,
    "gpb.nid2partid(out of range)": _PAST_END,
    "sample_neighbors(out of range)": _PAST_END,
    "DistGraph.sample_neighbors(seeds, 3)": _FRONTIER,
    "sample_neighbors(g, seeds, 3)": _FRONTIER,
    "sample_neighbors(g, seeds, -1)": _FRONTIER,
    "in_subgraph(g, seeds)": _FRONTIER,
    "sample_neighbors(g, {'paper': ids}, 2)": _FRONTIER,
    "DistNodeDataLoader typed seeds": "blocks keep every edge type (DGL: those sampled)",
    "DistGraph.edge_subgraph(eids)": _FRONTIER,
    "sample_neighbors(g, seeds, {etype: fanout})": "DGL 2.1 takes a per-type fanout in "
    "sample_etype_neighbors only; DistGNN in both",
    "in_subgraph(g, {'paper': ids}) per-etype counts": "DGL 2.1's in_subgraph on a typed "
    "graph: one node type, its IDs taken as homogeneous, an untyped result",
    "sample_etype_neighbors(g, seeds, {etype: fanout})": _FRONTIER,
    "sample_neighbors(edge_dir='out')": "servers keep in-edges only (documented)",
    "len(DistDataLoader)": "DistGNN's loaders also have len()",
    "dgl.distributed.DistNodeDataLoader": "DGL 0.x's name kept (DGL 2.1: dgl.dataloading)",
    "DistTensor((60,2)) policy inferred": "DistGNN infers the one type of that size",
    "DistTensor name/shape/dtype/len": "DGL's name has the policy ('node~_N~dt1'); left",
    "DistTensor write wrong shape": "both raise: torch's RuntimeError / ValueError; left",
}
"""Differences that are design choices or DGL's bugs (docs/dgl-migration.md), by item."""


def _err_same(d: dict[str, Any], o: dict[str, Any]) -> bool:
    if d["raises"] == "DGLError":
        return o["family"] == "DGLError"
    return d["raises"] in o["catch_as"] or d["raises"] == o["raises"]


def diff(d: Any, o: Any, path: str = "") -> list[str]:
    if isinstance(d, dict) and isinstance(o, dict) and set(d) == set(o):
        return [x for k in d for x in diff(d[k], o[k], f"{path}{k}: ")]
    if d == o:
        return []
    return [
        f"{path}DGL {json.dumps(d, default=str)[:90]} / DistGNN {json.dumps(o, default=str)[:90]}"
    ]


def compare(dgl_items: dict[str, Any], our: dict[str, Any]) -> list[tuple[str, str, str]]:
    rows = []
    for k in dgl_items.keys() | our.keys():
        d, o = dgl_items.get(k), our.get(k)
        if d is None or o is None:
            rows.append((k, "no", "only on one side"))
        elif "raises" in d and "raises" in o:
            same = _err_same(d, o)
            how = "" if same else f"DGL raises {d['raises']} / DistGNN {o['raises']}"
            rows.append((k, "yes" if same else "no", how))
        elif "raises" in d or "raises" in o:
            e = d if "raises" in d else o
            who = "DGL" if "raises" in d else "DistGNN"
            rows.append((k, "no", f"only {who} raises {e['raises']}: {e['msg'][:100]}"))
        else:
            how = "; ".join(diff(d["ok"], o["ok"]))
            rows.append((k, "no" if how else "yes", how))
    order = list(dgl_items) + [k for k in our if k not in dgl_items]
    return sorted(rows, key=lambda r: order.index(r[0]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--side", choices=["dgl", "distgnn"], help=argparse.SUPPRESS)
    p.add_argument("--graph", choices=["cora", "hetero"], help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--dgl-python", default=str(DGL_PY))
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--only-differences", action="store_true")
    a = p.parse_args()
    if a.side:
        run_side(a.side, a.graph, a.out)
        return
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'runtime'}:{REPO}", DISTGNN_LOG_LEVEL="error")
    for k in ("DISTGNN_SERVERS", "DISTGNN_MANIFEST", "RANK", "WORLD_SIZE"):
        env.pop(k, None)
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        for graph in ("cora", "hetero"):
            res = {}
            for which, py in (("dgl", a.dgl_python), ("distgnn", sys.executable)):
                out = f"{tmp}/{which}-{graph}.json"
                cmd = [py, __file__, "--side", which, "--graph", graph, "--out", out]
                r = subprocess.run(
                    cmd, env=env, capture_output=True, text=True, timeout=900, check=False
                )
                if r.returncode or not Path(out).exists():
                    sys.exit(f"{which} side on {graph} failed:\n{r.stderr[-4000:]}")
                res[which] = json.loads(Path(out).read_text())
            table += [(f"[{graph}] {k}", s, h) for k, s, h in compare(res["dgl"], res["distgnn"])]
    table = [
        (i, "no*" if s == "no" and i.split("] ", 1)[1] in INTENDED else s, h) for i, s, h in table
    ]
    same = sum(1 for r in table if r[1] == "yes")
    known = sum(1 for r in table if r[1] == "no*")
    width = max(len(r[0]) for r in table)
    print(f"{'item':<{width}}  same  differs (how)")
    for item, s, how in table:
        if not (a.only_differences and s == "yes"):
            why = f"  [{INTENDED[item.split('] ', 1)[1]]}]" if s == "no*" else ""
            print(f"{item:<{width}}  {s:<4}  {how[:150]}{why}")
    print(
        f"\n{same} of {len(table)} items the same; {known} differ as intended or listed "
        f"(no*), {len(table) - same - known} differ otherwise"
    )
    if a.json:
        Path(a.json).write_text(
            json.dumps(
                [dict(zip(("item", "same", "how"), r, strict=True)) for r in table], indent=1
            )
        )


if __name__ == "__main__":
    main()
