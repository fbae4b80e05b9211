"""DGL's ``DistDataLoader(dataset, batch_size, shuffle=False, collate_fn=None,
drop_last=False, queue_size=None)``: mini-batches of any indexable dataset.

``collate_fn`` is arbitrary Python, so it runs in the trainer process (DGL pickles it
to its sampler processes; DistGNN sends no code between processes). Batches are
collated by a background thread ``queue_size`` batches ahead of the consumer.
For graph sampling in sampler processes use ``distgnn.dataloading.DistNodeDataLoader``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from distgnn.errors import ConfigError
from distgnn.sampling.loader import prefetch


def default_collate(items: list[Any]) -> Any:
    """Tensors and numbers stacked into one tensor; anything else left as the list."""
    if items and all(isinstance(x, torch.Tensor) for x in items):
        return torch.stack(items)
    if items and all(isinstance(x, int | float | np.integer | np.floating) for x in items):
        return torch.as_tensor(np.asarray(items))
    return items


class DistDataLoader:
    """Iterate ``collate_fn([dataset[i] for i in batch])`` over the dataset; one epoch per
    ``iter()``, reshuffled each epoch when ``shuffle`` (torch's random state)."""

    def __init__(
        self,
        dataset: Sequence[Any] | Any,
        batch_size: int,
        shuffle: bool = False,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        drop_last: bool = False,
        queue_size: int | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size: {batch_size!r} must be an int >= 1")
        if queue_size is not None and queue_size < 1:
            raise ConfigError(f"queue_size: {queue_size} must be >= 1")
        self.dataset, self.batch_size = dataset, batch_size
        self.shuffle, self.drop_last = shuffle, drop_last
        self.collate_fn = collate_fn or default_collate
        self.queue_size = queue_size or 1

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _index_batches(self) -> Iterator[list[int]]:
        n = len(self.dataset)
        order = torch.randperm(n) if self.shuffle else torch.arange(n)
        for b in range(len(self)):
            yield order[b * self.batch_size : (b + 1) * self.batch_size].tolist()

    def _collate(self, idx: list[int]) -> Any:
        return self.collate_fn([self.dataset[i] for i in idx])

    def __iter__(self) -> Iterator[Any]:
        return prefetch(self._index_batches(), self._collate, depth=self.queue_size)
