"""DGL's distributed GraphSAGE node classification (examples/distributed/graphsage/
node_classification.py), rewritten for DistGNN with the same structure and DGL API calls
(DGL's file itself runs with its 2 import lines changed, see docs/dgl-migration.md). Runs as a DistGNNJob user command (see
node_classification.yaml) or by hand with the contract environment.
"""

import argparse
import socket
import time

import distgnn as dgl
import distgnn.nn as dglnn
import numpy as np
import torch as th
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import tqdm


class DistSAGE(nn.Module):
    """GraphSAGE for mini-batch training and layer-wise distributed inference."""

    def __init__(self, in_feats, n_hidden, n_classes, n_layers, activation, dropout):
        super().__init__()
        self.n_layers = n_layers
        self.n_hidden = n_hidden
        self.n_classes = n_classes
        self.layers = nn.ModuleList()
        self.layers.append(dglnn.SAGEConv(in_feats, n_hidden, "mean"))
        for _ in range(1, n_layers - 1):
            self.layers.append(dglnn.SAGEConv(n_hidden, n_hidden, "mean"))
        self.layers.append(dglnn.SAGEConv(n_hidden, n_classes, "mean"))
        self.dropout = nn.Dropout(dropout)
        self.activation = activation

    def forward(self, blocks, x):
        """Logits of the output nodes of ``blocks`` from input features ``x``."""
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.activation(h)
                h = self.dropout(h)
        return h

    def inference(self, g, x, batch_size, device):
        """Every node's output, one layer at a time over all neighbours.

        Each trainer computes its share of the nodes per layer and writes it into a
        DistTensor that the next layer reads; trainers meet at a barrier in between.
        """
        nodes = dgl.distributed.node_split(
            np.arange(g.num_nodes()),
            g.get_partition_book(),
            force_even=True,
        )
        for i, layer in enumerate(self.layers):
            last = i == len(self.layers) - 1
            out_dim = self.n_classes if last else self.n_hidden
            name = "h_last" if last else "h"
            y = dgl.distributed.DistTensor(
                (g.num_nodes(), out_dim),
                th.float32,
                name,
                persistent=True,
            )
            print(f"|V|={g.num_nodes()}, inference batch size: {batch_size}")
            # one layer with every in-neighbour (fanout -1)
            sampler = dgl.dataloading.NeighborSampler([-1])
            dataloader = dgl.dataloading.DistNodeDataLoader(
                g,
                nodes,
                sampler,
                batch_size=batch_size,
                shuffle=False,
                drop_last=False,
            )
            for input_nodes, output_nodes, blocks in tqdm.tqdm(dataloader):
                block = blocks[0].to(device)
                h = x[input_nodes].to(device)
                h_dst = h[: block.number_of_dst_nodes()]
                h = layer(block, (h, h_dst))
                if not last:
                    h = self.activation(h)
                    h = self.dropout(h)
                y[output_nodes] = h.cpu()  # DistTensors live on the CPU
            x = y
            g.barrier()
        return x


def compute_acc(pred, labels):
    """Share of rows of ``pred`` whose argmax is the label."""
    labels = labels.long()
    return (th.argmax(pred, dim=1) == labels).float().sum() / len(pred)


def evaluate(model, g, inputs, labels, val_nid, test_nid, batch_size, device):
    """Validation and test accuracy of this trainer's share of the nodes."""
    model.eval()
    with th.no_grad():
        pred = model.inference(g, inputs, batch_size, device)
    model.train()
    return compute_acc(pred[val_nid], labels[val_nid]), compute_acc(
        pred[test_nid], labels[test_nid]
    )


def run(args, device, data):
    """Train, evaluating every ``eval_every`` epochs; returns (mean epoch time, test acc)."""
    train_nid, val_nid, test_nid, in_feats, n_classes, g = data
    sampler = dgl.dataloading.NeighborSampler([int(f) for f in args.fan_out.split(",")])
    dataloader = dgl.dataloading.DistNodeDataLoader(
        g,
        train_nid,
        sampler,
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=False,
    )
    model = DistSAGE(
        in_feats, args.num_hidden, n_classes, args.num_layers, F.relu, args.dropout
    )
    model = model.to(device)
    if args.num_gpus == 0:
        model = th.nn.parallel.DistributedDataParallel(model)
    else:
        model = th.nn.parallel.DistributedDataParallel(
            model, device_ids=[device], output_device=device
        )
    loss_fcn = nn.CrossEntropyLoss()
    loss_fcn = loss_fcn.to(device)
    optimizer = optim.Adam(model.parameters(), lr=args.lr)

    iter_tput = []
    epoch = 0
    epoch_time = []
    test_acc = 0.0
    for _ in range(args.num_epochs):
        epoch += 1
        tic = time.time()
        sample_time = forward_time = backward_time = update_time = 0
        num_seeds = num_inputs = 0
        start = time.time()
        step_time = []
        with model.join():  # trainers may have different numbers of batches
            for step, (input_nodes, seeds, blocks) in enumerate(dataloader):
                tic_step = time.time()
                sample_time += tic_step - start
                batch_inputs = g.ndata["features"][input_nodes]
                batch_labels = g.ndata["labels"][seeds].long()
                num_seeds += len(blocks[-1].dstdata[dgl.NID])
                num_inputs += len(blocks[0].srcdata[dgl.NID])
                blocks = [block.to(device) for block in blocks]
                batch_inputs = batch_inputs.to(device)
                batch_labels = batch_labels.to(device)
                start = time.time()
                batch_pred = model(blocks, batch_inputs)
                loss = loss_fcn(batch_pred, batch_labels)
                forward_end = time.time()
                optimizer.zero_grad()
                loss.backward()
                compute_end = time.time()
                forward_time += forward_end - start
                backward_time += compute_end - forward_end
                optimizer.step()
                update_time += time.time() - compute_end

                step_t = time.time() - tic_step
                step_time.append(step_t)
                iter_tput.append(len(blocks[-1].dstdata[dgl.NID]) / step_t)
                if (step + 1) % args.log_every == 0:
                    acc = compute_acc(batch_pred, batch_labels)
                    gpu_mem_alloc = (
                        th.cuda.max_memory_allocated() / 1000000 if th.cuda.is_available() else 0
                    )
                    print(
                        f"Part {g.rank()} | Epoch {epoch:05d} | Step {step:05d}"
                        f" | Loss {loss.item():.4f} | Train Acc {acc.item():.4f}"
                        f" | Speed (samples/sec) {np.mean(iter_tput[-args.log_every:]):.4f}"
                        f" | GPU {gpu_mem_alloc:.1f} MB"
                        f" | Mean step time {np.mean(step_time[-args.log_every:]):.3f} s"
                    )
                start = time.time()

        toc = time.time()
        print(
            f"Part {g.rank()}, Epoch Time(s): {toc - tic:.4f}, "
            f"sample+data_copy: {sample_time:.4f}, forward: {forward_time:.4f},"
            f" backward: {backward_time:.4f}, update: {update_time:.4f}, "
            f"#seeds: {num_seeds}, #inputs: {num_inputs}"
        )
        epoch_time.append(toc - tic)

        if epoch % args.eval_every == 0 or epoch == args.num_epochs:
            start = time.time()
            val_acc, test_acc = evaluate(
                model.module,
                g,
                g.ndata["features"],
                g.ndata["labels"],
                val_nid,
                test_nid,
                args.batch_size_eval,
                device,
            )
            print(
                f"Part {g.rank()}, Val Acc {val_acc:.4f}, "
                f"Test Acc {test_acc:.4f}, time: {time.time() - start:.4f}"
            )

    return np.mean(epoch_time[-int(args.num_epochs * 0.8) :]), test_acc


def main(args):
    """Connect, split the nodes among the trainers, train and evaluate."""
    host_name = socket.gethostname()
    print(f"{host_name}: Initializing DistDGL.")
    dgl.distributed.initialize(args.ip_config)
    print(f"{host_name}: Initializing PyTorch process group.")
    th.distributed.init_process_group(backend=args.backend)
    print(f"{host_name}: Initializing DistGraph.")
    g = dgl.distributed.DistGraph(args.graph_name, part_config=args.part_config)
    print(f"Rank of {host_name}: {g.rank()}")

    # this trainer's train/val/test nodes (evenly split, partition-local first)
    pb = g.get_partition_book()
    if "trainer_id" in g.ndata:
        split = {"node_trainer_ids": g.ndata["trainer_id"]}
    else:
        split = {}
    train_nid = dgl.distributed.node_split(g.ndata["train_mask"], pb, force_even=True, **split)
    val_nid = dgl.distributed.node_split(g.ndata["val_mask"], pb, force_even=True, **split)
    test_nid = dgl.distributed.node_split(g.ndata["test_mask"], pb, force_even=True, **split)
    local_nid = pb.partid2nids(pb.partid).detach().numpy()
    print(
        f"part {g.rank()}, train: {len(train_nid)} "
        f"(local: {len(np.intersect1d(train_nid.numpy(), local_nid))}), "
        f"val: {len(val_nid)} (local: {len(np.intersect1d(val_nid.numpy(), local_nid))}), "
        f"test: {len(test_nid)} (local: {len(np.intersect1d(test_nid.numpy(), local_nid))})"
    )
    del local_nid
    if args.num_gpus == 0:
        device = th.device("cpu")
    else:
        device = th.device("cuda:" + str(g.rank() % args.num_gpus))
    n_classes = args.n_classes
    if n_classes == 0:
        labels = g.ndata["labels"][np.arange(g.num_nodes())]
        n_classes = len(th.unique(labels[th.logical_not(th.isnan(labels))]))
        del labels
    print(f"Number of classes: {n_classes}")

    in_feats = g.ndata["features"].shape[1]
    data = train_nid, val_nid, test_nid, in_feats, n_classes, g
    epoch_time, test_acc = run(args, device, data)
    print(
        f"Summary of node classification(GraphSAGE): GraphName "
        f"{args.graph_name} | TrainEpochTime(mean) {epoch_time:.4f} "
        f"| TestAccuracy {test_acc:.4f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Distributed GraphSAGE.")
    parser.add_argument("--graph_name", type=str, help="graph name")
    parser.add_argument("--ip_config", type=str, help="file of server addresses (DGL's)")
    parser.add_argument("--part_config", type=str, help="partition config file")
    parser.add_argument("--n_classes", type=int, default=0, help="number of classes")
    parser.add_argument("--backend", type=str, default="gloo", help="torch.distributed backend")
    parser.add_argument("--num_gpus", type=int, default=0, help="GPUs; 0 trains on the CPU")
    parser.add_argument("--num_epochs", type=int, default=20)
    parser.add_argument("--num_hidden", type=int, default=16)
    parser.add_argument("--num_layers", type=int, default=2)
    parser.add_argument("--fan_out", type=str, default="10,25")
    parser.add_argument("--batch_size", type=int, default=1000)
    parser.add_argument("--batch_size_eval", type=int, default=100000)
    parser.add_argument("--log_every", type=int, default=20)
    parser.add_argument("--eval_every", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--local_rank", type=int, help="rank of the process")
    parser.add_argument("--pad-data", default=False, action="store_true", help="unused")
    args = parser.parse_args()
    print(f"Arguments: {args}")
    main(args)
