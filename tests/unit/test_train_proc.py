"""Trainer process tuning: thread count and allocator."""

from __future__ import annotations

import torch

from distgnn.train.proc import configure_trainer_process, trainer_threads, tune_allocator


def test_trainer_threads() -> None:
    assert trainer_threads({"OMP_NUM_THREADS": "3"}, cpus=16) == 3
    assert trainer_threads({"OMP_NUM_THREADS": "3", "LOCAL_WORLD_SIZE": "8"}, cpus=16) == 3
    assert trainer_threads({"LOCAL_WORLD_SIZE": "4"}, cpus=16) == 4
    assert trainer_threads({"LOCAL_WORLD_SIZE": "4"}, cpus=2) == 1
    assert trainer_threads({}, cpus=6) == 6
    assert trainer_threads({"OMP_NUM_THREADS": "x", "LOCAL_WORLD_SIZE": "0"}, cpus=2) == 2


def test_configure_trainer_process_sets_torch_threads() -> None:
    before = torch.get_num_threads()
    try:
        assert configure_trainer_process({"OMP_NUM_THREADS": "1"}) == 1
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert isinstance(tune_allocator(), bool)
