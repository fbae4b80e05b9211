"""``distgnn inspect``: summarise a partition manifest."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

HELP = "show a partition manifest: sizes, halo, edge cut, balance"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("manifest", metavar="MANIFEST", help="URL of NAME.json")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def summary(m: Any) -> dict[str, Any]:
    """The ``--json`` object for a Manifest."""
    return {
        "graph_name": m.graph_name,
        "num_nodes": m.num_nodes,
        "num_edges": m.num_edges,
        "num_parts": m.num_parts,
        "edge_cut": m.edge_cut,
        "node_types": m.node_types,
        "edge_types": m.etype_names,
        "options": asdict(m.options),
        "parts": [
            {
                "part_id": p.part_id,
                "owned_nodes": p.owned_nodes,
                "halo_nodes": p.halo_nodes,
                "edges": p.edges,
                "train_nodes": p.train_nodes,
                "bytes": sum(f.bytes for f in p.files.values()),
            }
            for p in m.parts
        ],
    }


def refuse_folder(url: str) -> None:
    """A local folder given for its manifest (``distgnn inspect OUT``, the ``--out`` of
    ``distgnn partition``, or ``OUT/NAME``): a ConfigError naming the manifests there."""
    from distgnn import storage
    from distgnn.errors import ConfigError

    path = Path(storage.local_path(url)) if storage.is_local(url) else None
    if path is None or not path.is_dir():
        return
    found = sorted(path.glob("*.json"))
    if not found and path.with_suffix(".json").is_file():
        found = [path.with_suffix(".json")]
    try_ = f"; try {', '.join(str(f) for f in found[:3])}" if found else ""
    raise ConfigError(f"{url}: a folder, not a partition manifest (OUT/NAME.json){try_}")


def main(args: argparse.Namespace) -> int:
    from distgnn.partition.loader import load_manifest

    refuse_folder(args.manifest)
    m = load_manifest(args.manifest)
    s = summary(m)
    if args.json:
        print(json.dumps(s))
        return 0
    print(
        f"graph {m.graph_name}: {m.num_nodes} nodes, {m.num_edges} edges, "
        f"{m.num_parts} parts, edge cut {m.edge_cut:.4f}"
    )
    print(f"types: nodes {', '.join(m.node_types)}; edges {', '.join(m.etype_names)}")
    print(f"options: {s['options']}")
    hdr = f"{'part':>4} {'owned':>10} {'halo':>10} {'edges':>12} {'train':>8} {'MiB':>9}"
    print(hdr)
    print("-" * len(hdr))
    for p in s["parts"]:
        print(
            f"{p['part_id']:>4} {p['owned_nodes']:>10} {p['halo_nodes']:>10} "
            f"{p['edges']:>12} {p['train_nodes']:>8} {p['bytes'] / 2**20:>9.1f}"
        )
    return 0
