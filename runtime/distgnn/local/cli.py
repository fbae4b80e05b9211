"""``distgnn run MANIFEST.yaml``: run a DistGNNJob or GraphServer locally.

The last stdout line of a successful job is its final metrics as one JSON object;
everything else (our logs, every process's prefixed output) goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from distgnn import log as dlog
from distgnn import storage
from distgnn.errors import ConfigError, JobFailed

HELP = "run a DistGNNJob or GraphServer manifest locally (processes on 127.0.0.1)"

log = logging.getLogger("distgnn.local")


def _seconds(text: str) -> float:
    """A finite, non-negative number of seconds (an argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a non-negative number of seconds: {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("manifest", type=Path, help="DistGNNJob or GraphServer YAML")
    p.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="local object storage (partitions/) and run folders (runs/) "
        "(default: MANIFEST_DIR/.distgnn)",
    )
    p.add_argument(
        "--metrics-out",
        type=Path,
        default=None,
        help="also write the final metrics JSON to this file",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="local state (GraphServer registry); default $DISTGNN_STATE_DIR "
        "or ~/.local/state/distgnn",
    )
    p.add_argument(
        "--ready-timeout",
        type=_seconds,
        default=300.0,
        help="seconds to wait for the graph servers to be ready (default 300)",
    )
    p.add_argument(
        "--grace",
        type=_seconds,
        default=10.0,
        help="seconds between SIGTERM and SIGKILL when stopping (default 10)",
    )


class _StopSignals:
    """Turns the first SIGTERM/SIGINT into KeyboardInterrupt; later ones are ignored so
    the cleanup that follows is not cut short."""

    def __init__(self) -> None:
        self.fired = False
        self.previous: dict[int, object] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.fired:
            log.warning("already stopping; waiting for processes to exit")
            return
        self.fired = True
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def __enter__(self) -> _StopSignals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self.previous.items():
            signal.signal(sig, old)  # type: ignore[arg-type]


def main(args: argparse.Namespace) -> int:
    from distgnn.local.plan import load_yaml, plan_from_manifest
    from distgnn.local.registry import Registry
    from distgnn.local.runner import RunContext, run_graphserver, run_job

    path: Path = args.manifest
    obj = load_yaml(path)
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}: expected a DistGNNJob or GraphServer mapping")
    plan, workdir = plan_from_manifest(obj, path, args.workdir)
    registry = (
        Registry(args.state_dir.resolve() / "graphservers")
        if args.state_dir
        else Registry.default()
    )
    ctx = RunContext(
        workdir=workdir, registry=registry, ready_timeout=args.ready_timeout, grace=args.grace
    )
    dlog.add_context(job=plan.name)
    log.info(
        "distgnn run",
        extra={"fields": {"kind": plan.kind, "name": plan.name, "workdir": str(workdir)}},
    )
    with _StopSignals():
        if plan.kind == "GraphServer":
            try:
                run_graphserver(plan, ctx)
            except KeyboardInterrupt:
                log.info("GraphServer stopped", extra={"fields": {"name": plan.name}})
                return 0
            except JobFailed as e:
                print(f"distgnn run: GraphServer {plan.name!r} failed: {e}", file=sys.stderr)
                return e.exit_status
            return 0
        try:
            metrics = run_job(plan, ctx)
        except JobFailed as e:
            print(f"distgnn run: job failed: {e}", file=sys.stderr)
            return e.exit_status
    if plan.output_url:  # where inference wrote (trainers ran in the manifest's folder)
        metrics["output_url"] = plan.output_url
        log.info("inference output", extra={"fields": {"url": storage.redact(plan.output_url)}})
    text = json.dumps(metrics, sort_keys=True)
    if args.metrics_out:
        args.metrics_out.parent.mkdir(parents=True, exist_ok=True)
        args.metrics_out.write_text(text + "\n", encoding="utf-8")
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return 0
