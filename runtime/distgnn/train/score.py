"""``distgnn score``: link-prediction scores of given node pairs from written embeddings.

The score is the link-prediction app's: the dot product of the two embeddings
(:func:`distgnn.train.link_prediction.score`); pairs are original node IDs.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from dataclasses import dataclass

import numpy as np

from distgnn import storage
from distgnn.errors import ConfigError

HELP = "score node pairs (link prediction) with embeddings written by inference"


@dataclass
class EmbeddingTable:
    """Embeddings of one node type, looked up by original node ID."""

    orig_id: np.ndarray  # sorted
    emb: np.ndarray  # rows in orig_id order

    @classmethod
    def load(cls, url: str, ntype: str | None = None) -> EmbeddingTable:
        from distgnn.train.infer_output import read_output

        out = read_output(url, ntype, ["orig_id", "embedding"])
        order = np.argsort(out["orig_id"], kind="stable")
        return cls(out["orig_id"][order], out["embedding"][order])

    def rows(self, ids: np.ndarray, what: str = "pairs") -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.searchsorted(self.orig_id, ids)
        pos = np.minimum(pos, max(self.orig_id.size - 1, 0))
        bad = (self.orig_id.size == 0) | (self.orig_id[pos] != ids)
        if np.any(bad):
            first = int(ids[np.flatnonzero(np.broadcast_to(bad, ids.shape))[0]])
            raise ConfigError(f"{what}: node {first} has no embedding in the output")
        return np.asarray(self.emb[pos])


def score_pairs(
    src_table: EmbeddingTable, pairs: np.ndarray, dst_table: EmbeddingTable | None = None
) -> np.ndarray:
    """Scores (dot products, float32) of ``pairs`` ``(P, 2)`` of original node IDs."""
    import torch

    from distgnn.sampling import PairGraph
    from distgnn.train.link_prediction import score

    p = np.asarray(pairs)
    if p.ndim != 2 or p.shape[1] != 2 or p.dtype.kind not in "iu":
        raise ConfigError(
            f"--pairs: expected an integer array of shape (P, 2), got {p.dtype}{p.shape}"
        )
    dst_table = dst_table or src_table
    hs = torch.from_numpy(src_table.rows(p[:, 0], "--pairs column 0"))
    hd = torch.from_numpy(dst_table.rows(p[:, 1], "--pairs column 1"))
    n = p.shape[0]
    h = torch.cat([hs, hd])
    ar = torch.arange(n)
    return score(h, PairGraph(ar, ar + n, 2 * n)).numpy().astype(np.float32)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--embeddings", required=True, help="inference output URL (its index.json)")
    p.add_argument("--pairs", required=True, help=".npy file (P, 2) of original node IDs")
    p.add_argument("--out", default=None, help="write the scores here (.npy); default: print")
    p.add_argument("--src-type", default=None, help="node type of column 0 (heterogeneous)")
    p.add_argument("--dst-type", default=None, help="node type of column 1 (default: src type)")


def main(args: argparse.Namespace) -> int:
    try:
        pairs = np.load(io.BytesIO(storage.read_bytes(args.pairs)), allow_pickle=False)
    except ValueError as e:
        raise ConfigError(f"--pairs: {args.pairs} is not a .npy array ({e})") from e
    from distgnn.train.infer_output import read_index

    types = sorted(read_index(args.embeddings)["node_types"])
    for flag, ntype in (("--src-type", args.src_type), ("--dst-type", args.dst_type)):
        if ntype is not None and ntype not in types:
            raise ConfigError(f"{flag}: node type {ntype!r} is not in the output ({types})")
    if args.src_type is None and len(types) > 1:
        raise ConfigError(
            f"--src-type: the output has node types {types}: pass --src-type (and --dst-type "
            "when column 1 is of another type)"
        )
    src = EmbeddingTable.load(args.embeddings, args.src_type)
    dst = src if args.dst_type in (None, args.src_type) else None
    if dst is None:
        dst = EmbeddingTable.load(args.embeddings, args.dst_type)
    scores = score_pairs(src, pairs, dst)
    if args.out:
        buf = io.BytesIO()
        np.save(buf, scores, allow_pickle=False)
        storage.write_bytes(args.out, buf.getvalue())
    else:
        for s in scores.tolist():
            sys.stdout.write(f"{s:.6g}\n")
    summary = {
        "pairs": int(scores.size),
        "mean_score": float(scores.mean()) if scores.size else 0.0,
    }
    sys.stderr.write(json.dumps(summary) + "\n")
    return 0
