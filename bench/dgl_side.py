"""DGL 2.1's side of ``bench/compare_dgl.py``: runs inside the cached DGL environment.

Never imported by DistGNN and never run by the test suite. It imports only DGL, torch,
NumPy and the standard library, and reads the graph from the ``.npy`` folder that
``compare_dgl.py`` prepared (the same arrays DistGNN partitions). Subcommands:

* ``partition GRAPH OUT [--parts K]``: ``dgl.distributed.partition_graph`` (METIS, 2
  parts or K, training nodes and edges balanced, 1-hop halo, as DGL's examples call it);
  prints one JSON line with the time, the peak RSS and the node -> partition assignment file.
* ``server``: one DGL graph server (its machine's ``/dev/shm`` is private: see
  ``compare_dgl.py``); serves until the trainers exit.
* ``trainer``: one trainer of DGL's distributed GraphSAGE example loop (3 SAGEConv mean
  layers, hidden 256, fanouts 15,10,5, batch 1000, Adam, dropout 0.5), timed per step
  split into sampling, feature pull and compute; then, on rank 0, remote feature pulls and
  one-hop ``sample_neighbors``. Prints one JSON line (rank 0).

The machine ID is forced from ``--machine`` because every emulated machine has the
address 127.0.0.1 (DGL would otherwise take machine 0 for every trainer).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time


def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def cmd_partition(a: argparse.Namespace) -> None:
    import dgl
    import numpy as np
    import torch

    t0 = time.perf_counter()
    arr = {k: np.load(os.path.join(a.graph, f"{k}.npy"), mmap_mode="r") for k in
           ("src", "dst", "feat", "label", "train_mask")}  # fmt: skip
    n = int(arr["label"].shape[0])
    g = dgl.graph((torch.from_numpy(np.asarray(arr["src"])),
                   torch.from_numpy(np.asarray(arr["dst"]))), num_nodes=n)  # fmt: skip
    g.ndata["feat"] = torch.from_numpy(np.ascontiguousarray(arr["feat"]))
    g.ndata["label"] = torch.from_numpy(np.asarray(arr["label"]))
    g.ndata["train_mask"] = torch.from_numpy(np.asarray(arr["train_mask"]))
    t_load = time.perf_counter() - t0
    orig_nids, _ = dgl.distributed.partition_graph(
        g, "bench", a.parts, a.out, part_method="metis",
        balance_ntypes=g.ndata["train_mask"], balance_edges=True, return_mapping=True,
    )  # fmt: skip
    total = time.perf_counter() - t0
    with open(os.path.join(a.out, "bench.json")) as f:
        meta = json.load(f)
    ranges = meta["node_map"]["_N"]  # per partition [start, end) of new IDs
    part_of_new = np.empty(n, dtype=np.int32)
    for p, (s, e) in enumerate(ranges):
        part_of_new[s:e] = p
    assign = np.empty(n, dtype=np.int32)
    assign[orig_nids.numpy()] = part_of_new
    np.save(os.path.join(a.out, "assignment.npy"), assign)
    print(json.dumps({"seconds": total, "load_seconds": t_load,
                      "peak_rss_bytes": _peak_rss_bytes(),
                      "assignment": os.path.join(a.out, "assignment.npy")}))  # fmt: skip


def _force_machine_id(machine: int) -> None:
    from dgl.distributed import rpc_client

    rpc_client.get_local_machine_id = lambda _namebook: machine


def cmd_server(a: argparse.Namespace) -> None:
    import dgl

    os.environ.update(
        DGL_ROLE="server", DGL_DIST_MODE="distributed", DGL_SERVER_ID=str(a.machine),
        DGL_IP_CONFIG=a.ip_config, DGL_NUM_SERVER="1", DGL_NUM_CLIENT=str(a.clients),
        DGL_CONF_PATH=a.part_config, DGL_GRAPH_FORMAT="csc",
    )  # fmt: skip
    dgl.distributed.initialize(a.ip_config)  # serves until every client has exited


class _SAGE:
    """DGL's distributed GraphSAGE example model (``dgl.nn.SAGEConv`` mean layers)."""

    @staticmethod
    def build(in_feats: int, hidden: int, n_classes: int, layers: int, dropout: float):  # type: ignore[no-untyped-def]
        import dgl.nn.pytorch as dglnn
        import torch.nn.functional as F
        from torch import nn

        class SAGE(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                dims = [in_feats] + [hidden] * (layers - 1) + [n_classes]
                self.layers = nn.ModuleList(
                    dglnn.SAGEConv(dims[i], dims[i + 1], "mean") for i in range(layers)
                )
                self.dropout = nn.Dropout(dropout)

            def forward(self, blocks, x):  # type: ignore[no-untyped-def]
                h = x
                for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
                    h = layer(block, h)
                    if i != len(self.layers) - 1:
                        h = self.dropout(F.relu(h))
                return h

        return SAGE()


def cmd_trainer(a: argparse.Namespace) -> None:
    import dgl
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    _force_machine_id(a.machine)
    os.environ.update(DGL_ROLE="client", DGL_DIST_MODE="distributed", DGL_NUM_SAMPLER="0",
                      DGL_NUM_SERVER="1", DGL_IP_CONFIG=a.ip_config)  # fmt: skip
    dgl.distributed.initialize(a.ip_config)
    torch.distributed.init_process_group("gloo")
    g = dgl.distributed.DistGraph("bench", part_config=a.part_config)
    rank = g.rank()
    pb = g.get_partition_book()
    train_nid = dgl.distributed.node_split(g.ndata["train_mask"], pb, force_even=True)
    n_classes = a.classes
    model = _SAGE.build(g.ndata["feat"].shape[1], 256, n_classes, 3, 0.5)
    model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    sampler = dgl.dataloading.NeighborSampler([15, 10, 5])
    loader = dgl.dataloading.DistNodeDataLoader(
        g, train_nid, sampler, batch_size=1000, shuffle=True, drop_last=False
    )
    steps_local = -(-len(train_nid) // 1000)  # batches per epoch (drop_last=False)
    t = torch.tensor([steps_local])
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MIN)
    steps = int(t.item())  # every trainer runs the same number of steps (DDP)
    parts: dict[str, list[float]] = {"sample": [], "fetch": [], "compute": []}
    epoch_times: list[float] = []
    for epoch in range(a.epochs + 1):  # epoch 0 is a warm-up
        torch.distributed.barrier()
        t_epoch = time.perf_counter()
        it = iter(loader)
        for _ in range(steps):
            t0 = time.perf_counter()
            input_nodes, seeds, blocks = next(it)
            t1 = time.perf_counter()
            x = g.ndata["feat"][input_nodes]
            y = g.ndata["label"][seeds].long()
            t2 = time.perf_counter()
            loss = F.cross_entropy(model(blocks, x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            t3 = time.perf_counter()
            if epoch > 0:
                parts["sample"].append(t1 - t0)
                parts["fetch"].append(t2 - t1)
                parts["compute"].append(t3 - t2)
        del it
        torch.distributed.barrier()
        if epoch > 0:
            epoch_times.append(time.perf_counter() - t_epoch)
    out: dict[str, object] = {
        "epoch_times": epoch_times, "steps_per_epoch": steps,
        **{k: statistics.median(v) for k, v in parts.items()},
    }  # fmt: skip
    if rank == 0 and a.micro_reps > 0:
        rng = np.random.default_rng(0)
        remote = pb.partid2nids(1 - pb.partid).numpy()
        feat = g.ndata["feat"]
        row_bytes = feat.shape[1] * 4
        pulls, samples = [], []
        for r in range(a.micro_reps + 2):
            ids = torch.from_numpy(rng.choice(remote, 10_000, replace=False))
            t0 = time.perf_counter()
            feat[ids]
            if r >= 2:
                pulls.append(10_000 * row_bytes / (time.perf_counter() - t0))
            seeds = torch.from_numpy(rng.choice(g.num_nodes(), 10_000, replace=False))
            t0 = time.perf_counter()
            dgl.distributed.sample_neighbors(g, seeds, 10)
            if r >= 2:
                samples.append(10_000 / (time.perf_counter() - t0))
        out["remote_pull_bytes_per_s"] = statistics.median(pulls)
        out["sampling_seeds_per_s"] = statistics.median(samples)
    torch.distributed.barrier()
    if rank == 0:
        print(json.dumps(out), flush=True)
    dgl.distributed.exit_client()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("partition")
    p.add_argument("graph")
    p.add_argument("out")
    p.add_argument("--parts", type=int, default=2)
    for name in ("server", "trainer"):
        p = sub.add_parser(name)
        p.add_argument("--machine", type=int, required=True)
        p.add_argument("--ip-config", required=True)
        p.add_argument("--part-config", required=True)
        p.add_argument("--clients", type=int, default=2)
        p.add_argument("--epochs", type=int, default=1)
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--classes", type=int, default=16)
        p.add_argument("--micro-reps", type=int, default=0)
    a = ap.parse_args()
    {"partition": cmd_partition, "server": cmd_server, "trainer": cmd_trainer}[a.cmd](a)


if __name__ == "__main__":
    main()
