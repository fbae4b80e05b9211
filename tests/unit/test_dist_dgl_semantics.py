"""DGL's semantics of ``distgnn.distributed`` (standalone mode: every partition in-process,
the same request handlers as the servers). Each test pins one behaviour that used to
differ silently from DGL (issue 14)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.support.cora import partition_cora

import distgnn.distributed as dd
from distgnn.distributed import rowshards
from distgnn.distributed.context import DEFAULT
from distgnn.errors import ConfigError, DistGNNError, ManifestError, StorageError
from distgnn.graph.io import graph_from_arrays
from distgnn.partition.partitioner import partition_graph
from distgnn.rpc.client import Call
from distgnn.rpc.protocol import MsgType

# string order ("paper:cite-by:venue" < "paper:cite:paper", '-' < ':') differs from DGL's
# tuple order (('paper', 'cite', 'paper') < ('paper', 'cite-by', 'venue'))
DGL_ORDER = [
    ("author", "writes", "paper"),
    ("paper", "cite", "paper"),
    ("paper", "cite-by", "venue"),
    ("paper", "written-by", "author"),
]


def _hetero_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    n = {"author": 12, "paper": 30, "venue": 4}
    out: dict[str, np.ndarray] = {f"num_nodes/{t}": np.array(c) for t, c in n.items()}
    for s, e, d in DGL_ORDER:
        m = 40
        out[f"edges/{s}:{e}:{d}/src"] = rng.integers(0, n[s], m)
        out[f"edges/{s}:{e}:{d}/dst"] = rng.integers(0, n[d], m)
    out["ndata/paper/feat"] = np.arange(30, dtype=np.float32).reshape(30, 1)
    return out


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> str:
    return partition_cora(tmp_path_factory.mktemp("cora2dgl"), cora_path, 2)


@pytest.fixture(scope="module")
def hetero_parts(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("hetdgl")
    g = graph_from_arrays(_hetero_arrays(), "test")
    partition_graph(g, 2, str(out), "het", method="random", progress=False)
    return str(out / "het.json")


@pytest.fixture()
def ctx(cora_parts: str) -> Iterator[dd.DistContext]:
    c = dd.initialize(manifest=cora_parts, standalone=True)
    yield c
    c.close()


def _names(ctx: dd.DistContext) -> set[str]:
    return set(ctx.call(0, Call(MsgType.LIST_TENSORS, {})).meta["tensors"])


def test_initialize_sets_the_default_context_and_exit_client_closes_it(cora_parts: str) -> None:
    ctx = dd.initialize(manifest=cora_parts, standalone=True)
    g = dd.DistGraph("cora")  # DGL's call: no context passed
    assert g.ctx is ctx and g.rank() == 0 and g.idtype == torch.int64
    assert g.device == torch.device("cpu") and g.local_partition is None
    with pytest.raises(ConfigError, match="requested"):
        dd.DistGraph("citeseer")
    t = dd.DistTensor((g.num_nodes(), 2), torch.float32)  # default context too
    assert t.ctx is ctx
    g.barrier()  # one trainer: returns at once
    dd.exit_client()
    assert ctx.closed and DEFAULT.ctx is None
    with pytest.raises(ConfigError, match="initialize"):
        dd.DistGraph("cora")


def test_dgl_standalone_mode_initialize_then_part_config(
    cora_parts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DGL script run by hand: ``initialize(ip_config)`` with no servers loads nothing
    (DGL returns None too), ``DistGraph(name, part_config=...)`` loads the graph."""
    for var in ("DISTGNN_SERVERS", "DISTGNN_MANIFEST"):
        monkeypatch.delenv(var, raising=False)
    assert dd.initialize(None) is None
    with pytest.raises(ConfigError, match=r"standalone mode .*DistGraph\(graph_name, part_config="):
        dd.DistGraph("cora")
    with pytest.raises(ConfigError, match="the partitions loaded hold graph 'cora'"):
        dd.DistGraph("citeseer", part_config=cora_parts)
    assert DEFAULT.ctx is None  # the refused graph's partitions were released
    g = dd.DistGraph("cora", part_config=cora_parts)
    assert g.num_nodes() == 2708 and DEFAULT.ctx is g.ctx
    assert len(dd.node_split(g.ndata["train_mask"], g.get_partition_book(), force_even=True)) == 140
    g.close()
    with pytest.raises(ConfigError, match="needs a partition manifest"):
        dd.initialize(None, standalone=True)


def test_dgl_dist_mode_standalone_does_not_read_ip_config(
    cora_parts: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DGL_DIST_MODE=standalone`` (DGL's switch) with an ``--ip_config`` file: DGL ignores
    the file, so does DistGNN (it used to connect to the listed servers and time out)."""
    ip = tmp_path / "ip_config.txt"
    ip.write_text("127.0.0.1 1\n")  # nothing listens on port 1: a connection would fail
    monkeypatch.setenv("DGL_DIST_MODE", "standalone")
    monkeypatch.setenv("DISTGNN_SERVERS", "127.0.0.1:1")
    monkeypatch.delenv("DISTGNN_MANIFEST", raising=False)
    assert dd.initialize(str(ip), connect_timeout=1.0) is None
    with dd.DistGraph("cora", part_config=cora_parts) as g:
        assert g.ctx.standalone and g.num_nodes() == 2708
    monkeypatch.setenv("DGL_DIST_MODE", "distributed")  # servers are read again
    with pytest.raises(DistGNNError):
        dd.initialize(str(ip), connect_timeout=1.0)


def test_dgl_error_catches_distgnn_errors(cora_parts: str) -> None:
    """``except dgl.DGLError`` after ``import distgnn as dgl`` catches DistGNN's errors."""
    import distgnn as dgl

    assert dgl.DGLError is DistGNNError
    with pytest.raises(dgl.DGLError, match="hold graph 'cora'"):
        dd.DistGraph("citeseer", part_config=cora_parts)


def test_degrees_of_one_integer_node_are_an_int(ctx: dd.DistContext) -> None:
    """DGL documents ``g.in_degrees(v)`` / ``out_degrees(u)`` as an ``int`` when ``v`` is
    an ``int`` (``numbers.Integral``: NumPy integers too), a tensor otherwise."""
    g = dd.DistGraph("cora")
    every_in, every_out = g.in_degrees(), g.out_degrees()
    assert isinstance(every_in, torch.Tensor) and isinstance(every_out, torch.Tensor)
    v = int(torch.argmax(every_in))
    for x in (v, np.int64(v)):
        d = g.in_degrees(x)
        assert type(d) is int and d == int(every_in[v]) and d > 0
        d = g.out_degrees(x)
        assert type(d) is int and d == int(every_out[v])
    as_tensor = g.in_degrees(torch.tensor([v]))
    assert isinstance(as_tensor, torch.Tensor) and as_tensor.tolist() == [int(every_in[v])]
    with pytest.raises(DistGNNError, match="out of range"):
        g.in_degrees(g.num_nodes())


def test_out_of_range_ids_and_unknown_types_are_dgls_exception_types(
    ctx: dd.DistContext, hetero_parts: str
) -> None:
    """IDs out of range are an ``IndexError`` (DGL's ``DistTensor[ids]`` raises one) and an
    unknown type name a ``KeyError`` (DGL's ``num_nodes`` and partition book raise one);
    both stay ``DistGNNError`` (``dgl.DGLError``) and ``ValueError``, and say what is wrong."""
    g = dd.DistGraph("cora")
    n = g.num_nodes()
    book = g.get_partition_book()
    too_far = torch.tensor([0, n])
    for call in (
        lambda: g.ndata["feat"][too_far],
        lambda: g.in_degrees(too_far),
        lambda: g.find_edges(torch.tensor([g.num_edges()])),
        lambda: book.nid2partid(too_far),
        lambda: dd.sample_neighbors(g, too_far, 2),
    ):
        with pytest.raises(IndexError, match="out of range") as ei:
            call()
        assert isinstance(ei.value, DistGNNError | ValueError)
    with pytest.raises(KeyError) as ki:
        g.num_nodes("nope")
    assert isinstance(ki.value, DistGNNError) and "'nope'" in str(ki.value)
    assert not str(ki.value).startswith('"')  # the message itself, not KeyError's repr
    with dd.DistGraph.standalone(hetero_parts) as hg:
        hbook = hg.get_partition_book()
        for call in (
            lambda: hg.num_nodes("nope"),
            lambda: hg.num_edges("nope"),
            lambda: hg.nodes["nope"],
            lambda: hbook.map_to_homo_nid(torch.tensor([0]), "nope"),
            lambda: hg.to_canonical_etype("nope"),
        ):
            with pytest.raises(KeyError, match="nope") as ki:
                call()
            assert isinstance(ki.value, ConfigError)


def test_a_tensor_of_the_wrong_length_names_its_shape(ctx: dd.DistContext) -> None:
    g = dd.DistGraph("cora")
    policy = g.get_node_partition_policy("_N")
    with pytest.raises(ConfigError) as ei:
        dd.DistTensor((5, 2), torch.float32, part_policy=policy)
    assert str(ei.value) == "DistTensor (unnamed): shape (5, 2) has 5 rows, but node~_N has 2708"
    with pytest.raises(ConfigError, match=r"^DistTensor 'h': shape \(5,\) has 5 rows"):
        dd.DistTensor((5,), torch.float32, "h", part_policy=policy)


def test_ndata_of_a_typed_graph_points_at_nodes_data(hetero_parts: str) -> None:
    with dd.DistGraph.standalone(hetero_parts) as g:
        with pytest.raises(ConfigError, match=r"^g\.ndata: the graph has node types .*g\.nodes"):
            g.ndata.keys()
        with pytest.raises(ConfigError, match=r"^g\.edata: the graph has edge types .*g\.edges"):
            g.edata.keys()
        assert list(g.nodes["paper"].data.keys()) == ["feat"]


def test_dgl_0x_initialize_keywords_name_the_job_field(cora_parts: str) -> None:
    with pytest.raises(ConfigError, match=r"^num_workers=4: .*spec\.trainers\.numSamplers"):
        dd.initialize(None, num_workers=4, manifest=cora_parts)
    with pytest.raises(ConfigError, match=r"^num_servers=2: .*spec\.servers\.workers"):
        dd.initialize(None, num_servers=2, manifest=cora_parts)
    ctx = dd.initialize(None, num_servers=1, num_workers=0, manifest=cora_parts)
    assert ctx is not None and ctx.standalone
    ctx.close()


def test_dgl_0x_block_idioms(ctx: dd.DistContext) -> None:
    """``blocks = [block.int().to(device) for block in blocks]`` (DGL 0.x scripts)."""
    from distgnn.dataloading import DistNodeDataLoader, NeighborSampler

    g = dd.DistGraph("cora")
    loader = DistNodeDataLoader(g, torch.arange(8), NeighborSampler([2, 2]), batch_size=8)
    with loader:
        _, _, blocks = next(iter(loader))
    moved = [b.int().to(torch.device("cpu")) for b in blocks]
    assert [b.long().num_edges() for b in moved] == [b.num_edges() for b in blocks]
    assert moved[0].idtype == torch.int64 and moved[0].srcdata[dd.NID].dtype == torch.int64


def test_block_ntypes_and_device_as_dgl(ctx: dd.DistContext, hetero_parts: str) -> None:
    """A DGL block's ``ntypes`` lists the source types then the destination types
    (``['_N', '_N']`` on a homogeneous graph) and its ``device`` is where its data is
    (CPU unless moved)."""
    from distgnn.dataloading import DistNodeDataLoader, NeighborSampler

    g = dd.DistGraph("cora")
    with DistNodeDataLoader(g, torch.arange(8), NeighborSampler([2]), batch_size=8) as loader:
        _, _, (block,) = next(iter(loader))
    assert block.ntypes == ["_N", "_N"] and block.srctypes == block.dsttypes == ["_N"]
    assert block.device == torch.device("cpu")
    assert block.to("cpu").device == torch.device("cpu")
    with dd.DistGraph.standalone(hetero_parts) as hg:
        seeds = {"paper": torch.arange(4)}
        with DistNodeDataLoader(hg, seeds, NeighborSampler([2]), batch_size=4) as loader:
            _, _, (tb,) = next(iter(loader))
        types = ["author", "paper", "venue"]
        assert tb.srctypes == tb.dsttypes == types and tb.ntypes == types + types
        assert tb.num_dst_nodes("paper") == 4 and tb.device == torch.device("cpu")


def test_pair_graphs_carry_their_nodes_graph_ids(ctx: dd.DistContext, hetero_parts: str) -> None:
    """DGL's ``pair_graph.ndata[NID]`` (and the negative graph's): the graph IDs of the pair
    graph's nodes, which are the last block's destinations (a dict by type when typed)."""
    from distgnn.dataloading import DistEdgeDataLoader, NeighborSampler, negative_sampler

    g = dd.DistGraph("cora")
    eids = torch.arange(0, 40)
    neg = negative_sampler.Uniform(2)
    loader = DistEdgeDataLoader(g, eids, NeighborSampler([2]), negative_sampler=neg, batch_size=20)
    with loader:
        _, pos, negg, blocks = next(iter(loader))
    nid = pos.ndata[dd.NID]
    assert torch.equal(nid, blocks[-1].dstdata[dd.NID]) and torch.equal(negg.ndata[dd.NID], nid)
    src, dst = pos.edges()
    s, d = g.find_edges(pos.edata[dd.EID])
    assert torch.equal(nid[src], s) and torch.equal(nid[dst], d)
    with dd.DistGraph.standalone(hetero_parts) as hg:
        cites = {("paper", "cite", "paper"): torch.arange(10)}
        with DistEdgeDataLoader(hg, cites, NeighborSampler([2]), batch_size=10) as loader:
            _, tpos, tblocks = next(iter(loader))
        last = tblocks[-1].dstdata[dd.NID]
        assert set(tpos.ndata[dd.NID]) == set(last)
        assert all(torch.equal(tpos.ndata[dd.NID][t], last[t]) for t in last)
        ts, td = tpos.edges(etype="cite")
        s, d = hg.find_edges(tpos.edata[dd.EID][("paper", "cite", "paper")], etype="cite")
        paper = tpos.ndata[dd.NID]["paper"]
        assert torch.equal(paper[ts], s) and torch.equal(paper[td], d)


def test_dgl_distributed_submodules_are_attributes() -> None:
    """``dgl.distributed.nn.DistEmbedding`` and ``dgl.distributed.optim.SparseAdam`` after
    ``import distgnn as dgl`` alone (a fresh interpreter: nothing imported them before)."""
    code = (
        "import distgnn as dgl; d = dgl.distributed; "
        "print(d.nn.DistEmbedding.__name__, d.optim.SparseAdam.__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.split() == ["DistEmbedding", "SparseAdam"], out.stderr[-2000:]


def test_ip_config_file_lists_the_servers(tmp_path: Path) -> None:
    from distgnn.distributed.context import read_ip_config

    f = tmp_path / "ip_config.txt"
    f.write_text("10.0.0.1\n10.0.0.2 31000\n")
    assert read_ip_config(str(f)) == [("10.0.0.1", 30050), ("10.0.0.2", 31000)]
    f.write_text("10.0.0.1 port\n")
    with pytest.raises(ConfigError, match="line 1"):
        read_ip_config(str(f))


def test_unnamed_tensors_get_deterministic_names_and_distinct_values(ctx: dd.DistContext) -> None:
    g = dd.DistGraph(ctx=ctx)
    n = g.num_nodes()
    a = dd.DistTensor((n, 4), torch.float32, init_func=("uniform", {"low": 0, "high": 1}), ctx=ctx)
    b = dd.DistTensor((n, 4), torch.float32, init_func=("uniform", {"low": 0, "high": 1}), ctx=ctx)
    # the n-th unnamed tensor of a context has the same name on every trainer
    assert a.name == f"anonymous-{ctx.scope}-0" and b.name == f"anonymous-{ctx.scope}-1"
    # ... and two tensors with the same initialiser are not copies of each other
    assert not torch.equal(a[np.arange(100)], b[np.arange(100)])
    with pytest.raises(ConfigError, match="persistent"):
        dd.DistTensor((n, 4), torch.float32, persistent=True, ctx=ctx)


def test_del_frees_an_unnamed_tensor_and_persistent_ones_stay(ctx: dd.DistContext) -> None:
    n = ctx.manifest.num_nodes
    t = dd.DistTensor((n, 2), torch.float32, ctx=ctx)
    key = t.kvstore_key
    assert key in _names(ctx)
    del t
    assert key not in _names(ctx)
    p = dd.DistTensor((n, 2), torch.float32, "keep", persistent=True, ctx=ctx)
    pkey = p.kvstore_key
    del p
    assert pkey in _names(ctx)
    with pytest.raises(Exception, match="exists"):  # DGL: re-declaring with another shape fails
        dd.DistTensor((n, 3), torch.float32, "keep", ctx=ctx)


def test_callable_init_func_runs_per_partition_slice(ctx: dd.DistContext) -> None:
    calls: list[tuple[tuple[int, ...], torch.dtype]] = []

    def init(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        calls.append((tuple(shape), dtype))
        return torch.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)

    n = ctx.manifest.num_nodes
    t = dd.DistTensor((n, 3), torch.int32, "ar", init, ctx=ctx)
    sizes = np.diff(ctx.book.node_offsets).tolist()
    assert calls == [((k, 3), torch.int32) for k in sizes]
    first = int(ctx.book.node_offsets[1])  # partition 1 starts over from 0
    assert t[[0, first]].tolist() == [[0, 1, 2], [0, 1, 2]]


def test_part_policy_inferred_on_typed_graphs(hetero_parts: str) -> None:
    with dd.initialize(manifest=hetero_parts, standalone=True) as ctx:
        t = dd.DistTensor((30, 2), torch.float32, ctx=ctx)
        assert t.part_policy.policy_str == "node~paper"  # DGL's policy strings
        assert t.part_policy.type_name == "paper"
        e = dd.DistTensor((40,), torch.float32, part_policy="cite", ctx=ctx)
        assert e.part_policy.policy_str == "edge~paper:cite:paper"
        assert e.part_policy.type_name == ("paper", "cite", "paper")  # canonical, as DGL
        with pytest.raises(ConfigError, match="several types"):
            dd.DistTensor((40, 1), torch.float32, ctx=ctx)  # four edge types have 40 rows
        with pytest.raises(ConfigError, match="no node or edge type"):
            dd.DistTensor((7,), torch.float32, ctx=ctx)


def test_canonical_etypes_follow_dgl_order(hetero_parts: str) -> None:
    with dd.DistGraph.standalone(hetero_parts) as g:
        assert g.canonical_etypes == DGL_ORDER
        assert g.get_etype_id(("paper", "cite", "paper")) == 1
        assert g.get_etype_id("cite-by") == 2
        assert g.ntypes == ["author", "paper", "venue"] and g.get_ntype_id("venue") == 2
        assert g.to_canonical_etype("writes") == ("author", "writes", "paper")
        # sampled edge-type indices use the same order
        s = dd.sample_neighbors(g, {"paper": np.arange(30)}, {("paper", "cite", "paper"): 50})
        assert set(s.etype.tolist()) == {1}
        src, _dst = s.edges(etype="cite")
        assert int(src.max()) < 30  # type-wise paper IDs


def test_manifest_with_string_ordered_etypes_is_refused(hetero_parts: str) -> None:
    import json

    from distgnn.partition.manifest import Manifest

    obj = json.loads(Path(hetero_parts).read_text())
    obj["edge_types"] = sorted(obj["edge_types"], key=":".join)
    with pytest.raises(ManifestError, match="edge_types"):
        Manifest.from_dict(obj, source="old")


def test_partition_book_dgl_api(hetero_parts: str) -> None:
    with dd.DistGraph.standalone(hetero_parts) as g:
        gpb = g.get_partition_book()
        assert gpb.num_partitions() == 2 and gpb.partid == 0
        md = gpb.metadata()
        assert sum(m["num_nodes"] for m in md) == g.num_nodes() == 46
        assert [m["machine_id"] for m in md] == [0, 1]
        typed = torch.arange(30)
        homo = gpb.map_to_homo_nid(typed, "paper")
        t, back = gpb.map_to_per_ntype(homo)
        assert (t == 1).all() and torch.equal(back, typed)
        eh = gpb.map_to_homo_eid(torch.arange(40), ("paper", "cite", "paper"))
        et, eback = gpb.map_to_per_etype(eh)
        assert (et == 1).all() and torch.equal(eback, torch.arange(40))
        parts = gpb.nid2partid(typed, "paper")
        for p in range(2):
            mine = gpb.partid2nids(p, "paper")
            assert torch.equal(torch.nonzero(parts == p).flatten(), mine)
            assert torch.equal(gpb.nid2localnid(mine, p, "paper"), torch.arange(len(mine)))
        assert torch.equal(
            gpb.eid2partid(eh),
            gpb.nid2partid(gpb.map_to_homo_nid(g.find_edges(torch.arange(40), "cite")[1], "paper")),
        )  # edges live with their dst
        pol = g.get_node_partition_policy("paper")
        assert pol.get_size() == 30 and pol.is_node and pol.part_id == 0


def test_find_edges_and_edge_subgraph_use_type_wise_ids(hetero_parts: str) -> None:
    a = _hetero_arrays()
    with dd.DistGraph.standalone(hetero_parts) as g:
        # features follow the partitioned IDs: map them through the book via the feature
        feat = g.nodes["paper"].data["feat"][torch.arange(30)].flatten().long()
        src, dst = g.find_edges(torch.arange(40), ("paper", "cite", "paper"))
        orig = {
            (int(s), int(d))
            for s, d in zip(
                a["edges/paper:cite:paper/src"], a["edges/paper:cite:paper/dst"], strict=True
            )
        }
        got = {(int(feat[s]), int(feat[d])) for s, d in zip(src, dst, strict=True)}
        assert got == orig
        sg = g.edge_subgraph({"cite": torch.arange(10)})
        assert sg.num_edges() == 10
        assert torch.equal(sg.edata[dd.EID][("paper", "cite", "paper")], torch.arange(10))
        with pytest.raises(ConfigError, match="etype"):
            g.find_edges(torch.arange(3))
        with pytest.raises(ConfigError, match="does not exist"):
            g.nodes["xxx"]


def test_sample_neighbors_returns_a_graph_like_frontier(ctx: dd.DistContext) -> None:
    g = dd.DistGraph(ctx=ctx)
    seeds = torch.arange(0, 2708, 7)
    fr = dd.sample_neighbors(g, seeds, 3)
    src, dst = fr.edges()
    assert fr.num_edges() == len(src) == len(fr.edata[dd.EID])
    s2, d2 = g.find_edges(fr.edata[dd.EID])
    assert torch.equal(s2, src) and torch.equal(d2, dst)
    assert set(dst.tolist()) <= set(seeds.tolist())
    full = dd.in_subgraph(g, seeds)
    assert full.num_edges() == int(g.in_degrees(seeds).sum())
    ex = dd.sample_neighbors(g, seeds, -1, exclude_edges=full.edata[dd.EID][:10])
    assert ex.num_edges() == full.num_edges() - 10
    with pytest.raises(ConfigError, match="edge_dir"):
        dd.sample_neighbors(g, seeds, 3, edge_dir="out")


def test_frontier_edges_is_callable_and_indexed_by_edge_type(
    ctx: dd.DistContext, hetero_parts: str
) -> None:
    """A frontier is a DGL graph to DGL scripts: ``fr.edges()`` gives the endpoints and
    ``fr.edges[etype].data[dgl.EID]`` the edge IDs of one type (type-wise when typed)."""
    g = dd.DistGraph(ctx=ctx)
    fr = dd.sample_neighbors(g, torch.arange(0, 2708, 9), 3)
    assert torch.equal(fr.edges["_E"].data[dd.EID], fr.edata[dd.EID])
    src, dst, eid = fr.edges(form="all")
    assert torch.equal(eid, fr.edata[dd.EID]) and len(src) == len(dst) == fr.num_edges()
    with dd.DistGraph.standalone(hetero_parts) as hg:
        tf = dd.sample_neighbors(hg, {"paper": torch.arange(20)}, 2)
        cite = ("paper", "cite", "paper")
        eids = tf.edges[cite].data[dd.EID]
        assert torch.equal(eids, tf.edata[dd.EID][cite]) and len(eids) == tf.num_edges(cite)
        assert torch.equal(tf.edges["cite"].data[dd.EID], eids)
        s, d = hg.find_edges(eids, etype=cite)
        ts, td = tf.edges(etype=cite)
        assert torch.equal(s, ts) and torch.equal(d, td)
        with pytest.raises(ConfigError):
            tf.edges["nope"]


def test_blocks_of_a_graph_without_edge_types_carry_only_eid(
    ctx: dd.DistContext, hetero_parts: str
) -> None:
    """As DGL's homogeneous blocks (and the blocks of a local graph): ``edata`` holds EID,
    no edge-type column (type 0 all the same); a typed graph's blocks keep theirs."""
    from distgnn.sampling import NeighborSampler
    from distgnn.sampling.source import DistSource

    g = dd.DistGraph(ctx=ctx)
    sampler = NeighborSampler([4, 3])
    _, _, blocks = sampler.sample_blocks(
        DistSource(g, None).one_hop(np.random.default_rng(0)), np.arange(0, 2708, 9)
    )
    for b in blocks:
        assert b.etype is None and set(b.edata) == {dd.EID}
        assert torch.equal(b.etypes_tensor(), torch.zeros(b.num_edges(), dtype=torch.int64))
    with dd.initialize(manifest=hetero_parts, standalone=True) as hctx:
        hg = dd.DistGraph(ctx=hctx)
        seeds = hg.book.to_homogeneous_nids("paper", np.arange(30))
        _, _, hblocks = sampler.sample_blocks(
            DistSource(hg, None).one_hop(np.random.default_rng(0)), seeds
        )
        assert all(b.etype is not None for b in hblocks)
        assert np.isin(np.concatenate([b.etype for b in hblocks]), [0, 1, 2, 3]).all()


def test_sparse_adagrad_takes_the_mean_of_duplicate_rows(ctx: dd.DistContext) -> None:
    """The issue's figure: row used twice (grads 1, 3) then once (grad 2), lr 0.1.

    DGL: mean 2 -> s=4, x=-0.1*2/2=-0.1; then g=2 -> s=8, x-=0.1*2/sqrt(8): -0.1707.
    The summing rule gave s=16, x=-0.1; s=20, x-=0.1*2/sqrt(20): -0.1447.
    """
    n = ctx.manifest.num_nodes
    emb = dd.DistEmbedding(n, 1, "e1", ctx=ctx)
    opt = dd.SparseAdagrad([emb], lr=0.1)
    (emb(torch.tensor([5, 5])) * torch.tensor([[1.0], [3.0]])).sum().backward()
    opt.step()
    (emb(torch.tensor([5])) * 2.0).sum().backward()
    opt.step()
    want = -0.1 - 0.1 * 2 / np.sqrt(8.0)
    assert abs(want - -0.1707) < 1e-4
    np.testing.assert_allclose(emb.weight[[5]].item(), want, rtol=1e-5)
    assert emb.weight[[6]].item() == 0.0  # DGL's default init: zeros


def test_sparse_adam_mean_and_dgl_state_names(ctx: dd.DistContext) -> None:
    n = ctx.manifest.num_nodes
    emb = dd.DistEmbedding(n, 2, "e2", ctx=ctx)
    opt = dd.SparseAdam([emb], lr=0.01)
    step, mem, power = opt._state["e2"]
    assert (step.name, mem.name, power.name) == ("e2_step", "e2_mem", "e2_power")
    (emb(torch.tensor([9, 9])) * torch.tensor([[1.0], [3.0]])).sum().backward()
    opt.step()
    np.testing.assert_allclose(mem[[9]].numpy(), [[0.2, 0.2]], rtol=1e-5)  # 0.1 * mean(1, 3)
    np.testing.assert_allclose(power[[9]].numpy(), [[0.004, 0.004]], rtol=1e-4)  # 0.001 * 2^2
    assert step[[9]].item() == 1.0
    ada = dd.SparseAdagrad([dd.DistEmbedding(n, 2, "e3", ctx=ctx)], lr=0.1)
    assert ada._state["e3"].name == "e3_sum"
    assert dd.DistTensor((n, 2), torch.float32, "e3_sum", ctx=ctx).shape == (n, 2)


def test_sparse_optimizer_save_and_load(ctx: dd.DistContext, tmp_path: Path) -> None:
    n = ctx.manifest.num_nodes
    emb = dd.DistEmbedding(n, 1, "e4", ctx=ctx)
    opt = dd.SparseAdagrad([emb], lr=0.1, eps=1e-8)
    states = torch.rand(n, 1)
    opt._state["e4"][torch.arange(n)] = states
    opt.save(tmp_path / "opt.pt")
    folder = tmp_path / "opt.pt_0"  # DGL's f"{f}_{rank}": .npy files and meta.json
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "t0.a0.npy", "t0.ids.npy"]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["kind"] == "SparseAdagrad" and meta["params"] == {"_lr": 0.1, "_eps": 1e-8}
    assert np.load(folder / "t0.a0.npy", allow_pickle=False).shape == (n, 1)
    opt.save(tmp_path / "opt.pt")  # saved again over itself (its meta.json goes first)
    opt._state["e4"][torch.arange(n)] = torch.zeros(n, 1)
    other = dd.SparseAdagrad([emb], lr=0.001, eps=2e-8)
    other.load(tmp_path / "opt.pt")
    assert torch.equal(other._state["e4"][torch.arange(n)], states)
    assert other._lr == 0.1 and other._eps == 1e-8  # DGL restores the hyper-parameters
    other.load(tmp_path / "absent")  # DGL: a missing file loads nothing (a warning)
    assert other._lr == 0.1


def test_sparse_adam_save_and_load_through_an_fsspec_url(ctx: dd.DistContext) -> None:
    """Adam's three state tensors at a ``memory://`` URL (any fsspec file system)."""
    n = ctx.manifest.num_nodes
    emb = dd.DistEmbedding(n, 3, "e5", ctx=ctx)
    opt = dd.SparseAdam([emb], lr=0.01, betas=(0.8, 0.99))
    (emb(torch.tensor([1, 2, 2, 700])) * 2.0).sum().backward()
    opt.step()
    saved = [st[torch.arange(n)].clone() for st in opt._state["e5"]]
    assert saved[0][[1, 2, 700]].tolist() == [1.0, 1.0, 1.0]
    opt.save("memory://ckpt-t/adam")
    for st in opt._state["e5"]:
        st[torch.arange(n)] = torch.zeros(st.shape)
    again = dd.SparseAdam([emb], lr=0.5)
    again.load("memory://ckpt-t/adam")
    for st, want in zip(again._state["e5"], saved, strict=True):
        assert torch.equal(st[torch.arange(n)], want), st.name
    assert (again._lr, again._beta1, again._beta2) == (0.01, 0.8, 0.99)


def test_sparse_state_saved_by_two_trainers_loads_into_one_or_three(
    ctx: dd.DistContext, tmp_path: Path
) -> None:
    """DGL's rule: with fewer trainers trainer r also reads ``f_{r+world}``...; with more,
    a trainer without a file loads nothing; a checkpoint that recorded 2 writers refuses
    a missing one."""
    n = ctx.manifest.num_nodes
    emb = dd.DistEmbedding(n, 2, "e8", ctx=ctx)
    opt = dd.SparseAdagrad([emb], lr=0.1)
    want = torch.rand(n, 2)
    opt._state["e8"][torch.arange(n)] = want
    owners = []
    for r in range(2):  # what trainers 0 and 1 of 2 write (each only its rows)
        ids = rowshards.owned_rows(emb.part_policy, n, r, 2)
        owners.append(ids)
        table = {"e8": rowshards.Table(n, ids, {"e8_sum": opt._state["e8"]})}
        rowshards.write(rowshards.rank_url(tmp_path / "o", r), "SparseAdagrad",
                        dict(opt._defaults), 2, table)  # fmt: skip
    assert len(owners[0]) + len(owners[1]) == n and not set(owners[0]) & set(owners[1])
    opt._state["e8"][torch.arange(n)] = torch.zeros(n, 2)
    opt.load(tmp_path / "o")  # one trainer now: reads o_0 and o_1
    assert torch.equal(opt._state["e8"][torch.arange(n)], want)
    tables = {"e8": rowshards.Table(n, owners[0], {"e8_sum": opt._state["e8"]})}
    assert rowshards.load(tmp_path / "o", 2, 3, "SparseAdagrad", tables) is None  # rank 2 of 3
    (tmp_path / "o_1" / "meta.json").unlink()
    with pytest.raises(StorageError, match=r"o_1/meta\.json: missing \(trainer 1's rows"):
        rowshards.load(tmp_path / "o", 0, 1, "SparseAdagrad", tables, saved_world=2)


def _record_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Every read from a file opened by ``storage.open_read`` from now on: name -> sizes
    (one list per opening, in order)."""
    from distgnn import storage

    opened = storage.open_read
    reads: dict[str, list[int]] = {}

    class Recorder:
        def __init__(self, f: Any, sizes: list[int]) -> None:
            self.f, self.sizes = f, sizes

        def read(self, n: int = -1) -> bytes:
            data: bytes = self.f.read(n)
            self.sizes.append(len(data))
            return data

        def __getattr__(self, name: str) -> Any:
            return getattr(self.f, name)

    @contextlib.contextmanager
    def recording(url: str, *a: Any, **kw: Any) -> Iterator[Any]:
        with opened(url, *a, **kw) as f:
            yield Recorder(f, reads.setdefault(Path(url).name, []))

    monkeypatch.setattr(storage, "open_read", recording)
    return reads


def test_sparse_state_is_restored_in_bounded_reads(
    ctx: dd.DistContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Restoring never reads a whole file (nor holds one): every read is at most
    ``READ_BYTES``, each file read through exactly twice (checked, then written)."""
    n = ctx.manifest.num_nodes
    emb = dd.DistEmbedding(n, 32, "e9", ctx=ctx)
    opt = dd.SparseAdam([emb], lr=0.01)
    want = [torch.rand(st.shape) for st in opt._state["e9"]]
    for st, w in zip(opt._state["e9"], want, strict=True):
        st[torch.arange(n)] = w
    opt.save(tmp_path / "o")
    for st in opt._state["e9"]:
        st[torch.arange(n)] = torch.zeros(st.shape)
    bound = 16 * (8 + 4 + 128 + 128)  # 16 rows of the IDs and the three arrays
    monkeypatch.setattr(rowshards, "READ_BYTES", bound)
    reads = _record_reads(monkeypatch)
    opt.load(tmp_path / "o")
    for st, w in zip(opt._state["e9"], want, strict=True):
        assert torch.equal(st[torch.arange(n)], w), st.name
    sizes = {p.name: p.stat().st_size for p in (tmp_path / "o_0").glob("*.npy")}
    assert (
        sorted(k for k in reads if k.endswith(".npy"))
        == sorted(sizes)
        == ["t0.a0.npy", "t0.a1.npy", "t0.a2.npy", "t0.ids.npy"]
    )
    for name, size in sizes.items():
        assert len(reads[name]) > 2 * size // bound, name  # many reads, not one
        assert max(reads[name]) <= bound, name
        assert sum(reads[name]) == 2 * size, name
    assert sizes["t0.a1.npy"] > 20 * bound  # the bound is far below a file


def test_a_file_replaced_between_check_and_write_is_refused(
    ctx: dd.DistContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows are hashed again as they are written: a file swapped after the check
    pass is refused, naming it."""
    n = ctx.manifest.num_nodes
    emb = dd.DistEmbedding(n, 2, "e10", ctx=ctx)
    opt = dd.SparseAdagrad([emb], lr=0.1)
    opt.save(tmp_path / "o")
    reads = _record_reads(monkeypatch)
    path = tmp_path / "o_0" / "t0.a0.npy"
    seen = {"done": False}
    setitem = type(opt._state["e10"]).__setitem__

    def first_write_replaces(self: Any, ids: Any, values: Any) -> None:
        if not seen["done"]:  # the check pass is over: swap the file's last bytes
            seen["done"] = True
            path.write_bytes(path.read_bytes()[:-4] + b"abcd")
        setitem(self, ids, values)

    monkeypatch.setattr(type(opt._state["e10"]), "__setitem__", first_write_replaces)
    monkeypatch.setattr(rowshards, "READ_BYTES", 64)
    with pytest.raises(StorageError, match=r"t0\.a0\.npy: sha256 does not match"):
        opt.load(tmp_path / "o")
    assert seen["done"] and len(reads["t0.a0.npy"]) > 2


def test_every_folder_is_checked_before_any_row_is_written(
    ctx: dd.DistContext, tmp_path: Path
) -> None:
    """One trainer loading what two saved: a corrupt second folder leaves the rows of
    the first unwritten too."""
    n = ctx.manifest.num_nodes
    emb = dd.DistEmbedding(n, 2, "e11", ctx=ctx)
    opt = dd.SparseAdagrad([emb], lr=0.1)
    opt._state["e11"][torch.arange(n)] = torch.ones(n, 2)
    for r in range(2):
        table = {"e11": rowshards.Table(n, rowshards.owned_rows(emb.part_policy, n, r, 2),
                                        {"e11_sum": opt._state["e11"]})}  # fmt: skip
        rowshards.write(rowshards.rank_url(tmp_path / "o", r), "SparseAdagrad",
                        dict(opt._defaults), 2, table)  # fmt: skip
    bad = tmp_path / "o_1" / "t0.a0.npy"
    bad.write_bytes(bad.read_bytes()[:-4] + b"abcd")
    opt._state["e11"][torch.arange(n)] = torch.zeros(n, 2)
    with pytest.raises(StorageError, match=r"o_1/t0\.a0\.npy: sha256 does not match"):
        opt.load(tmp_path / "o")
    assert opt._state["e11"][torch.arange(n)].abs().sum() == 0


def _tamper(folder: Path, edit: Any) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    edit(meta, folder)
    (folder / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("edit", "err", "match"),
    [
        (
            lambda m, f: (f / "t0.a0.npy").write_bytes(
                (f / "t0.a0.npy").read_bytes()[:-4] + b"abcd"
            ),
            StorageError,
            r"t0\.a0\.npy: sha256 does not match",
        ),
        (lambda m, f: (f / "t0.ids.npy").unlink(), StorageError, r"t0\.ids\.npy: not found"),
        (lambda m, f: m.update(kind="SparseAdam"), ConfigError, "holds SparseAdam state"),
        (lambda m, f: m["params"].pop("_eps"), ConfigError, "hyper-parameter 'eps' missing"),
        (lambda m, f: m["params"].update(_beta1=0.9), ConfigError, "'beta1' unknown"),
        (lambda m, f: m["params"].update(_lr=-1), ConfigError, "'lr'=-1 must be > 0"),
        (lambda m, f: m["params"].update(_lr="x"), ConfigError, "'lr'='x'"),
        (lambda m, f: m["tables"]["e6"].update(num_rows=5), ConfigError, "'e6' has 5 rows"),
        (
            lambda m, f: m["tables"].update(other=m["tables"].pop("e6")),
            ConfigError,
            r"missing \['e6'\]",
        ),
        (
            lambda m, f: m["tables"]["e6"]["arrays"]["e6_sum"].update(path="../x.npy"),
            StorageError,
            "refused",
        ),
        (lambda m, f: m.update(format="x"), StorageError, "not a distgnn-rows folder"),
    ],
)
def test_sparse_optimizer_load_refuses_a_mismatched_or_tampered_file(
    ctx: dd.DistContext, tmp_path: Path, edit: Any, err: type, match: str
) -> None:
    n = ctx.manifest.num_nodes
    emb = dd.DistEmbedding(n, 2, "e6", ctx=ctx)
    opt = dd.SparseAdagrad([emb], lr=0.1)
    opt._state["e6"][torch.arange(n)] = torch.ones(n, 2)
    opt.save(tmp_path / "o")
    _tamper(tmp_path / "o_0", edit)
    opt._state["e6"][torch.arange(n)] = torch.zeros(n, 2)
    with pytest.raises(err, match=match):
        opt.load(tmp_path / "o")
    assert opt._state["e6"][torch.arange(n)].abs().sum() == 0  # nothing half-loaded


def test_a_state_of_another_shape_is_refused_naming_the_file(
    ctx: dd.DistContext, tmp_path: Path
) -> None:
    n = ctx.manifest.num_nodes
    dd.SparseAdagrad([dd.DistEmbedding(n, 2, "e7", ctx=ctx)], lr=0.1).save(tmp_path / "o")
    wide = dd.SparseAdagrad([dd.DistEmbedding(n, 3, "e7w", ctx=ctx)], lr=0.1)
    (tmp_path / "o_0" / "meta.json").write_text(
        (tmp_path / "o_0" / "meta.json")
        .read_text()
        .replace("e7_sum", "e7w_sum")
        .replace('"e7"', '"e7w"')
    )
    with pytest.raises(StorageError, match=r"t0\.a0\.npy: shape \(\d+, 2\), expected \(\d+, 3\)"):
        wide.load(tmp_path / "o")


def test_node_split_reads_int_masks_as_masks(ctx: dd.DistContext) -> None:
    g = dd.DistGraph(ctx=ctx)
    n = g.num_nodes()
    mask = np.zeros(n, dtype=np.int32)
    mask[[3, 10, 2000]] = 1
    gpb = g.get_partition_book()
    got = dd.node_split(torch.from_numpy(mask), gpb, rank=0, world_size=1)
    assert got.tolist() == [3, 10, 2000]
    assert torch.equal(dd.node_split(mask.astype(bool), gpb, rank=0, world_size=1), got)
    with pytest.raises(ConfigError, match="mask"):
        dd.node_split(torch.tensor([3, 10]), gpb, rank=0, world_size=1)


def test_node_split_is_dgls_even_contiguous_split(ctx: dd.DistContext) -> None:
    g = dd.DistGraph(ctx=ctx)
    n = g.num_nodes()
    mask = torch.from_numpy(np.arange(n) % 3 == 0)
    ids = torch.nonzero(mask).flatten()
    gpb = g.get_partition_book()
    # 2 trainers on 2 partitions: contiguous halves of the selected IDs
    shares = [dd.node_split(mask, gpb, rank=r, world_size=2) for r in range(2)]
    half = (len(ids) + 1) // 2
    assert torch.equal(shares[0], ids[:half]) and torch.equal(shares[1], ids[half:])
    # 4 trainers: each partition's half split by a permutation seeded by the partition
    four = [dd.node_split(mask, gpb, rank=r, world_size=4) for r in range(4)]
    assert torch.equal(torch.sort(torch.cat(four[:2])).values, shares[0])
    perm = np.random.RandomState(0).permutation(half)
    assert four[0].tolist() == ids[:half][np.sort(perm[: (half + 1) // 2])].tolist()
    # node_trainer_ids: a partition's own nodes go to the trainer their ID names
    tid = torch.from_numpy((np.arange(n) % 2).astype(np.int64))
    by = [dd.node_split(mask, gpb, rank=r, world_size=2, node_trainer_ids=tid) for r in range(2)]
    assert torch.equal(torch.sort(torch.cat(by)).values, ids)
    # the DistTensor mask brings its partition book
    dm = dd.DistTensor((n,), torch.bool, init_func=lambda s, d: torch.ones(s, dtype=d), ctx=ctx)
    assert len(dd.node_split(dm, rank=0, world_size=1)) == n


def test_dgl_names_left_out_on_purpose_say_why() -> None:
    with pytest.raises(dd.NotSupportedError, match="no custom RPC"):
        dd.register_service  # noqa: B018
    with pytest.raises(ConfigError, match="distgnn serve"):
        dd.DistGraphServer  # noqa: B018
    assert not hasattr(dd, "send_request")  # an AttributeError too
    from distgnn.dataloading import DistNodeDataLoader
    from distgnn.distributed.nn import DistEmbedding

    assert dd.DistNodeDataLoader is DistNodeDataLoader and DistEmbedding is dd.DistEmbedding


def test_load_partition_feats_keys_as_dgl(cora_parts: str, cora_path: Path) -> None:
    nfeat, efeat = dd.load_partition_feats(cora_parts, 1)
    assert nfeat is not None and efeat is not None
    assert {"_N/feat", "_N/label", "_N/train_mask"} <= set(nfeat)
    gpb, _, _, _ = dd.load_partition_book(cora_parts, 1)
    assert len(nfeat["_N/feat"]) == len(gpb.partid2nids(1))
    assert dd.load_partition_feats(cora_parts, 0, load_edges=False)[1] is None


def test_load_partition_book_keys_edge_types_by_canonical_tuple(hetero_parts: str) -> None:
    """DGL 2.1's ``load_partition_book`` returns ``etypes`` keyed by ``(src, etype, dst)``
    tuples (``etypes[('paper', 'cite', 'paper')]``), ``ntypes`` by name, in DGL's order."""
    gpb, name, ntypes, etypes = dd.load_partition_book(hetero_parts, 1)
    assert name == "het" and gpb.partid == 1
    assert ntypes == {"author": 0, "paper": 1, "venue": 2}
    assert etypes == {c: i for i, c in enumerate(DGL_ORDER)}
    assert etypes[("paper", "cite", "paper")] == 1
    assert dd.load_partition(hetero_parts, 0)[6] == etypes


def test_unnamed_tensor_scope_is_per_job_run() -> None:
    from distgnn.distributed.context import _scope

    env = {"DISTGNN_JOB_NAME": "my job", "MASTER_ADDR": "pod-0", "MASTER_PORT": "29500"}
    a = _scope(env, "secret-token-1")
    assert a == _scope(dict(env), "secret-token-1")  # every trainer of the run agrees
    assert a != _scope(env, "secret-token-2")  # a new run (new token) does not
    assert a.startswith("my-job-") and "secret" not in a
    assert _scope({}) == "default"
