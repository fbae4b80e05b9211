"""The shipped user-script example runs as documented: ``distgnn run
examples/custom-script.yaml`` trains with ``examples/train_custom.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "examples" / "custom-script.yaml"


def test_docstring_and_manifest_name_the_script_relative_to_the_manifest() -> None:
    spec = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))["spec"]
    script = spec["trainers"]["command"][1]
    assert (MANIFEST.parent / script).is_file()  # user commands run in the manifest's folder
    doc = (REPO / "examples" / "train_custom.py").read_text(encoding="utf-8")
    assert "distgnn run examples/custom-script.yaml" in doc
    assert "command: [python, examples/train_custom.py]" not in doc


def test_custom_script_example_runs(tmp_path: Path, cora_path: Path) -> None:
    assert cora_path.exists()
    res = subprocess.run(
        [sys.executable, "-m", "distgnn.cli", "--log-format", "text", "run", str(MANIFEST),
         "--workdir", str(tmp_path / "wd"), "--state-dir", str(tmp_path / "state"),
         "--grace", "5"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-5000:]
    metrics = json.loads(res.stdout.strip().splitlines()[-1])
    assert metrics["epochs"] == 5 and metrics["test_accuracy"] > 0.6, metrics
