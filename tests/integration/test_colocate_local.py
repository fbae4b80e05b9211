"""``distgnn run`` with ``trainers.colocate``: each trainer reads its partition's rows
and samples its partition's seeds from its server's shared memory and still trains Cora
to the example's quality."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from test_local_run import EXAMPLE, assert_clean, run, write_manifest


def test_colocated_job_trains_cora_reading_local_rows_from_shared_memory(
    tmp_path: Path, cora_path: Path
) -> None:
    obj = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    obj["metadata"]["name"] = "cora-colocated"
    obj["spec"]["graph"]["source"]["url"] = str(cora_path)
    obj["spec"]["trainers"]["colocate"] = True
    obj["spec"]["trainers"]["numSamplers"] = 0
    obj["spec"]["trainers"]["app"]["epochs"] = 12
    manifest = write_manifest(tmp_path / "job.yaml", obj)
    res = run(manifest, "--workdir", str(tmp_path / "wd"), out_dir=tmp_path / "logs")
    assert res.rc == 0, res.stderr[-5000:]
    metrics = json.loads(res.stdout.strip().splitlines()[-1])
    assert metrics["test_accuracy"] >= 0.75, metrics
    # trainer r sits beside server r (2 trainers, 2 partitions) and read rows locally
    for rank in (0, 1):
        line = re.search(rf"trainer-{rank} \| .*local reads from shared memory.*", res.stderr)
        assert line is not None, res.stderr[-5000:]
        assert f"partition={rank}" in line.group(0)
        rows = re.search(r"rows=(\d+)", line.group(0))
        assert rows is not None and int(rows.group(1)) > 1000, line.group(0)
        # and sampled its own partition's seeds there, never falling back to TCP
        line = re.search(rf"trainer-{rank} \| .*local sampling from shared memory.*", res.stderr)
        assert line is not None, res.stderr[-5000:]
        reqs = re.search(r"requests=(\d+)", line.group(0))
        assert reqs is not None and int(reqs.group(1)) > 10, line.group(0)
        assert "fallbacks=0" in line.group(0), line.group(0)
    assert_clean(res)
