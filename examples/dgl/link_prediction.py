"""DGL's distributed unsupervised GraphSAGE (examples/distributed/graphsage/
node_classification_unsupervised.py: link prediction with negative sampling, then a
logistic regression on the learnt embeddings), rewritten for DistGNN with the
same structure and DGL API calls (DGL's file itself: see docs/dgl-migration.md).
"""

import argparse
import time
from contextlib import contextmanager

import distgnn as dgl
import distgnn.function as fn
import distgnn.nn as dglnn

import numpy as np
import sklearn.linear_model as lm
import sklearn.metrics as skm
import torch as th
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import tqdm


class DistSAGE(nn.Module):
    """GraphSAGE encoder; ``inference`` embeds every node layer by layer."""

    def __init__(self, in_feats, n_hidden, n_classes, n_layers, activation, dropout):
        super().__init__()
        self.n_layers = n_layers
        self.n_hidden = n_hidden
        self.n_classes = n_classes
        self.layers = nn.ModuleList()
        self.layers.append(dglnn.SAGEConv(in_feats, n_hidden, "mean"))
        for i in range(1, n_layers - 1):
            self.layers.append(dglnn.SAGEConv(n_hidden, n_hidden, "mean"))
        self.layers.append(dglnn.SAGEConv(n_hidden, n_classes, "mean"))
        self.dropout = nn.Dropout(dropout)
        self.activation = activation

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.activation(h)
                h = self.dropout(h)
        return h

    def inference(self, g, x, batch_size, device):
        """Embeddings of all nodes over full neighbourhoods, one layer at a time; each
        trainer computes its share into a DistTensor the next layer reads."""
        nodes = dgl.distributed.node_split(
            np.arange(g.num_nodes()),
            g.get_partition_book(),
            force_even=True,
        )
        y = dgl.distributed.DistTensor(
            (g.num_nodes(), self.n_hidden), th.float32, "h", persistent=True
        )
        for i, layer in enumerate(self.layers):
            if i == len(self.layers) - 1:
                y = dgl.distributed.DistTensor(
                    (g.num_nodes(), self.n_classes), th.float32, "h_last", persistent=True
                )
            sampler = dgl.dataloading.NeighborSampler([-1])
            dataloader = dgl.distributed.DistNodeDataLoader(
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
                if i != len(self.layers) - 1:
                    h = self.activation(h)
                    h = self.dropout(h)
                y[output_nodes] = h.cpu()
            x = y
            g.barrier()
        return y

    @contextmanager
    def join(self):
        """No-op join for standalone runs (no DDP wrapper)."""
        yield


def load_subtensor(g, input_nodes, device):
    """Features of ``input_nodes`` on ``device``."""
    return g.ndata["features"][input_nodes].to(device)


class CrossEntropyLoss(nn.Module):
    """Binary cross-entropy of dot-product scores: positive pairs 1, negative pairs 0."""

    def forward(self, block_outputs, pos_graph, neg_graph):
        with pos_graph.local_scope():
            pos_graph.ndata["h"] = block_outputs
            pos_graph.apply_edges(fn.u_dot_v("h", "h", "score"))
            pos_score = pos_graph.edata["score"]
        with neg_graph.local_scope():
            neg_graph.ndata["h"] = block_outputs
            neg_graph.apply_edges(fn.u_dot_v("h", "h", "score"))
            neg_score = neg_graph.edata["score"]
        score = th.cat([pos_score, neg_score])
        label = th.cat([th.ones_like(pos_score), th.zeros_like(neg_score)]).long()
        return F.binary_cross_entropy_with_logits(score, label.float())


def generate_emb(model, g, inputs, batch_size, device):
    """Embeddings of every node (a DistTensor)."""
    model.eval()
    with th.no_grad():
        pred = model.inference(g, inputs, batch_size, device)
    return pred


def compute_acc(emb, labels, train_nids, val_nids, test_nids):
    """Validation and test accuracy of a logistic regression trained on the embeddings
    of the training nodes."""
    emb = emb[np.arange(labels.shape[0])].cpu().numpy()
    train_nids = train_nids.cpu().numpy()
    val_nids = val_nids.cpu().numpy()
    test_nids = test_nids.cpu().numpy()
    labels = labels.cpu().numpy()

    emb = (emb - emb.mean(0, keepdims=True)) / emb.std(0, keepdims=True)
    lr = lm.LogisticRegression(max_iter=10000)  # multinomial (scikit-learn's default)
    lr.fit(emb[train_nids], labels[train_nids])
    pred = lr.predict(emb)
    eval_acc = skm.accuracy_score(labels[val_nids], pred[val_nids])
    test_acc = skm.accuracy_score(labels[test_nids], pred[test_nids])
    return eval_acc, test_acc


def run(args, device, data):
    (
        train_eids,
        train_nids,
        in_feats,
        g,
        global_train_nid,
        global_valid_nid,
        global_test_nid,
        labels,
    ) = data
    neg_sampler = dgl.dataloading.negative_sampler.Uniform(args.num_negs)
    sampler = dgl.dataloading.NeighborSampler([int(f) for f in args.fan_out.split(",")])
    exclude = "reverse_id" if args.remove_edge else None
    reverse_eids = th.arange(g.num_edges()) if args.remove_edge else None
    dataloader = dgl.distributed.DistEdgeDataLoader(
        g,
        train_eids,
        sampler,
        negative_sampler=neg_sampler,
        exclude=exclude,
        reverse_eids=reverse_eids,
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=False,
    )
    model = DistSAGE(
        in_feats, args.num_hidden, args.num_hidden, args.num_layers, F.relu, args.dropout
    )
    model = model.to(device)
    if not args.standalone:
        if args.num_gpus == -1:
            model = th.nn.parallel.DistributedDataParallel(model)
        else:
            dev_id = g.rank() % args.num_gpus
            model = th.nn.parallel.DistributedDataParallel(
                model, device_ids=[dev_id], output_device=dev_id
            )
    loss_fcn = CrossEntropyLoss()
    loss_fcn = loss_fcn.to(device)
    optimizer = optim.Adam(model.parameters(), lr=args.lr)

    epoch = 0
    for epoch in range(args.num_epochs):
        num_seeds = 0
        num_inputs = 0
        step_time, sample_t, feat_copy_t = [], [], []
        forward_t, backward_t, update_t, iter_tput = [], [], [], []
        start = time.time()
        with model.join():
            for step, (input_nodes, pos_graph, neg_graph, blocks) in enumerate(dataloader):
                if args.debug:  # the batch's edges must not be among the sampled ones
                    for block in blocks:
                        current_eids = block.edata[dgl.EID]
                        seed_eids = pos_graph.edata[dgl.EID]
                        if exclude is None:
                            assert th.any(th.isin(current_eids, seed_eids))
                        elif exclude in ("self", "reverse_id"):
                            assert not th.any(th.isin(current_eids, seed_eids))
                        else:
                            raise ValueError(f"Unsupported exclude type: {exclude}")
                tic_step = time.time()
                sample_t.append(tic_step - start)

                copy_t = time.time()
                pos_graph = pos_graph.to(device)
                neg_graph = neg_graph.to(device)
                blocks = [block.to(device) for block in blocks]
                batch_inputs = load_subtensor(g, input_nodes, device)
                copy_time = time.time()
                feat_copy_t.append(copy_time - copy_t)

                batch_pred = model(blocks, batch_inputs)
                loss = loss_fcn(batch_pred, pos_graph, neg_graph)
                forward_end = time.time()
                optimizer.zero_grad()
                loss.backward()
                compute_end = time.time()
                forward_t.append(forward_end - copy_time)
                backward_t.append(compute_end - forward_end)

                optimizer.step()
                update_t.append(time.time() - compute_end)

                pos_edges = pos_graph.num_edges()
                step_t = time.time() - start
                step_time.append(step_t)
                iter_tput.append(pos_edges / step_t)
                num_seeds += pos_edges
                if step % args.log_every == 0:
                    print(
                        f"[{g.rank()}] Epoch {epoch:05d} | Step {step:05d} | "
                        f"Loss {loss.item():.4f} | Speed (samples/sec) "
                        f"{np.mean(iter_tput[3:]):.4f} | time "
                        f"{np.sum(step_time[-args.log_every:]):.3f}s"
                    )
                start = time.time()

        print(
            f"[{g.rank()}]Epoch Time(s): {np.sum(step_time):.4f}, sample: "
            f"{np.sum(sample_t):.4f}, data copy: {np.sum(feat_copy_t):.4f}, forward: "
            f"{np.sum(forward_t):.4f}, backward: {np.sum(backward_t):.4f}, update: "
            f"{np.sum(update_t):.4f}, #seeds: {num_seeds}, #inputs: {num_inputs}"
        )
        epoch += 1

    # node classification with the learnt embeddings
    pred = generate_emb(
        model if args.standalone else model.module,
        g,
        g.ndata["features"],
        args.batch_size_eval,
        device,
    )
    if g.rank() == 0:
        eval_acc, test_acc = compute_acc(
            pred, labels, global_train_nid, global_valid_nid, global_test_nid
        )
        print("eval acc {:.4f}; test acc {:.4f}".format(eval_acc, test_acc))

    if not args.standalone:
        th.distributed.barrier()
        g.barrier()
        if g.rank() == 0:
            th.save(pred[np.arange(g.num_nodes())], "emb.pt")
    else:
        th.save(pred[np.arange(g.num_nodes())], "emb.pt")


def main(args):
    print("--- Distributed node classification with GraphSAGE unsupervised ---")
    dgl.distributed.initialize(args.ip_config)
    if not args.standalone:
        th.distributed.init_process_group(backend="gloo")
    g = dgl.distributed.DistGraph(args.graph_name, part_config=args.part_config)
    print("rank:", g.rank())
    print("number of edges", g.num_edges())

    train_eids = dgl.distributed.edge_split(
        th.ones((g.num_edges(),), dtype=th.bool), g.get_partition_book(), force_even=True
    )
    train_nids = dgl.distributed.node_split(
        th.ones((g.num_nodes(),), dtype=th.bool), g.get_partition_book()
    )
    all_nodes = np.arange(g.num_nodes())
    global_train_nid = th.LongTensor(np.nonzero(g.ndata["train_mask"][all_nodes]))
    global_valid_nid = th.LongTensor(np.nonzero(g.ndata["val_mask"][all_nodes]))
    global_test_nid = th.LongTensor(np.nonzero(g.ndata["test_mask"][all_nodes]))
    labels = g.ndata["labels"][all_nodes]
    if args.num_gpus == -1:
        device = th.device("cpu")
    else:
        device = th.device("cuda:" + str(g.rank() % args.num_gpus))

    in_feats = g.ndata["features"].shape[1]
    global_train_nid = global_train_nid.squeeze()
    global_valid_nid = global_valid_nid.squeeze()
    global_test_nid = global_test_nid.squeeze()
    print("number of train {}".format(global_train_nid.shape[0]))
    print("number of valid {}".format(global_valid_nid.shape[0]))
    print("number of test {}".format(global_test_nid.shape[0]))
    data = (
        train_eids,
        train_nids,
        in_feats,
        g,
        global_train_nid,
        global_valid_nid,
        global_test_nid,
        labels,
    )
    run(args, device, data)
    print("parent ends")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="GCN")
    parser.add_argument("--graph_name", type=str, help="graph name")
    parser.add_argument("--id", type=int, help="the partition id")
    parser.add_argument("--ip_config", type=str, help="file of server addresses (DGL's)")
    parser.add_argument("--part_config", type=str, help="partition config file")
    parser.add_argument("--n_classes", type=int, help="number of classes")
    parser.add_argument("--num_gpus", type=int, default=-1, help="GPUs; -1 trains on the CPU")
    parser.add_argument("--num_epochs", type=int, default=20)
    parser.add_argument("--num_hidden", type=int, default=16)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--fan_out", type=str, default="10,25")
    parser.add_argument("--batch_size", type=int, default=1000)
    parser.add_argument("--batch_size_eval", type=int, default=100000)
    parser.add_argument("--log_every", type=int, default=20)
    parser.add_argument("--eval_every", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--local_rank", type=int, help="rank of the process")
    parser.add_argument("--standalone", action="store_true", help="standalone mode")
    parser.add_argument("--num_negs", type=int, default=1)
    parser.add_argument("--remove_edge", default=False, action="store_true",
                        help="exclude the batch's edges from the sampled neighbourhoods")
    parser.add_argument("--debug", default=False, action="store_true",
                        help="check the edge exclusion")
    args = parser.parse_args()
    print(args)
    main(args)
