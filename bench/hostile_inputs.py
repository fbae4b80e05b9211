"""Replay hostile inputs against ``distgnn run`` and the partition loader; print a table.

python bench/hostile_inputs.py                 # all groups (about a minute on 2 cores)
python bench/hostile_inputs.py --fuzz 20000    # more fuzzed manifests

Groups: hand-written hostile manifests (each one a real ``distgnn run`` process), a
manifest fuzzer (tree and byte mutations of a manifest with labels, annotations,
storage, checkpoint and podTemplate, in a worker process), and tampered partitions (each
one a real process loading it). Columns: tried; refused cleanly (one ``error:`` line,
exit 2, or the documented exception); accepted (a valid input, or a fuzzed manifest that
is still valid; for tampered partitions this must be 0); crashed (a traceback, another
exception or exit status); hung (past the time limit); ran code (a payload such as
``!!python/object/apply`` or a pickled object created its marker file). Crashed, hung
and ran code must be 0: the exit status is 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

COLUMNS = ("tried", "refused cleanly", "accepted", "crashed", "hung", "ran code")
CASE_TIMEOUT = 60.0
REPO = Path(__file__).resolve().parents[1]


@dataclass
class Tally:
    name: str
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, outcome: str, label: str) -> None:
        self.counts["tried"] += 1
        self.counts[outcome] += 1
        if outcome in ("crashed", "hung", "ran code", "accepted"):
            self.examples.setdefault(outcome, label)


# -- manifests ------------------------------------------------------------------------------

BASE = """\
apiVersion: distgnn.dev/v1alpha1
kind: DistGNNJob
metadata:
  name: hostile
  labels: {team: gnn}
  annotations: {note: hello}
spec:
  graph:
    source: {url: nowhere/g.npz}
  storage:
    endpoint: http://127.0.0.1:9
    region: us-east-1
    credentialsSecret: {name: s3-creds}
  trainers:
    replicas: 1
    podTemplate:
      labels: {a: b}
      env: [{name: X, value: y}]
      tolerations: [{key: k, operator: Exists}]
      affinity: {nodeAffinity: {x: [1, 2]}}
    app: {name: node-classification, epochs: 1, lr: 0.01, dropout: 0.5, weightDecay: 0.0}
    checkpoint: {url: ckpt}
"""


def _bomb(levels: int, key: str = "kind") -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(lines) + f"\n{key}: *a{levels - 1}\n"


def hostile_manifests(marker: Path) -> dict[str, bytes]:
    """name -> file bytes; every one must end in a one-line error, exit 2."""
    sub = BASE.replace
    touch = f"touch {marker}"
    cases: dict[str, str | bytes] = {
        "non-UTF-8 bytes": b"\xff\xfe\x00k" + BASE.encode(),
        "latin-1 text": BASE.replace("hello", "h\xe9llo").encode("latin-1"),
        "labels a string": sub("labels: {team: gnn}", 'labels: "abc"'),
        "labels a list": sub("labels: {team: gnn}", "labels: [a, b]"),
        "label value a map": sub("labels: {team: gnn}", "labels: {a: {b: c}}"),
        "label value too long": sub("labels: {team: gnn}", f"labels: {{a: {'x' * 64}}}"),
        "annotations 5": sub("annotations: {note: hello}", "annotations: 5"),
        "metadata a list": sub("  name: hostile\n", "  - name: hostile\n"),
        "namespace a list": sub("name: hostile", "name: hostile\n  namespace: [x]"),
        "name with NUL": sub("name: hostile", 'name: "host\\0ile"'),
        "10,000-deep lists": "kind: " + "[" * 10_000 + "]" * 10_000,
        "10,000-deep flow maps": "kind: " + "{a: " * 10_000 + "1" + "}" * 10_000,
        "300-deep block maps": "".join(" " * i + f"k{i}:\n" for i in range(300)),
        "NUL in a URL": sub("url: nowhere/g.npz", 'url: "a\\0b"'),
        "lone surrogate in a URL": sub("url: nowhere/g.npz", 'url: "\\ud800"'),
        "lone surrogate in a label key": sub("team: gnn", '"\\udc80": x'),
        "surrogate in a command": sub(
            "app: {name: node-classification, epochs: 1, lr: 0.01, dropout: 0.5, weightDecay: 0.0}",
            'command: ["\\ud800"]',
        ),
        "alias bomb in kind": _bomb(9),
        "alias bomb in labels": _bomb(9, "metadata"),
        "alias bomb in affinity": BASE + _bomb(9, "x-affinity"),
        "50 MB list": "kind: [" + "1," * 25_000_000 + "1]",
        "5 MB string": "kind: " + "x" * 5_000_000,
        "duplicate kind": sub("kind: DistGNNJob", "kind: DistGNNJob\nkind: GraphServer"),
        "duplicate spec key": sub("replicas: 1", "replicas: 1\n    replicas: 3"),
        "python object tag": f"!!python/object/apply:os.system ['{touch}']\n",
        "python object in a field": sub(
            "region: us-east-1", f"region: !!python/object/apply:os.system ['{touch}']"
        ),
        "python name tag": "kind: !!python/name:os.system\n",
        "map tag on a list": "kind: !!map [a, b]\n",
        "set tag on a scalar": "kind: !!set abc\n",
        "complex key": "? [a, b]\n: c\n",
        "5000-digit integer": sub("replicas: 1", "replicas: " + "9" * 5000),
        "lr .nan": sub("lr: 0.01", "lr: .nan"),
        "dropout .nan": sub("dropout: 0.5", "dropout: .nan"),
        "weightDecay .nan": sub("weightDecay: 0.0", "weightDecay: .nan"),
        "dropout 1.0": sub("dropout: 0.5", "dropout: 1.0"),
        "lr .inf": sub("lr: 0.01", "lr: .inf"),
        "weightDecay -.inf": sub("weightDecay: 0.0", "weightDecay: -.inf"),
        "epochs 1e400": sub("epochs: 1", "epochs: 1e400"),
        "replicas a bool": sub("replicas: 1", "replicas: true"),
        "~user path": sub("url: nowhere/g.npz", "url: ~nosuchuser-xyz/g.npz"),
        "a list document": "- 1\n- 2\n",
        "two documents": BASE + "---\n" + BASE,
        "empty file": "",
        "tabs": "kind:\tDistGNNJob\n\t- x\n",
        "control characters": "kind: \x07\x1b[31mDistGNNJob\n",
        "kind a huge string": "kind: " + "K" * 200_000,
        "unknown field flood": BASE + "".join(f"x{i}: {i}\n" for i in range(5000)),
        "binary tag": sub("region: us-east-1", "region: !!binary aGVsbG8="),
        "timestamp for a string": sub("region: us-east-1", "region: 2001-12-14"),
        "set for a list": sub(
            "tolerations: [{key: k, operator: Exists}]", "tolerations: !!set {a}"
        ),
    }
    return {
        k: v if isinstance(v, bytes) else v.encode("utf-8", "surrogatepass")
        for k, v in cases.items()
    }


def _classify_cli(rc: int | None, err: str, marker: Path) -> str:
    if marker.exists():
        marker.unlink()
        return "ran code"
    if rc is None:
        return "hung"
    lines = [ln for ln in err.splitlines() if ": error: " in ln]
    if rc == 2 and len(lines) == 1 and "Traceback" not in err:
        return "refused cleanly"
    return "crashed"


def run_manifests(work: Path, marker: Path) -> Tally:
    tally = Tally("hostile manifests (distgnn run)")
    for name, data in hostile_manifests(marker).items():
        path = work / "case.yaml"
        path.write_bytes(data)
        argv = [sys.executable, "-m", "distgnn.cli", "run", str(path), "--workdir",
                str(work / "wd"), "--state-dir", str(work / "state")]  # fmt: skip
        try:
            p = subprocess.run(
                argv, capture_output=True, text=True, timeout=CASE_TIMEOUT, check=False
            )
            rc, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired:
            rc, err = None, ""
        tally.add(_classify_cli(rc, err, marker), name)
    return tally


# -- manifest fuzzer (in a worker process) -----------------------------------------------------

FUZZ_WORKER = r"""
import json, random, signal, sys
from pathlib import Path
import yaml
sys.path.insert(0, sys.argv[5])
from tests.support.manifest_fuzz import YAML_TOKENS, mutate_bytes, mutate_tree
from distgnn.api.manifest_yaml import loads
from distgnn.errors import ConfigError
from distgnn.local.plan import plan_from_manifest

base_text, count, seed, marker = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])

class Hung(Exception):
    pass

def on_alarm(*_):
    raise Hung()

signal.signal(signal.SIGALRM, on_alarm)
TOKENS = [*YAML_TOKENS,
          ("!!python/object/apply:os.system ['touch " + str(marker) + "']").encode()]

rng = random.Random(seed)
base = yaml.safe_load(base_text)
counts = {"tried": 0, "refused cleanly": 0, "accepted": 0, "crashed": 0, "hung": 0, "ran code": 0}
examples = {}
where = Path("/tmp/distgnn-fuzz/job.yaml")
for i in range(count):
    as_bytes = i % 2 == 1
    signal.alarm(10)
    try:
        if as_bytes:
            obj = loads(mutate_bytes(base_text.encode(), rng, TOKENS))
        else:
            obj = mutate_tree(base, rng)
        if not isinstance(obj, dict):
            raise ConfigError("not a mapping")
        plan_from_manifest(obj, where, where.parent / "work")
        outcome = "accepted"
    except ConfigError:
        outcome = "refused cleanly"
    except Hung:
        outcome = "hung"
    except Exception as e:
        outcome = "crashed"
        examples.setdefault("crashed", f"{type(e).__name__}: {str(e)[:120]}")
    finally:
        signal.alarm(0)
    if marker.exists():
        marker.unlink()
        outcome = "ran code"
    counts["tried"] += 1
    counts[outcome] += 1
print(json.dumps({"counts": counts, "examples": examples}))
"""


def run_fuzz(count: int, seed: int, marker: Path) -> Tally:
    tally = Tally(f"fuzzed manifests (seed {seed})")
    try:
        p = subprocess.run(
            [sys.executable, "-c", FUZZ_WORKER, BASE, str(count), str(seed), str(marker),
             str(REPO)],
            capture_output=True, text=True, timeout=CASE_TIMEOUT + count * 0.5, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        tally.counts.update({"tried": count, "hung": count})
        return tally
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tally.counts.update({"tried": count, "crashed": count})
        tally.examples["crashed"] = p.stderr[-300:]
        return tally
    tally.counts.update(out["counts"])
    tally.examples.update(out["examples"])
    return tally


# -- tampered partitions ---------------------------------------------------------------------

LOAD_WORKER = """
import sys
from distgnn.errors import DistGNNError
from distgnn.partition.loader import load_partition
try:
    load_partition(sys.argv[1], 0)
except DistGNNError as e:
    print("REFUSED", type(e).__name__, str(e)[:200])
    sys.exit(2)
print("LOADED")
"""

PART = "g/part-00000"


def _npy(arr: np.ndarray, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


class _Payload:
    """Unpickling it runs a shell command (what a pickle-trusting loader would do)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        return (os.system, (self.command,))


def _partition(out: Path) -> Path:
    from distgnn.graph.io import graph_from_arrays
    from distgnn.partition.partitioner import partition_graph

    rng = np.random.default_rng(0)
    g = graph_from_arrays(
        {
            "src": rng.integers(0, 60, 400),
            "dst": rng.integers(0, 60, 400),
            "feat": rng.random((60, 4), dtype=np.float32),
        }
    )
    partition_graph(g, 2, str(out), "g", progress=False)
    return out


def _set_entry(root: Path, rel: str, data: bytes) -> None:
    m = json.loads((root / "g.json").read_text())
    m["parts"][0]["files"][rel] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (root / "g.json").write_text(json.dumps(m))


def _replace(root: Path, rel: str, data: bytes) -> None:
    (root / PART / rel).unlink()
    (root / PART / rel).write_bytes(data)
    _set_entry(root, rel, data)


def tamperings(marker: Path, outside: Path) -> dict[str, Callable[[Path], None]]:
    feat, ind, ptr = "node/_N/feat.npy", "graph/indices.npy", "graph/indptr.npy"

    def arr(root: Path, rel: str) -> np.ndarray:
        return np.load(root / PART / rel)

    def link(target: str | Path, rel: str = ind) -> Callable[[Path], None]:
        def f(root: Path) -> None:
            (root / PART / rel).unlink()
            (root / PART / rel).symlink_to(target)

        return f

    def fifo(root: Path) -> None:
        (root / PART / ind).unlink()
        os.mkfifo(root / PART / ind)

    def symlink_out(root: Path) -> None:
        shutil.copy(root / PART / feat, outside)
        link(outside, feat)(root)

    def edit(rel: str, fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[Path], None]:
        return lambda root: _replace(root, rel, _npy(np.ascontiguousarray(fn(arr(root, rel)))))

    def pickled(root: Path) -> None:
        obj = np.empty(3, dtype=object)
        obj[0] = _Payload(f"touch {marker}")
        _replace(root, feat, _npy(obj, allow_pickle=True))

    def corrupt(root: Path) -> None:
        data = bytearray((root / PART / feat).read_bytes())
        data[-1] ^= 0xFF
        (root / PART / feat).write_bytes(bytes(data))

    def truncate(root: Path) -> None:
        data = (root / PART / ind).read_bytes()
        (root / PART / ind).write_bytes(data[:-8])

    def manifest_text(text: str) -> Callable[[Path], None]:
        def f(root: Path) -> None:
            (root / "g.json").write_text(text)

        return f

    def manifest_link(root: Path) -> None:
        (root / "g.json").unlink()
        (root / "g.json").symlink_to("/dev/zero")

    def manifest_edit(fn: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
        def f(root: Path) -> None:
            m = json.loads((root / "g.json").read_text())
            fn(m)
            (root / "g.json").write_text(json.dumps(m))

        return f

    def huge_bytes(m: dict[str, Any]) -> None:
        m["parts"][0]["files"][feat]["bytes"] = 10**15

    def escape_path(m: dict[str, Any]) -> None:
        m["parts"][0]["path"] = "../../etc"

    def manifest_pickle(root: Path) -> None:
        (root / "g.json").write_bytes(pickle.dumps(_Payload(f"touch {marker}")))

    return {
        "symlink to /dev/zero": link("/dev/zero"),
        "symlink to /dev/urandom": link("/dev/urandom"),
        "FIFO as a file": fifo,
        "symlink out of the folder": symlink_out,
        "big-endian features": edit(feat, lambda a: a.astype(">f4")),
        "float64 features": edit(feat, lambda a: a.astype(np.float64)),
        "fewer feature columns": edit(feat, lambda a: a[:, :3]),
        "more feature rows": edit(feat, lambda a: np.concatenate([a, a])),
        "indices of 10^12": edit(ind, lambda a: np.where(a == a[0], 10**12, a)),
        "negative indices": edit(ind, lambda a: a - 10**6),
        "float indices": edit(ind, lambda a: a.astype(np.float64)),
        "big-endian indices": edit(ind, lambda a: a.astype(">i8")),
        "decreasing indptr": edit(ptr, lambda a: np.where(np.arange(len(a)) == 1, a[-1], a)),
        "indptr not ending at nnz": edit(ptr, lambda a: np.minimum(a, a[-1] - 1)),
        "short indptr": edit(ptr, lambda a: a[:-1]),
        "eid out of range": edit("graph/eid.npy", lambda a: a + 10**9),
        "halo ids out of range": edit("graph/halo_nid.npy", lambda a: a + 10**9),
        "2-D orig_nid": edit("graph/orig_nid.npy", lambda a: a.reshape(-1, 1)),
        "pickled object array": pickled,
        "checksum mismatch": corrupt,
        "truncated file": truncate,
        "manifest 100,000-deep": manifest_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        "manifest not JSON": manifest_text("{nope"),
        "manifest a pickle": manifest_pickle,
        "manifest says 1 PB": manifest_edit(huge_bytes),
        "manifest path escapes": manifest_edit(escape_path),
        "manifest symlink to /dev/zero": manifest_link,
    }


def run_partitions(work: Path, marker: Path) -> Tally:
    tally = Tally("tampered partitions (load_partition)")
    pristine = _partition(work / "pristine")
    outside = work / "outside.npy"
    for name, tamper in tamperings(marker, outside).items():
        root = work / "case"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(pristine, root, symlinks=True)
        tamper(root)
        try:
            p = subprocess.run(
                [sys.executable, "-c", LOAD_WORKER, str(root / "g.json")],
                capture_output=True, text=True, timeout=CASE_TIMEOUT, check=False,
            )  # fmt: skip
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            rc, out, err = None, "", ""
        if marker.exists():
            marker.unlink()
            outcome = "ran code"
        elif rc is None:
            outcome = "hung"
        elif rc == 2 and out.startswith("REFUSED") and "Traceback" not in err:
            outcome = "refused cleanly"
        elif rc == 0 and "LOADED" in out:
            outcome = "accepted"
        else:
            outcome = "crashed"
        tally.add(outcome, name)
    return tally


# -- main -------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fuzz", type=int, default=4000, help="fuzzed manifests (default 4000)")
    ap.add_argument("--seed", type=int, default=13, help="fuzzer seed (default 13)")
    ap.add_argument(
        "--only", default="", help="comma-separated subset of manifests,fuzz,partitions"
    )
    args = ap.parse_args()
    groups = [g for g in args.only.split(",") if g] or ["manifests", "fuzz", "partitions"]
    tallies: list[Tally] = []
    with tempfile.TemporaryDirectory(prefix="distgnn-hostile-") as tmp:
        work = Path(tmp)
        marker = work / "RAN-CODE"
        t0 = time.monotonic()
        if "manifests" in groups:
            tallies.append(run_manifests(work, marker))
        if "fuzz" in groups:
            tallies.append(run_fuzz(args.fuzz, args.seed, marker))
        if "partitions" in groups:
            tallies.append(run_partitions(work, marker))
        elapsed = time.monotonic() - t0
    width = max(len(t.name) for t in tallies) + 2
    print(f"{'inputs':<{width}}" + "".join(f"{c:>17}" for c in COLUMNS))
    total: Counter[str] = Counter()
    for t in tallies:
        print(f"{t.name:<{width}}" + "".join(f"{t.counts[c]:>17}" for c in COLUMNS))
        total.update(t.counts)
    print(f"{'total':<{width}}" + "".join(f"{total[c]:>17}" for c in COLUMNS))
    print(f"({elapsed:.0f} s)")
    for t in tallies:
        for outcome, label in t.examples.items():
            print(f"  {t.name}: {outcome}: {label}")
    bad = total["crashed"] + total["hung"] + total["ran code"]
    accepted_lies = next(
        (t.counts["accepted"] for t in tallies if t.name.startswith("tampered")), 0
    )
    return 1 if bad or accepted_lies else 0


if __name__ == "__main__":
    sys.exit(main())
