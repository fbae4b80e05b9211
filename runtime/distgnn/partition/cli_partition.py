"""``distgnn partition``: split a graph into partitions in object storage."""

from __future__ import annotations

import argparse
from dataclasses import asdict

HELP = "partition a graph (.npz, folder of .npy, DGL chunked metadata.json; any fsspec URL)"


def error_status(e: BaseException) -> int:
    """The exit status of a DistGNN error: :data:`~distgnn.contract.EXIT_CONFIG_ERROR` (2)
    for what trying again cannot fix (an option, an input graph that does not exist or is
    malformed, too large or not a regular file, an output location that cannot be
    written, no storage credentials at all), which the operator's partitioning Job does
    not retry (its ``podFailurePolicy``);
    :data:`~distgnn.contract.EXIT_FAILURE` (1) for object storage unreachable, refusing
    the credentials or failing otherwise, which a retry can cure."""
    from distgnn import storage

    return storage.exit_status(e, (BaseException,))  # all but storage: the input's or options'


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "graph",
        metavar="GRAPH",
        help="input graph: .npz file, folder of .npy files, or a chunked graph's metadata.json "
        "(DGL's chunked graph format: csv, numpy or parquet chunks)",
    )
    p.add_argument("--num-parts", type=int, required=True, help="number of partitions")
    p.add_argument("--out", required=True, help="output folder URL (local path, s3://...)")
    p.add_argument("--name", required=True, help="graph name: writes OUT/NAME.json + OUT/NAME/")
    p.add_argument(
        "--method",
        choices=["metis", "metis-full", "random"],
        default="metis",
        help="node assignment: metis (min edge cut, default; dense graphs: on an edge sample, "
        "refined on all edges), metis-full (METIS on every edge) or random",
    )
    p.add_argument(
        "--balance-train",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="balance the training nodes (--train-mask) across parts; on by default, as "
        "spec.partitioning.balanceTrain in manifests (--no-balance-train to disable)",
    )
    p.add_argument("--balance-edges", action="store_true", help="balance in-edges per part")
    p.add_argument("--halo-hops", type=int, default=1, help="halo depth (default 1)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the partitioner (default 0)")
    p.add_argument(
        "--train-mask",
        default="train_mask",
        help="node data used as train mask (default train_mask)",
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="skip when OUT/NAME.json exists with the same input and options",
    )


def main(args: argparse.Namespace) -> int:
    from distgnn import storage
    from distgnn.graph.io import load_graph
    from distgnn.partition.manifest import PartitionOptions
    from distgnn.partition.partitioner import partition_graph
    from distgnn.partition.reuse import find_reusable

    storage.check_writable_folder(args.out)  # before reading a graph that may be large
    graph = load_graph(args.graph)
    opts = PartitionOptions(
        args.method,
        args.seed,
        args.halo_hops,
        args.balance_train,
        args.balance_edges,
        args.train_mask,
    )
    if args.reuse:
        m = find_reusable(args.out, args.name, graph.fingerprint, opts, args.num_parts)
        if m is not None:
            print(f"reused {args.out.rstrip('/')}/{args.name}.json (edge cut {m.edge_cut:.4f})")
            return 0
    m = partition_graph(
        graph,
        args.num_parts,
        args.out,
        args.name,
        **asdict(opts),
    )
    print(
        f"wrote {args.out.rstrip('/')}/{args.name}.json: {m.num_parts} parts, "
        f"edge cut {m.edge_cut:.4f}"
    )
    return 0
