"""``trainers.gpus`` in local mode: one CUDA device per trainer, round-robin over the
devices this process sees (``CUDA_VISIBLE_DEVICES`` naming them as the environment does),
and no device with ``gpus: 1`` a one-line ConfigError before anything starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from distgnn.errors import ConfigError
from distgnn.local import gpus, runner
from distgnn.local.plan import LocalPlan


@pytest.mark.parametrize(
    ("replicas", "devices", "want"),
    [
        (2, ["0", "1"], ["0", "1"]),
        (3, ["0", "1"], ["0", "1", "0"]),  # more trainers than GPUs: shared
        (1, ["0", "1", "2", "3"], ["0"]),
        (4, ["GPU-a1"], ["GPU-a1"] * 4),
    ],
)
def test_each_trainer_gets_one_gpu_round_robin(
    replicas: int, devices: list[str], want: list[str]
) -> None:
    assert gpus.assign(replicas, devices) == want


@pytest.mark.parametrize(
    ("env", "count", "want"),
    [
        ({}, 2, ["0", "1"]),
        ({"CUDA_VISIBLE_DEVICES": "2,3"}, 2, ["2", "3"]),  # as this process's list names them
        ({"CUDA_VISIBLE_DEVICES": " 5, GPU-x "}, 2, ["5", "GPU-x"]),
        ({"CUDA_VISIBLE_DEVICES": "4,5,6"}, 1, ["4"]),  # torch sees fewer (one invalid)
        ({"CUDA_VISIBLE_DEVICES": ""}, 0, []),
        ({}, 0, []),
    ],
)
def test_the_devices_are_named_as_the_environment_names_them(
    env: dict[str, str], count: int, want: list[str]
) -> None:
    assert gpus.visible_devices(env, count) == want


def test_gpus_0_sets_nothing_and_gpus_1_without_a_device_is_a_config_error() -> None:
    assert gpus.trainer_devices(0, 2, {}, count=0) is None
    assert gpus.trainer_devices(1, 3, {"CUDA_VISIBLE_DEVICES": "1,3"}, count=2) == ["1", "3", "1"]
    with pytest.raises(ConfigError) as ei:
        gpus.trainer_devices(1, 2, {"CUDA_VISIBLE_DEVICES": ""}, count=0)
    msg = str(ei.value)
    assert msg.startswith("spec.trainers.gpus: 1 asks for a GPU per trainer, but this machine")
    assert "(CUDA_VISIBLE_DEVICES='')" in msg and "set trainers.gpus to 0" in msg
    assert "\n" not in msg


def test_no_cuda_here_with_gpus_1_fails_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """This machine's torch sees no CUDA device with ``CUDA_VISIBLE_DEVICES`` empty."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    plan = LocalPlan(kind="DistGNNJob", name="j", trainer_argv=["x"], replicas=2, gpus=1)
    with pytest.raises(ConfigError, match=r"spec\.trainers\.gpus"):
        runner.job_devices(plan)
    assert runner.job_devices(dataclasses.replace(plan, gpus=0)) is None


def test_the_trainers_get_their_cuda_visible_devices(tmp_path: Path) -> None:
    plan = LocalPlan(kind="DistGNNJob", name="j", trainer_argv=["x"], replicas=3, gpus=1)
    servers = runner.Servers(["127.0.0.1:1"], str(tmp_path / "tok"), "file:///m.json")
    ports = runner.TrainerPorts(1, 2)
    specs = runner.trainer_specs(plan, servers, tmp_path, ports, devices=["0", "1", "0"])
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in specs] == ["0", "1", "0"]
    # the job's own podTemplate.env wins, as every variable of it does
    plan = dataclasses.replace(plan, env={"CUDA_VISIBLE_DEVICES": "7"})
    specs = runner.trainer_specs(plan, servers, tmp_path, ports, devices=["0", "1", "0"])
    assert {s.env["CUDA_VISIBLE_DEVICES"] for s in specs} == {"7"}
