"""Layer-wise inference on a heterogeneous graph (in-process standalone DistGraph over
2 partitions): an R-GCN of ``HeteroGraphConv`` layers equals one full-graph forward
pass, per node type, and the written output is keyed by type-wise original IDs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import distgnn.distributed as dd
from distgnn.graph.io import graph_from_arrays
from distgnn.nn import GraphConv, HeteroGraphConv
from distgnn.partition.partitioner import partition_graph
from distgnn.sampling.blocks import Block, BlockTypes
from distgnn.train import infer_output as fmt
from distgnn.train.ddp import DDPContext
from distgnn.train.hetero_inference import hetero_infer_to_storage
from distgnn.train.inference import InferOptions
from distgnn.train.layerwise import as_train_graph, infer

CTX = DDPContext(0, 1, torch.device("cpu"))
N = {"author": 14, "paper": 40, "venue": 5}
CETS = [
    ("author", "writes", "paper"),
    ("paper", "cite", "paper"),
    ("paper", "cite-by", "venue"),
    ("paper", "written-by", "author"),
]


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    out: dict[str, np.ndarray] = {f"num_nodes/{t}": np.array(c) for t, c in N.items()}
    for s, e, d in CETS:
        # every destination gets at least one in-edge, plus random ones
        dst = np.concatenate([np.arange(N[d]), rng.integers(0, N[d], 50)])
        out[f"edges/{s}:{e}:{d}/src"] = rng.integers(0, N[s], dst.size)
        out[f"edges/{s}:{e}:{d}/dst"] = dst
    for t, c in N.items():
        out[f"ndata/{t}/feat"] = rng.standard_normal((c, 3)).astype(np.float32)
    return out


class Layer(nn.Module):
    def __init__(self, i: int, o: int, act: bool) -> None:
        super().__init__()
        self.conv = HeteroGraphConv({e: GraphConv(i, o, norm="right") for _, e, _ in CETS})
        self.act = act

    def forward(self, g: object, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = self.conv(g, h)
        return {t: torch.relu(v) for t, v in out.items()} if self.act else out


class RGCN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Layer(3, 8, True), Layer(8, 4, False)])

    def forward(self, blocks: list[object], h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        for layer, b in zip(self.layers, blocks, strict=True):
            h = layer(b, h)
        return h


def full_block(a: dict[str, np.ndarray]) -> Block:
    """The whole original graph as one typed block (own homogeneous numbering)."""
    ntypes = sorted(N)
    off = dict(zip(ntypes, np.cumsum([0] + [N[t] for t in ntypes])[:-1].tolist(), strict=True))
    n = sum(N.values())
    st = np.concatenate([np.full(N[t], i) for i, t in enumerate(ntypes)]).astype(np.int64)
    tid = np.concatenate([np.arange(N[t]) for t in ntypes]).astype(np.int64)
    es, ed, et, etid = [], [], [], []
    for i, (s, e, d) in enumerate(CETS):
        src, dst = a[f"edges/{s}:{e}:{d}/src"], a[f"edges/{s}:{e}:{d}/dst"]
        es.append(src + off[s])
        ed.append(dst + off[d])
        et.append(np.full(src.size, i))
        etid.append(np.arange(src.size))
    return Block(
        src_nid=np.arange(n),
        dst_nid=np.arange(n),
        edge_src=np.concatenate(es),
        edge_dst=np.concatenate(ed),
        eid=np.arange(sum(x.size for x in es)),
        etype=np.concatenate(et).astype(np.int64),
        types=BlockTypes(tuple(ntypes), tuple(CETS)),
        src_type=st,
        src_tid=tid,
        etid=np.concatenate(etid).astype(np.int64),
    )


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("hetinfer")
    partition_graph(graph_from_arrays(arrays(), "het"), 2, str(out), "het", method="random",
                    progress=False)  # fmt: skip
    return str(out / "het.json")


def example_rgcn() -> nn.Module:
    """The R-GCN example's model (RelGraphConvLayer: HeteroGraphConv, basis weights,
    self-loop), as a user's script builds it."""
    path = Path(__file__).resolve().parents[2] / "examples/dgl/rgcn_node_classification.py"
    spec = importlib.util.spec_from_file_location("rgcn_example", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    etypes = [e for _, e, _ in CETS]
    model: nn.Module = mod.EntityClassify(
        torch.device("cpu"), 3, 4, etypes, num_bases=2, num_hidden_layers=1, use_self_loop=True
    )
    return model


def reference(model: nn.Module) -> dict[str, np.ndarray]:
    a = arrays()
    b = full_block(a)
    with torch.no_grad():
        out = model([b] * len(model.layers), {t: torch.from_numpy(a[f"ndata/{t}/feat"]) for t in N})
    return {t: v.numpy() for t, v in out.items()}


@pytest.mark.parametrize("kind", ["hetero-graphconv", "rgcn-example"])
def test_hetero_layer_wise_output_per_type_equals_full_forward(
    kind: str, parts: str, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    model = (RGCN() if kind == "hetero-graphconv" else example_rgcn()).eval()
    ref = reference(model)
    assert set(ref) == set(N)
    with dd.DistGraph.standalone(parts) as g:
        tg = as_train_graph(g)
        out = str(tmp_path / "out")
        s = hetero_infer_to_storage(
            tg, model, CTX, InferOptions(out, batch_size=7), manifest_url=parts
        )
        assert s["inference_node_types"] == sorted(N)
        idx = fmt.read_index(out)
        assert set(idx["node_types"]) == set(N) and idx["num_nodes"] == sum(N.values())
        for t, count in N.items():
            got = fmt.read_output(out, t)
            assert np.array_equal(np.sort(got["orig_id"]), np.arange(count)), t
            emb = got["embedding"][np.argsort(got["orig_id"])]
            np.testing.assert_allclose(emb, ref[t], atol=1e-5, rtol=0, err_msg=t)
            assert np.array_equal(got["pred"][np.argsort(got["orig_id"])], ref[t].argmax(1))
        # the library function: layers per node type, hidden ones released
        layers = infer(tg, model, "feat", batch_size=11, ctx=CTX)
        assert layers[0] is None and set(layers[-1]) == set(N)
        p = layers[-1]["paper"].read(np.arange(N["paper"]))
        # rows of the output are in new-ID order: row i is paper i of the DistGraph
        orig = fmt.read_output(out, "paper")["orig_id"]
        np.testing.assert_allclose(p.numpy(), ref["paper"][orig], atol=1e-5, rtol=0)
        for r in layers[-1].values():
            r.release()
