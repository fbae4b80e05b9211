"""How ``distgnn train`` ends: two real DDP trainers whose interpreter teardown would
abort (a planted ``__del__``, standing in for a native static-destructor race) still
exit 0 with their results and structured log lines, because the trainer ends the process
itself (``distgnn.train.finish.end_process``) once its work is done."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trainers import run_trainers

# what the ``distgnn`` console script does (sys.exit(main())), plus the planted crash
ENTRY = """
import os, resource, sys
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the planted abort leaves no core file

class TeardownCrash:
    def __del__(self):
        os.abort()

CRASH = TeardownCrash()  # freed, and aborts, only in interpreter teardown
sys.argv = ["distgnn", *sys.argv[1:]]
from distgnn.cli import main
sys.exit(main())
"""


def test_finished_trainers_exit_0_with_results_and_last_log_line(
    cora_path: Path, tmp_path: Path
) -> None:
    cmd = [sys.executable, "-c", ENTRY, "train", "node-classification", "--epochs", "1",
           "--hidden", "16", "--fanouts", "5,5", "--batch-size", "512"]  # fmt: skip
    env = {"DISTGNN_MANIFEST": str(cora_path), "PYTHONUNBUFFERED": ""}  # stdout block-buffered
    res = run_trainers([], 2, env, tmp_path, timeout=240, per_rank_argv=[cmd, cmd])
    assert res.returncodes == [0, 0], res.explain()
    assert res.metrics is not None and res.metrics["app"] == "node-classification"
    assert json.loads(res.stdout[0].splitlines()[-1]) == res.metrics  # printed last, not lost
    epochs = [json.loads(x) for x in res.stderr[0].splitlines() if x.startswith("{")]
    assert [r["epoch"] for r in epochs if r["msg"] == "epoch"] == [0]  # structured log kept
