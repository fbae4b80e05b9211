"""Trainer process tuning: thread count and allocator."""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path

import pytest
import torch

from distgnn.cpus import available_cpus
from distgnn.errors import ConfigError
from distgnn.local import runner
from distgnn.local.plan import LocalPlan
from distgnn.train.loop import epoch_batches
from distgnn.train.proc import (
    configure_trainer_process,
    trainer_cpus,
    trainer_threads,
    tune_allocator,
    use_prefetch,
)


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


def test_cpu_quota_caps_available_cpus(tmp_path: Path) -> None:
    """A container's ``limits.cpu`` (cgroup v2 ``cpu.max``), not the node's cores, bounds
    what a trainer counts on; fractions round up; no quota leaves the affinity."""
    f = tmp_path / "cpu.max"
    affinity = len(os.sched_getaffinity(0))
    f.write_text("max 100000\n")
    assert available_cpus(str(f)) == affinity
    f.write_text("150000 100000\n")  # limits.cpu: 1500m
    assert available_cpus(str(f)) == min(affinity, 2)
    f.write_text("50000 100000\n")
    assert available_cpus(str(f)) == 1
    f.write_text("garbage\n")
    assert available_cpus(str(f)) == affinity
    assert available_cpus(str(tmp_path / "missing")) == affinity


def test_prefetch_thread_only_beside_idle_cpus_or_an_accelerator() -> None:
    """``auto``: a trainer whose torch threads take its whole CPU share pulls in turn
    (the thread would take turns with compute); a spare CPU or a GPU prefetches;
    ``on``/``off`` force; a typo is a clear error."""
    assert trainer_cpus({"LOCAL_WORLD_SIZE": "2"}, cpus=2) == 1
    assert not use_prefetch(1, {"LOCAL_WORLD_SIZE": "2"}, cpus=2)
    assert not use_prefetch(2, {}, cpus=2)
    assert use_prefetch(1, {}, cpus=2)
    assert use_prefetch(2, {"LOCAL_WORLD_SIZE": "2"}, cpus=8)
    assert use_prefetch(1, {"LOCAL_WORLD_SIZE": "2"}, cpus=2, accelerator=True)
    assert use_prefetch(1, {"DISTGNN_PREFETCH": "on"}, cpus=1)
    assert not use_prefetch(1, {"DISTGNN_PREFETCH": "OFF"}, cpus=64, accelerator=True)
    assert use_prefetch(1, {"DISTGNN_PREFETCH": " auto "}, cpus=8)
    with pytest.raises(ConfigError, match="DISTGNN_PREFETCH='sometimes'"):
        use_prefetch(1, {"DISTGNN_PREFETCH": "sometimes"}, cpus=8)


def _batches_seen(prefetch_thread: bool) -> tuple[list[tuple[int, float]], set[str]]:
    threads: set[str] = set()

    def load(b: int) -> int:
        threads.add(threading.current_thread().name)
        return b * 10

    with epoch_batches([1, 2, 3], 4, load, prefetch_thread=prefetch_thread) as it:
        got = list(it)
    return got, threads


def test_epoch_batches_in_turn_or_prefetched_give_the_same_steps() -> None:
    """Both ways give the same padded steps; only the prefetch way loads in a thread."""
    in_turn, t1 = _batches_seen(False)
    ahead, t2 = _batches_seen(True)
    assert in_turn == ahead == [(10, 1.0), (20, 1.0), (30, 1.0), (30, 0.0)]
    assert t1 == {threading.current_thread().name}
    assert t2 == {"distgnn-prefetch"}


def test_local_mode_tells_trainers_how_many_share_the_machine(tmp_path: Path) -> None:
    """Local mode's trainers share this machine: each gets LOCAL_WORLD_SIZE (what the
    prefetch decision divides the CPUs by) and its share of threads; a manifest's own
    env still wins."""
    plan = LocalPlan(kind="DistGNNJob", name="j", trainer_argv=["x"], replicas=3)
    servers = runner.Servers(["127.0.0.1:1"], str(tmp_path / "tok"), "file:///m.json")
    specs = runner.trainer_specs(plan, servers, tmp_path, runner.TrainerPorts(1, 2))
    assert [s.env["LOCAL_WORLD_SIZE"] for s in specs] == ["3", "3", "3"]
    assert {s.env["OMP_NUM_THREADS"] for s in specs} == {str(max(1, available_cpus() // 3))}
    plan = dataclasses.replace(plan, env={"LOCAL_WORLD_SIZE": "1"})
    specs = runner.trainer_specs(plan, servers, tmp_path, runner.TrainerPorts(1, 2))
    assert specs[0].env["LOCAL_WORLD_SIZE"] == "1"


def test_local_mode_passes_the_feature_cache_budget(tmp_path: Path) -> None:
    """``trainers.featureCacheMB`` reaches every local trainer (off by default)."""
    plan = LocalPlan(kind="DistGNNJob", name="j", trainer_argv=["x"], replicas=2)
    servers = runner.Servers(["127.0.0.1:1"], str(tmp_path / "tok"), "file:///m.json")
    specs = runner.trainer_specs(plan, servers, tmp_path, runner.TrainerPorts(1, 2))
    assert all("DISTGNN_FEATURE_CACHE_MB" not in s.env for s in specs)
    plan = dataclasses.replace(plan, feature_cache_mb=64)
    specs = runner.trainer_specs(plan, servers, tmp_path, runner.TrainerPorts(1, 2))
    assert [s.env["DISTGNN_FEATURE_CACHE_MB"] for s in specs] == ["64", "64"]
