"""Checkpoints at any fsspec URL: ``URL/ckpt-epoch-00007.pt`` after epoch 7.

Files are written with ``torch.save`` and read with ``torch.load(...,
weights_only=True)`` (tensors and plain containers only, never arbitrary pickles).
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from distgnn import storage
from distgnn.errors import StorageError
from distgnn.log import kv

log = logging.getLogger("distgnn.train")
_NAME = re.compile(r"ckpt-epoch-(\d+)\.pt$")


@dataclass
class Checkpoint:
    """What is saved: the epoch just finished and the state dicts."""

    epoch: int
    model: dict[str, Any]
    optimizer: dict[str, Any]
    sparse: dict[str, Any] = field(default_factory=dict)
    """the sparse embeddings: where their rows were saved (see
    :meth:`distgnn.train.sparse_emb.NodeEmbeddings.save`), or whole tables (older files)"""
    extra: dict[str, Any] = field(default_factory=dict)
    url: str = ""
    """where it was loaded from (set by :func:`load`)"""


def checkpoint_url(base: str, epoch: int) -> str:
    return storage.join(base, f"ckpt-epoch-{epoch:05d}.pt")


def save(base: str, ckpt: Checkpoint) -> str:
    buf = io.BytesIO()
    torch.save(
        {
            "epoch": ckpt.epoch,
            "model": ckpt.model,
            "optimizer": ckpt.optimizer,
            "sparse": ckpt.sparse,
            "extra": ckpt.extra,
        },
        buf,
    )
    url = checkpoint_url(base, ckpt.epoch)
    tmp = url + ".tmp"
    storage.write_bytes(tmp, buf.getvalue())
    fs, path = storage.get_fs(url)
    try:
        fs.mv(storage.get_fs(tmp)[1], path)
    except OSError as e:
        raise StorageError(f"{storage.redact(url)}: {e}") from e
    log.info("checkpoint saved", extra=kv(url=storage.redact(url), epoch=ckpt.epoch))
    return url


def latest(base: str) -> str | None:
    """URL of the checkpoint with the highest epoch under ``base``, or None."""
    fs, path = storage.get_fs(base)
    try:
        names = fs.ls(path, detail=False) if fs.exists(path) else []
    except OSError as e:
        raise StorageError(f"{storage.redact(base)}: {e}") from e
    best: tuple[int, str] | None = None
    for n in names:
        m = _NAME.search(str(n))
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), str(n).rsplit("/", 1)[-1])
    return None if best is None else storage.join(base, best[1])


def load(url: str) -> Checkpoint:
    data = storage.read_bytes(url)
    try:
        obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as e:  # torch raises UnpicklingError/RuntimeError for bad files
        raise StorageError(f"{storage.redact(url)}: not a valid checkpoint ({e})") from e
    if not isinstance(obj, dict) or "epoch" not in obj or "model" not in obj:
        raise StorageError(f"{storage.redact(url)}: not a DistGNN checkpoint")
    return Checkpoint(
        epoch=int(obj["epoch"]),
        model=obj["model"],
        optimizer=obj.get("optimizer", {}),
        sparse=obj.get("sparse", {}),
        extra=obj.get("extra", {}),
        url=url,
    )


def embedding_state(embs: list[Any], chunk: int = 1 << 16) -> dict[str, torch.Tensor]:
    """Full tables of ``DistEmbedding`` objects (by name), read in chunks: what a
    checkpoint's ``sparse`` part held before every trainer saved its own rows beside
    it (the built-in apps now do that; these whole tables are still read back)."""
    out: dict[str, torch.Tensor] = {}
    for e in embs:
        n = int(e.num_embeddings)
        rows = [e.tensor[torch.arange(i, min(i + chunk, n))] for i in range(0, n, chunk)]
        out[str(e.name)] = torch.cat(rows) if rows else torch.zeros(0, e.embedding_dim)
    return out


def restore_embeddings(embs: list[Any], state: dict[str, Any], chunk: int = 1 << 16) -> None:
    """Write tables saved by :func:`embedding_state` back into the ``DistEmbedding`` objects."""
    for e in embs:
        table = state.get(str(e.name))
        if table is None:
            raise StorageError(f"checkpoint has no embedding {e.name!r}")
        if tuple(table.shape) != (int(e.num_embeddings), int(e.embedding_dim)):
            raise StorageError(f"embedding {e.name!r}: checkpoint shape {tuple(table.shape)}")
        for i in range(0, int(e.num_embeddings), chunk):
            idx = torch.arange(i, min(i + chunk, int(e.num_embeddings)))
            e.tensor[idx] = table[idx]
