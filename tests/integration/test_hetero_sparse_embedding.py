"""The built-in R-GCN's featureless node type as a sparse embedding on real servers: the
typed Cora with its ``author`` nodes stripped of their feature, 2 partitions served by 2
``distgnn serve`` processes. The table ``node_emb_author`` lives on the servers (the
model has no parameter for it), one training step changes exactly the rows its batch
touched, and a checkpoint written by the app's loop brings the table and SparseAdam's
state back on resume."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from servers import running_servers
from tests.support.hetero import rgcn_config, typed_cora, without_author_features
from torch.nn import functional as F

from distgnn.distributed.context import initialize
from distgnn.distributed.graph import DistGraph
from distgnn.distributed.tensor import DistTensor
from distgnn.errors import ConfigError
from distgnn.graph.io import graph_from_arrays
from distgnn.partition.partitioner import partition_graph
from distgnn.train import checkpoint
from distgnn.train.config import TrainConfig
from distgnn.train.ddp import DDPContext
from distgnn.train.graph import TrainGraph
from distgnn.train.hetero_node_classification import typed_task
from distgnn.train.layerwise import as_train_graph
from distgnn.train.loop import resume, save_epoch

pytestmark = pytest.mark.slow
CTX = DDPContext(0, 1, torch.device("cpu"))
AUTHORS, HIDDEN = 900, 16


def cfg(**kw: Any) -> TrainConfig:
    return rgcn_config(**({"hidden": HIDDEN} | kw))


@pytest.fixture(scope="module")
def served(cora_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrainGraph]:
    arrays = without_author_features(typed_cora(cora_path))
    out = tmp_path_factory.mktemp("bare")
    partition_graph(graph_from_arrays(arrays, "bare"), 2, str(out), "bare", method="random",
                    progress=False)  # fmt: skip
    with running_servers(str(out / "bare.json"), num_parts=2, workers=1) as srv:
        g = DistGraph(ctx=initialize(env=srv.env()), own=True)
        try:
            yield as_train_graph(g)
        finally:
            g.close()


def table(tg: TrainGraph) -> torch.Tensor:
    """``node_emb_author`` as the servers hold it (attached by name)."""
    t = DistTensor((AUTHORS, HIDDEN), torch.float32, "node_emb_author",
                   part_policy=tg.g.get_node_partition_policy("author"), ctx=tg.g)  # fmt: skip
    return t[torch.arange(AUTHORS)].clone()


def test_a_step_changes_only_the_touched_rows_on_the_servers(served: TrainGraph) -> None:
    task = typed_task(cfg(), served, CTX)
    model, sparse = task.model, task.sparse
    assert sparse is not None and sorted(sparse.tables) == ["author"]
    # nothing of the table in the trainer's model: no parameter has a row per author
    assert not any(p.shape[0] == AUTHORS for p in model.parameters())
    assert not any(".embed." in k for k in model.state_dict())
    before = table(served)
    assert before.abs().max() <= 1.0 and before.std() > 0.4  # DGL's init: uniform(-1, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    with task.loader as loader:
        batch = next(iter(loader))
    touched = np.unique(batch[0]["author"].numpy())
    assert 0 < touched.size < AUTHORS
    x, y, blocks = task.load(batch)
    loss = F.cross_entropy(task.logits(model, blocks, x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sparse.step()
    after = table(served)
    changed = np.flatnonzero((after != before).any(1).numpy())
    assert set(changed.tolist()) <= set(touched.tolist())
    assert changed.size >= 0.9 * touched.size, (changed.size, touched.size)
    untouched = np.setdiff1d(np.arange(AUTHORS), touched)
    assert torch.equal(after[untouched], before[untouched])


def test_a_checkpoint_carries_the_table_and_the_optimizer_state_and_resume_writes_them_back(
    served: TrainGraph, tmp_path: Path
) -> None:
    """Train a step, checkpoint, clobber the table and SparseAdam's state on the servers
    (what a later epoch or fresh servers hold), resume: both are the checkpoint's again,
    so the next step continues Adam's moments and step counts instead of restarting them."""
    c = cfg(checkpoint_url=str(tmp_path / "ck"))
    task = typed_task(c, served, CTX)
    assert task.sparse is not None and task.sparse.opt is not None
    opt = torch.optim.Adam(task.model.parameters(), lr=0.02)
    with task.loader as loader:
        x, y, blocks = task.load(next(iter(loader)))
    F.cross_entropy(task.logits(task.model, blocks, x), y).backward()
    opt.step()
    task.sparse.step()
    states = task.sparse.opt._state["node_emb_author"]
    every = torch.arange(AUTHORS)
    saved, saved_states = table(served), [st[every].clone() for st in states]
    assert 0 < int((saved_states[0] == 1).sum()) < AUTHORS  # one step for the touched rows
    save_epoch(c, CTX, 0, task.model, opt, lambda: task.checkpoint, task.sparse)
    ck = checkpoint.load(checkpoint.checkpoint_url(c.checkpoint_url or "", 0))
    assert ck.sparse == {"format": "rows", "path": "ckpt-epoch-00000.sparse", "world_size": 1,
                         "tables": {"node_emb_author": [AUTHORS, HIDDEN]},
                         "optimizer": "SparseAdam"}  # fmt: skip
    assert ck.extra["rgcn"]["sparse_embedding"] is True
    assert (tmp_path / "ck" / "ckpt-epoch-00000.sparse" / "optimizer_0" / "meta.json").exists()

    emb = task.sparse.tables["author"]
    emb.tensor[every] = torch.zeros(AUTHORS, HIDDEN)
    for st in states:
        st[every] = torch.full(st.shape, 7.0)
    assert table(served).abs().sum() == 0
    again = typed_task(c, served, CTX)  # a restarted trainer: new handles, same servers
    assert again.sparse is not None and again.sparse.opt is not None
    assert resume(c, CTX, again.model, opt, again.sparse) == 1
    assert torch.equal(table(served), saved)
    for st, want in zip(again.sparse.opt._state["node_emb_author"], saved_states, strict=True):
        assert torch.equal(st[every], want), st.name

    # the same checkpoint resumed with dense embeddings is refused, naming the field
    dense = typed_task(cfg(checkpoint_url=c.checkpoint_url, sparse_embedding=False), served, CTX)
    assert dense.sparse is None
    with pytest.raises(ConfigError, match=r"sparseEmbedding"):
        resume(c, CTX, dense.model, torch.optim.Adam(dense.model.parameters()), dense.sparse)


@pytest.mark.s3
def test_the_sparse_checkpoint_goes_to_s3_and_comes_back(
    served: TrainGraph,
    s3,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--checkpoint-url s3://...``: the trainers' rows go to the object store (real
    SeaweedFS, credentials from the environment) beside the checkpoint and come back."""
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    c = cfg(checkpoint_url=s3.url("sparse-ck"))
    task = typed_task(c, served, CTX)
    assert task.sparse is not None and task.sparse.opt is not None
    opt = torch.optim.Adam(task.model.parameters(), lr=0.02)
    every = torch.arange(AUTHORS)
    power = task.sparse.opt._state["node_emb_author"][2]
    power[every] = torch.rand(AUTHORS, HIDDEN)
    saved, saved_power = table(served), power[every].clone()
    save_epoch(c, CTX, 0, task.model, opt, lambda: task.checkpoint, task.sparse)
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options())
    keys = fs.find(f"{s3.bucket}/sparse-ck")
    assert any(k.endswith("ckpt-epoch-00000.sparse/optimizer_0/meta.json") for k in keys), keys
    task.sparse.tables["author"].tensor[every] = torch.zeros(AUTHORS, HIDDEN)
    power[every] = torch.zeros(AUTHORS, HIDDEN)
    assert resume(c, CTX, task.model, opt, task.sparse) == 1
    assert torch.equal(table(served), saved) and torch.equal(power[every], saved_power)
