"""Metrics: accuracy, ROC AUC, MRR, and writing the final metrics JSON."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from distgnn import contract, storage
from distgnn.train.finish import write_termination_log


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    if labels.numel() == 0:
        return 0.0
    return float((logits.argmax(1) == labels).float().mean().item())


def roc_auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Probability that a positive scores above a negative (ties count half)."""
    pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    scores = np.concatenate([pos, neg])
    order = scores.argsort(kind="mergesort")
    ranks = np.empty(scores.size, dtype=np.float64)
    ranks[order] = np.arange(1, scores.size + 1)
    # average ranks of ties
    s = scores[order]
    _uniq, start, counts = np.unique(s, return_index=True, return_counts=True)
    avg = start + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    r_pos = ranks[: pos.size].sum()
    return float((r_pos - pos.size * (pos.size + 1) / 2.0) / (pos.size * neg.size))


def mrr(pos: np.ndarray, neg: np.ndarray) -> float:
    """Mean reciprocal rank of each positive among its own row of negatives ``(P, K)``."""
    pos = np.asarray(pos, np.float64).reshape(-1, 1)
    neg = np.asarray(neg, np.float64).reshape(pos.shape[0], -1)
    rank = 1 + (neg > pos).sum(1) + 0.5 * (neg == pos).sum(1)
    return float((1.0 / rank).mean())


def random_mrr(k: int) -> float:
    """Expected MRR of random scores with ``k`` negatives per positive."""
    return float(np.mean(1.0 / np.arange(1, k + 2)))


def publish(metrics: Mapping[str, Any], metrics_file: str | None) -> str:
    """Write the metrics JSON to the metrics file and termination log; print it last on stdout."""
    line = json.dumps(dict(metrics), sort_keys=True)
    if metrics_file:
        storage.write_bytes(metrics_file, (line + "\n").encode())
    term = os.environ.get(contract.ENV_TERMINATION_LOG)
    if term:
        write_termination_log(term, line)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return line
