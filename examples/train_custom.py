"""A user's own training script: GraphSAGE node classification with the public API.

It imitates ``distgnn train node-classification`` step by step and runs as a job's
user command: ``distgnn run examples/custom-script.yaml`` (its
``spec.trainers.command: [python, train_custom.py]`` is relative to the manifest's
folder, where user commands run), or by hand with the contract environment::

    DISTGNN_MANIFEST=parts/cora.json python examples/train_custom.py --epochs 5

(servers from ``DISTGNN_SERVERS``, or standalone from ``DISTGNN_MANIFEST``; rank and
rendezvous from ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``). Rank 0 prints
the final metrics JSON as its last stdout line. It ends with ``end_process(0)``, as the
built-in trainers do.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

import distgnn.distributed as dgl_dist
from distgnn import log
from distgnn.dataloading import DistNodeDataLoader, NeighborSampler
from distgnn.nn import GraphSAGE
from distgnn.train.ddp import rendezvous_store
from distgnn.train.finish import end_process


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--fanouts", default="25,25")
    args = ap.parse_args()
    log.setup()
    torch.manual_seed(0)

    # 1. join the trainers (gloo on CPU) and connect to the graph
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:  # MASTER_ADDR/PORT; a loopback MASTER_ADDR's store listens on it only
        dist.init_process_group("gloo", store=rendezvous_store(), rank=rank, world_size=world)
    g = dgl_dist.DistGraph(ctx=dgl_dist.initialize(), own=True)

    # 2. this trainer's training nodes (partition-local first), all val/test nodes
    n = g.num_nodes()
    train_mask = g.ndata["train_mask"][torch.arange(n)]
    train_ids = dgl_dist.node_split(train_mask, g.get_partition_book(), rank=rank, world_size=world)
    test_ids = torch.nonzero(g.ndata["test_mask"][torch.arange(n)]).flatten()
    num_classes = int(g.ndata["label"][torch.arange(n)].max()) + 1

    # 3. model, optimizer, DDP
    model: torch.nn.Module = GraphSAGE(g.ndata["feat"].shape[1], args.hidden, num_classes, 2, 0.7)
    if world > 1:
        model = DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=0.01)
    sampler = NeighborSampler([int(f) for f in args.fanouts.split(",")])
    # sampler processes: the job's numSamplers (DISTGNN_NUM_SAMPLERS)
    loader = DistNodeDataLoader(
        g, train_ids, sampler, batch_size=args.batch_size, shuffle=True, seed=rank
    )

    # 4. every trainer runs the same number of steps (pad with zero-weight repeats)
    steps = torch.tensor([len(loader)])
    if world > 1:
        dist.all_reduce(steps, op=dist.ReduceOp.MAX)
    for epoch in range(args.epochs):
        batches, last = iter(loader), None
        for _ in range(int(steps.item())):
            batch, weight = next(batches, None), 1.0
            if batch is None:  # out of batches: repeat the last one with no weight
                batch, weight = last, 0.0
            last = batch
            inp, out, blocks = batch
            logits = model(blocks, g.ndata["feat"][inp])
            loss = F.cross_entropy(logits, g.ndata["label"][out]) * weight
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}", file=sys.stderr)

    # 5. rank 0 evaluates on the test nodes with all neighbours
    metrics = {}
    if rank == 0:
        net = model.module if isinstance(model, DistributedDataParallel) else model
        net.eval()
        full = DistNodeDataLoader(
            g, test_ids, NeighborSampler([-1, -1]), batch_size=4096, num_samplers=0
        )
        correct = 0
        with torch.no_grad():
            for inp, out, blocks in full:
                pred = net(blocks, g.ndata["feat"][inp]).argmax(1)
                correct += int((pred == g.ndata["label"][out]).sum())
        metrics = {
            "test_accuracy": round(correct / max(len(test_ids), 1), 4),
            "epochs": args.epochs,
        }
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    loader.close()
    g.close()
    if rank == 0:
        print(json.dumps(metrics), flush=True)


if __name__ == "__main__":
    main()
    # end as `distgnn train` does: no interpreter teardown, where a gloo thread finishing
    # its last work can abort a finished run (docs/training.md, "How a trainer ends")
    end_process(0)
