"""``distgnn generate``: write a deterministic synthetic benchmark graph."""

from __future__ import annotations

import argparse

HELP = "generate a power-law graph with nested communities as a folder of .npy"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--avg-degree", type=float, default=12.0)
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--communities", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output directory")


def main(args: argparse.Namespace) -> int:
    from distgnn.errors import ConfigError
    from distgnn.graph.generate import GenerateOptions, generate_graph, write_graph_dir

    if args.nodes < 2 or args.avg_degree <= 0 or args.feat_dim < 0 or args.communities < 1:
        raise ConfigError("--nodes >= 2, --avg-degree > 0, --feat-dim >= 0, --communities >= 1")
    opts = GenerateOptions(
        args.nodes, args.avg_degree, args.feat_dim, args.communities, seed=args.seed
    )
    write_graph_dir(generate_graph(opts), args.out)
    print(f"wrote {args.out}: {opts.nodes} nodes, {round(opts.nodes * opts.avg_degree)} edges")
    return 0
