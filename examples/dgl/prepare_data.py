"""Build the graphs the DGL example ports train on, in DistGNN's input format.

* ``data/cora.npz``: Cora (public split) with the field names DGL's distributed
  GraphSAGE examples read: ``features``, ``labels``, ``train_mask``, ``val_mask``,
  ``test_mask``.
* ``data/cora-hetero.npz``: a small heterogeneous graph for DGL's R-GCN example, derived
  from Cora: ``paper`` nodes (Cora's nodes, features ``feat``, ``labels``, masks) and
  synthetic ``author`` nodes (features ``feat``: the mean of their papers' features).
  Each author has a home topic (a Cora class) and writes mostly papers of that topic,
  so authors carry label signal. Edge types:
  ``paper:cites:paper`` (Cora's edges), ``author:writes:paper`` and its reverse
  ``paper:written-by:author``. Every paper has a citation and an author, every author
  a paper, so no node lacks in-edges of a relation into its type. Targets for the typed
  task apps (``examples/cora-hetero-node-regression.yaml``,
  ``examples/cora-hetero-edge-classification.yaml``): paper data ``target`` (float32,
  [N, 7]: the class mix of the papers its authors wrote, i.e. the mean one-hot class
  over every (author of the paper, paper of that author) pair); on ``paper:cites:paper``
  the edge data of ``cora-tasks.npz`` (below): ``label`` (same class), ``target`` (the
  dot product of the two papers' class-share vectors) and a seeded random 60/20/20 edge
  split (``train_mask``, ``val_mask``, ``test_mask``).
* ``data/cora-tasks.npz``: Cora with derived targets for the node-regression,
  edge-classification and edge-regression apps (``examples/cora-node-regression.yaml``,
  ``examples/cora-edge-classification.yaml``, ``examples/cora-edge-regression.yaml``;
  Cora itself has none): node data ``target`` (float32, [N, 7]: the share of each class
  among a node's in-neighbours, i.e. the degree-normalised mean of its neighbours'
  one-hot labels) with a seeded random 60/20/20 node split (``train_mask``,
  ``val_mask``, ``test_mask``); edge data ``label`` (1 when an edge's two endpoints have
  the same class, else 0) and ``target`` (float32, [E]: the dot product of the two
  endpoints' class-share vectors, i.e. the chance that a random in-neighbour of one and
  a random in-neighbour of the other have the same class; 0 to 1, mean 0.75) with a
  seeded random 60/20/20 edge split (edge data ``train_mask``, ``val_mask``,
  ``test_mask``). Cora's features ``feat`` and class ``label`` are kept.

Run once before the example jobs (as DGL's ``partition_graph.py`` step)::

    python examples/dgl/prepare_data.py [--cora ../shared/datasets/cora.npz]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_CORA = HERE.parent.parent.parent / "shared" / "datasets" / "cora.npz"


def homogeneous(cora: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cora with DGL's example field names."""
    return {
        "src": cora["src"],
        "dst": cora["dst"],
        "features": cora["feat"],
        "labels": cora["label"],
        "train_mask": cora["train_mask"],
        "val_mask": cora["val_mask"],
        "test_mask": cora["test_mask"],
    }


def heterogeneous(
    cora: dict[str, np.ndarray], num_authors: int = 900, purity: float = 0.8, seed: int = 0
) -> dict[str, np.ndarray]:
    """Papers and authors (see the module doc); ``purity``: share of an author's papers
    on their home topic."""
    rng = np.random.default_rng(seed)
    labels = cora["label"].astype(np.int64)
    n_papers, n_classes = labels.size, int(labels.max()) + 1
    home = rng.integers(0, n_classes, num_authors)
    by_topic = [np.flatnonzero(home == c) for c in range(n_classes)]
    writer, paper = [], []
    for p in range(n_papers):  # one or two authors per paper
        for _ in range(1 + int(rng.random() < 0.5)):
            pool = by_topic[labels[p]] if rng.random() < purity else np.arange(num_authors)
            writer.append(int(rng.choice(pool)))
            paper.append(p)
    lonely = np.setdiff1d(np.arange(num_authors), writer)
    papers_of = [np.flatnonzero(labels == c) for c in range(n_classes)]
    for a in lonely:  # every author writes at least one paper of their topic
        writer.append(int(a))
        paper.append(int(rng.choice(papers_of[home[a]])))
    w, p_ = np.asarray(writer, np.int64), np.asarray(paper, np.int64)
    feat = cora["feat"].astype(np.float32)
    author_feat = np.zeros((num_authors, feat.shape[1]), np.float32)
    np.add.at(author_feat, w, feat[p_])
    author_feat /= np.bincount(w, minlength=num_authors)[:, None]
    cites = (cora["src"].astype(np.int64), cora["dst"].astype(np.int64))
    return {
        **typed_targets(labels, cites, (w, p_), num_authors, seed),
        "num_nodes/paper": np.array(n_papers),
        "num_nodes/author": np.array(num_authors),
        "edges/paper:cites:paper/src": cora["src"].astype(np.int64),
        "edges/paper:cites:paper/dst": cora["dst"].astype(np.int64),
        "edges/author:writes:paper/src": w,
        "edges/author:writes:paper/dst": p_,
        "edges/paper:written-by:author/src": p_,
        "edges/paper:written-by:author/dst": w,
        "ndata/paper/feat": cora["feat"],
        "ndata/author/feat": author_feat,
        "ndata/paper/labels": labels,
        "ndata/paper/train_mask": cora["train_mask"],
        "ndata/paper/val_mask": cora["val_mask"],
        "ndata/paper/test_mask": cora["test_mask"],
    }


def typed_targets(
    labels: np.ndarray,
    cites: tuple[np.ndarray, np.ndarray],
    writes: tuple[np.ndarray, np.ndarray],
    num_authors: int,
    seed: int,
) -> dict[str, np.ndarray]:
    """The typed task apps' targets (see the module doc): of the papers, from the
    ``writes`` edges (author, paper); of the ``cites`` edges (source, destination)."""
    writer, paper = writes
    n, k = labels.size, int(labels.max()) + 1
    mix = np.zeros((num_authors, k), np.float32)  # each author's class mix of their papers
    np.add.at(mix, (writer, labels[paper]), 1.0)
    target = np.zeros((n, k), np.float32)  # summed over the paper's authors
    np.add.at(target, paper, mix[writer])
    target /= np.maximum(target.sum(1, keepdims=True), 1e-9)
    src, dst = cites
    share = class_share(src, dst, labels)
    et = "edata/paper:cites:paper"
    out = {
        "ndata/paper/target": target,
        f"{et}/label": (labels[src] == labels[dst]).astype(np.int64),
        f"{et}/target": (share[src] * share[dst]).sum(1, dtype=np.float32),
    }
    return out | {f"{et}/{m}": v for m, v in split_masks(src.size, seed + 2).items()}


def class_share(src: np.ndarray, dst: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``[N, k]``: the share of each class among a node's in-neighbours."""
    share = np.zeros((labels.size, int(labels.max()) + 1), np.float32)
    np.add.at(share, (dst, labels[src]), 1.0)
    return share / np.maximum(share.sum(1, keepdims=True), 1.0)


def split_masks(n: int, seed: int) -> dict[str, np.ndarray]:
    """A random 60/20/20 split of ``n`` rows as three boolean masks."""
    order = np.random.default_rng(seed).permutation(n)
    a, b = int(n * 0.6), int(n * 0.8)
    masks = {k: np.zeros(n, bool) for k in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][order[:a]] = True
    masks["val_mask"][order[a:b]] = True
    masks["test_mask"][order[b:]] = True
    return masks


def tasks(cora: dict[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """Cora with a node-regression target, edge labels and an edge-regression target
    (see the module doc)."""
    src, dst = cora["src"].astype(np.int64), cora["dst"].astype(np.int64)
    labels = cora["label"].astype(np.int64)
    share = class_share(src, dst, labels)
    out = {"src": src, "dst": dst, "feat": cora["feat"], "label": labels, "target": share}
    out |= split_masks(labels.size, seed)
    out["edata/label"] = (labels[src] == labels[dst]).astype(np.int64)
    out["edata/target"] = (share[src] * share[dst]).sum(1, dtype=np.float32)
    out |= {f"edata/{k}": v for k, v in split_masks(src.size, seed + 1).items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cora", default=str(DEFAULT_CORA), help="Cora in DistGNN's .npz format")
    ap.add_argument("--out", default=str(HERE / "data"), help="output folder")
    args = ap.parse_args()
    if not Path(args.cora).is_file():
        ap.error(f"--cora: {args.cora} does not exist (the shared datasets beside the checkout)")
    with np.load(args.cora, allow_pickle=False) as z:
        cora = {k: z[k] for k in z.files}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "cora.npz", **homogeneous(cora))
    np.savez(out / "cora-hetero.npz", **heterogeneous(cora))
    np.savez(out / "cora-tasks.npz", **tasks(cora))
    print(f"wrote {out / 'cora.npz'}, {out / 'cora-hetero.npz'} and {out / 'cora-tasks.npz'}")


if __name__ == "__main__":
    main()
