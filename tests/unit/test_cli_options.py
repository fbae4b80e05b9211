"""CLI options a new user reads: help text everywhere, defaults that match the manifests."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from distgnn import cli
from distgnn.api.types import Partitioning
from distgnn.local.plan import plan_from_manifest


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_option_has_help_text(command: str) -> None:
    missing = [
        "/".join(a.option_strings) or a.dest
        for a in _subparser(command)._actions
        if not isinstance(a, argparse._HelpAction) and not a.help
    ]
    assert missing == []


def test_run_help_states_the_real_default_workdir(tmp_path: Path) -> None:
    text = _subparser("run").format_help()
    assert "MANIFEST_DIR/.distgnn)" in " ".join(text.split())
    obj = {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "j"},
        "spec": {
            "graph": {"partitions": {"manifestURL": "g.json"}},
            "trainers": {"command": ["true"]},
        },
    }
    _, workdir = plan_from_manifest(obj, tmp_path / "job.yaml", None)
    assert workdir == tmp_path / ".distgnn"


def test_partition_balances_train_nodes_by_default_like_manifests() -> None:
    p = _subparser("partition")
    base = ["g.npz", "--num-parts", "2", "--out", "o", "--name", "n"]
    assert p.parse_args(base).balance_train is True
    assert Partitioning().balance_train is True
    assert p.parse_args([*base, "--no-balance-train"]).balance_train is False
    assert p.parse_args([*base, "--balance-train"]).balance_train is True


def test_partition_command_writes_balance_train_on(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "g.npz",
        src=rng.integers(0, 40, 200),
        dst=rng.integers(0, 40, 200),
        train_mask=rng.random(40) < 0.3,
    )
    rc = cli.main(["partition", str(tmp_path / "g.npz"), "--num-parts", "2",
                   "--out", str(tmp_path / "o"), "--name", "g"])  # fmt: skip
    assert rc == 0
    import json

    m = json.loads((tmp_path / "o" / "g.json").read_text())
    assert m["options"]["balance_train"] is True


def test_partition_command_of_a_manifest_parses_to_the_same_options() -> None:
    """What the operator's partitioning Job runs means what the manifest says."""
    from distgnn.api import parse_job, partition_command

    p = _subparser("partition")
    for balance in (True, False):
        job = parse_job(
            {
                "apiVersion": "distgnn.dev/v1alpha1",
                "kind": "DistGNNJob",
                "metadata": {"name": "j"},
                "spec": {
                    "graph": {"source": {"url": "s3://b/g.npz"}},
                    "partitioning": {"balanceTrain": balance},
                    "trainers": {"app": {"name": "node-classification"}},
                },
            }
        )
        spec = job.spec
        argv = partition_command("j", spec.graph, spec.partitioning, "s3://b/out")
        args = p.parse_args(argv[argv.index("partition") + 1 :])
        assert args.balance_train is balance
