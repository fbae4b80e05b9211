"""DGL's distributed examples (rewritten under examples/dgl with DGL's structure and calls)
run as DistGNNJob user commands with `distgnn run`: real partitioning, graph servers and
DDP trainers. Accuracy thresholds are ones an untrained or miswired model fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

RUN_TIMEOUT = 600


@pytest.fixture(scope="module")
def examples(repo_root: Path) -> Path:
    return repo_root / "examples" / "dgl"


@pytest.fixture(scope="module")
def data_dir(examples: Path, cora_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dgl-data")
    cmd = [sys.executable, str(examples / "prepare_data.py"), "--cora", str(cora_path)]
    subprocess.run([*cmd, "--out", str(out)], check=True, timeout=120, capture_output=True)
    return out


def run_example(
    examples: Path, name: str, data: Path, tmp_path: Path, args: dict[str, str] | None = None
) -> str:
    """Run the shipped manifest (its graph and script by absolute path, ``args`` replacing
    flag values or adding flags); returns the job's stderr (every process's output)."""
    job = yaml.safe_load((examples / f"{name}.yaml").read_text(encoding="utf-8"))
    spec = job["spec"]
    spec["graph"]["source"]["url"] = str(data / Path(spec["graph"]["source"]["url"]).name)
    tr = spec["trainers"]
    assert tr["command"][0] == "python"
    tr["command"] = [sys.executable, str(examples / tr["command"][1])]
    argv = [str(a) for a in tr["args"]]
    for flag, value in (args or {}).items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag] if value == "" else [flag, value]
    tr["args"] = argv
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    cmd = [sys.executable, "-m", "distgnn.cli", "--log-format", "text", "run", str(path)]
    res = subprocess.run(
        [*cmd, "--grace", "5", "--workdir", str(tmp_path / ".distgnn")],
        check=False,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        env=dict(os.environ),
    )
    assert res.returncode == 0, res.stderr[-4000:]
    assert '"status": "Succeeded"' in res.stdout.strip().splitlines()[-1]
    return res.stderr


def test_graphsage_node_classification_example(
    examples: Path, data_dir: Path, tmp_path: Path
) -> None:
    err = run_example(examples, "node_classification", data_dir, tmp_path)
    # every trainer scores its half of the test nodes (DGL's node_split, force_even)
    accs = [float(a) for a in re.findall(r"TestAccuracy (\d\.\d+)", err)]
    assert len(accs) == 2, err[-3000:]
    assert sum(accs) / 2 >= 0.76, accs  # DGL's GraphSAGE on Cora: ~0.80


def test_graphsage_link_prediction_example(examples: Path, data_dir: Path, tmp_path: Path) -> None:
    # --debug: the script asserts that no batch edge appears in its sampled blocks
    err = run_example(
        examples, "link_prediction", data_dir, tmp_path, {"--num_epochs": "6", "--debug": ""}
    )
    m = re.findall(r"eval acc (\d\.\d+); test acc (\d\.\d+)", err)
    assert len(m) == 1, err[-3000:]
    # logistic regression on the embeddings: untrained ones give ~0.41; trained (6 epochs,
    # unseeded) 0.57-0.68 over 8 runs (median 0.63), and one CI run 0.533: 0.55 failed it
    assert float(m[0][1]) >= 0.50, m


def test_rgcn_node_classification_example(examples: Path, data_dir: Path, tmp_path: Path) -> None:
    # 10 epochs, not the manifest's 40: test accuracy levels off after 2-3 (measured: 0.79,
    # 0.81, 0.79 after 10; 0.84 after 40, 0.80-0.85 from epoch 2 on in that run)
    err = run_example(
        examples, "rgcn_node_classification", data_dir, tmp_path, {"--n-epochs": "10"}
    )
    m = re.findall(r"Val Acc (\d\.\d+), Test Acc (\d\.\d+)", err)
    assert len(m) == 10, err[-3000:]  # rank 0 evaluates after every epoch
    # the example is unseeded (as DGL's): over 22 runs (round 15) 0.50-0.75 after epoch 1
    # and 0.67-0.84 after 10 (median 0.78; ~1 run in 10 plateaus near 0.67-0.71, which
    # failed the earlier 0.72 bound); an MLP on the paper features alone gets ~0.55-0.6,
    # so relations that feed wrong rows fail these
    test = [float(t) for _, t in m]
    assert max(test) >= 0.65 and test[-1] >= 0.62, m
