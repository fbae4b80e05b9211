"""Run every benchmark in turn; each prints its own table.

python bench/run_all.py            # full sizes (minutes each on 2 cores)
python bench/run_all.py --quick    # small sizes, to check that they all run
python bench/run_all.py --only server,training
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (full-size args, quick args)
BENCHES: dict[str, tuple[list[str], list[str]]] = {
    "partition": ([], ["--nodes", "100000", "--runs", "1"]),
    "server": ([], ["--nodes", "20000", "--reps", "3"]),
    "training": ([], ["--nodes", "100000", "--steps", "5", "--reps", "3"]),
    "inference": ([], ["--nodes", "100000", "--reps", "1"]),
    "hetero_embedding": ([], ["--authors", "20000", "--rounds", "1"]),
    "operator": ([], ["--jobs", "10", "--timeout", "120"]),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--only", default="", help="comma-separated subset of " + ",".join(BENCHES))
    args = ap.parse_args()
    chosen = [n for n in args.only.split(",") if n] or list(BENCHES)
    unknown = sorted(set(chosen) - set(BENCHES))
    if unknown:
        ap.error(f"unknown benchmark(s): {', '.join(unknown)}")
    failed = []
    for name in chosen:
        full, quick = BENCHES[name]
        cmd = [sys.executable, str(HERE / f"bench_{name}.py"), *(quick if args.quick else full)]
        print(f"\n=== bench_{name}.py {' '.join(cmd[2:])}", flush=True)
        t0 = time.monotonic()
        rc = subprocess.call(cmd)
        print(f"=== bench_{name}.py: exit {rc} after {time.monotonic() - t0:.0f} s", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
