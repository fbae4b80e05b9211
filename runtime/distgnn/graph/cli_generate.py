"""``distgnn generate``: write a deterministic synthetic benchmark graph."""

from __future__ import annotations

import argparse

HELP = "generate a power-law graph with nested communities as a folder of .npy"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=1_000_000, help="number of nodes (default 1000000)")
    p.add_argument("--avg-degree", type=float, default=12.0, help="average in-degree (default 12)")
    p.add_argument(
        "--feat-dim", type=int, default=100, help="float32 features per node (default 100)"
    )
    p.add_argument(
        "--communities",
        type=int,
        default=16,
        help="top-level communities, also the label classes (default 16)",
    )
    p.add_argument(
        "--group-sizes",
        default="64,2048",
        help="nested group sizes below the communities, smallest first (CSV; '' for none; "
        "default 64,2048)",
    )
    p.add_argument(
        "--locality",
        default="0.55,0.25,0.12",
        help="P(edge stays in its group) per group size, then the community (CSV; default "
        "0.55,0.25,0.12); '--group-sizes '' --locality 0.8' is a flat community model",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--out", required=True, help="output directory")


def main(args: argparse.Namespace) -> int:
    from distgnn.errors import ConfigError
    from distgnn.graph.generate import GenerateOptions, generate_graph, write_graph_dir

    try:
        sizes = tuple(int(x) for x in args.group_sizes.split(",") if x.strip())
        locality = tuple(float(x) for x in args.locality.split(",") if x.strip())
    except ValueError as e:
        raise ConfigError(f"--group-sizes / --locality: {e}") from None
    opts = GenerateOptions(
        args.nodes,
        args.avg_degree,
        args.feat_dim,
        args.communities,
        group_sizes=sizes,
        locality=locality,
        seed=args.seed,
    )
    write_graph_dir(generate_graph(opts), args.out)
    print(f"wrote {args.out}: {opts.nodes} nodes, {round(opts.nodes * opts.avg_degree)} edges")
    return 0
