"""From a parsed DistGNNJob / GraphServer to a local plan, and the partitioning step.

Relative paths in a manifest are resolved against the manifest's folder; object
storage defaults to a folder under the run's work directory.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distgnn import contract, storage
from distgnn.errors import ConfigError
from distgnn.log import kv

if TYPE_CHECKING:
    from distgnn.graph.data import GraphData
    from distgnn.partition.manifest import PartitionOptions

log = logging.getLogger("distgnn.local")


def distgnn_argv() -> list[str]:
    """How to start the ``distgnn`` command from this interpreter (PATH-independent)."""
    return [sys.executable, "-m", "distgnn.cli"]


@dataclass(frozen=True)
class PartitionPlan:
    """Inputs and options of the partitioning step."""

    graph_url: str
    out_url: str
    graph_name: str
    num_parts: int
    method: str
    balance_train: bool
    balance_edges: bool
    halo_hops: int
    seed: int
    train_mask: str = "train_mask"

    @property
    def manifest_url(self) -> str:
        return storage.join(self.out_url, f"{self.graph_name}.json")

    @property
    def options(self) -> PartitionOptions:
        """The options partitioning runs with (also the reuse key)."""
        from distgnn.partition.manifest import PartitionOptions

        return PartitionOptions(
            method=self.method,
            seed=self.seed,
            halo_hops=self.halo_hops,
            balance_train=self.balance_train,
            balance_edges=self.balance_edges,
            train_mask=self.train_mask,
        )


@dataclass(frozen=True)
class LocalPlan:
    """What ``distgnn run`` does for one manifest, all paths resolved."""

    kind: str
    name: str
    partitioning: PartitionPlan | None = None
    manifest_url: str | None = None
    graph_server: str | None = None
    server_workers: int = 1
    trainer_argv: list[str] | None = None
    app: str | None = None
    replicas: int = 1
    num_samplers: int = 0
    checkpoint_url: str | None = None
    output_url: str | None = None
    backoff_limit: int = 0
    active_deadline: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    metrics: bool = False
    """``spec.monitoring.metrics``: servers and trainers serve Prometheus /metrics."""
    colocate: bool = False
    """``spec.trainers.colocate``: trainers read their partition from its server's memory."""
    feature_cache_mb: int = 0
    """``spec.trainers.featureCacheMB``: each trainer's feature cache (0: none)."""
    gpus: int = 0
    """``spec.trainers.gpus``: 1, a CUDA device per trainer (:mod:`distgnn.local.gpus`)."""


def load_yaml(path: Path) -> Any:
    """Read one YAML manifest within the limits of :mod:`distgnn.api.manifest_yaml`;
    a missing, oversized, non-UTF-8, too deep or malformed file is a one-line ConfigError."""
    from distgnn.api.manifest_yaml import load_file

    try:
        return load_file(path)
    except ConfigError as e:
        if path.is_absolute() or os.path.lexists(path):
            raise
        # e.g. ``distgnn run examples/job.yaml`` typed outside the checkout
        raise ConfigError(
            f"{e}; a relative path is taken from the current folder, {os.getcwd()}"
        ) from e


def resolve(url: str, base: Path, field: str = "url") -> str:
    """A relative local path resolved against ``base``; URLs and absolute paths unchanged."""
    from distgnn.api.manifest_yaml import short

    try:
        if "://" in url:
            if url.startswith("file://") and not url.startswith("file:///"):
                return str((base / url[len("file://") :]).resolve())
            return url
        p = Path(url).expanduser()
        return str(p if p.is_absolute() else (base / p).resolve())
    except (ValueError, RuntimeError, OSError) as e:
        raise ConfigError(f"{field}: {short(url)} is not a usable path ({e})") from e


def _partition_plan(
    spec: Any, name: str, graph_url: str, base: Path, workdir: Path
) -> PartitionPlan:
    from distgnn.api import graph_name
    from distgnn.api.commands import balance_mask

    p = spec.partitioning
    out = (
        resolve(p.output_url, base, "spec.partitioning.outputURL")
        if p.output_url
        else str(workdir / "partitions")
    )
    return PartitionPlan(
        graph_url=graph_url,
        out_url=out,
        graph_name=graph_name(name, p),
        num_parts=p.num_parts,
        method=p.method,
        balance_train=p.balance_train,
        balance_edges=p.balance_edges,
        halo_hops=p.halo_hops,
        seed=p.seed,
        train_mask=balance_mask(spec),
    )


def plan_from_manifest(
    obj: Any, manifest_path: Path, workdir: Path | None
) -> tuple[LocalPlan, Path]:
    """Validate ``obj`` with distgnn.api and build the local plan; returns (plan, workdir)."""
    from distgnn.api import inference_output_url, storage_env, trainer_command
    from distgnn.api.types import DistGNNJob, JobGraph
    from distgnn.api.validate import parse_manifest

    res = parse_manifest(obj)
    who = res.spec.managed_by if isinstance(res, DistGNNJob) else None
    if who is not None and who != contract.CONTROLLER_NAME:
        raise ConfigError(
            f"spec.managedBy: job {res.metadata.name!r} is managed by {who}, "
            f"not by DistGNN ({contract.CONTROLLER_NAME}); "
            "distgnn run runs only jobs DistGNN manages (leave the field out to run it here)"
        )
    base = manifest_path.resolve().parent
    name = res.metadata.name
    workdir = (workdir or base / ".distgnn").resolve()
    spec = res.spec
    graph = spec.graph
    part: PartitionPlan | None = None
    manifest_url: str | None = None
    graph_server: str | None = None
    if graph.source is not None:
        part = _partition_plan(
            spec, name, resolve(graph.source.url, base, "spec.graph.source.url"), base, workdir
        )
    elif graph.partitions is not None:
        manifest_url = resolve(
            graph.partitions.manifest_url, base, "spec.graph.partitions.manifestURL"
        )
    elif isinstance(graph, JobGraph) and graph.graph_server is not None:
        graph_server = graph.graph_server.name
    common: dict[str, Any] = dict(
        name=name,
        partitioning=part,
        manifest_url=manifest_url,
        graph_server=graph_server,
        server_workers=spec.servers.workers,
        cwd=str(base),
        metrics=spec.monitoring.metrics,
    )
    if not isinstance(res, DistGNNJob):
        return LocalPlan(kind="GraphServer", env=storage_env(spec.storage), **common), workdir
    jspec = res.spec
    tr = jspec.trainers
    argv = list(trainer_command(res))
    if argv[:1] == ["distgnn"]:
        argv = [*distgnn_argv(), *argv[1:]]
    elif argv[:1] in (["python"], ["python3"]):  # the interpreter that runs distgnn
        argv = [sys.executable, *argv[1:]]
    env = storage_env(spec.storage)
    pt = tr.pod_template
    if pt is not None and pt.env:
        env.update({e.name: e.value for e in pt.env})
    rp = jspec.run_policy
    return (
        LocalPlan(
            kind="DistGNNJob",
            trainer_argv=argv,
            app=tr.app.name if tr.app is not None else None,
            replicas=tr.replicas,
            num_samplers=tr.num_samplers,
            colocate=tr.colocate,
            feature_cache_mb=tr.feature_cache_mb,
            gpus=tr.gpus,
            checkpoint_url=(
                resolve(tr.checkpoint.url, base, "spec.trainers.checkpoint.url")
                if tr.checkpoint
                else None
            ),
            output_url=(
                resolve(out, base, "spec.trainers.app.outputURL")
                if (out := inference_output_url(res))
                else None
            ),
            backoff_limit=rp.backoff_limit,
            active_deadline=rp.active_deadline_seconds,
            env=env,
            **common,
        ),
        workdir,
    )


def _relative_hint(url: str) -> str:
    """How a missing local path came about: relative paths are the manifest's."""
    if "://" in url:
        return ""
    return " (a relative path in a manifest is resolved against the manifest's folder)"


MAKER = "prepare_data.py"
"""A script beside a data folder that writes its graphs (``examples/dgl/prepare_data.py``)."""


def _maker_hint(url: str) -> str:
    """The command that writes a missing local graph: a :data:`MAKER` script in its
    folder or the one above that names the file (a run that skipped that step)."""
    if "://" in url:
        return ""
    path = Path(url)
    for folder in (path.parent, path.parent.parent):
        script = folder / MAKER
        try:
            with open(script, encoding="utf-8") as f:
                named = path.name in f.read(1 << 20)
        except (OSError, UnicodeDecodeError):
            continue
        if named:
            try:
                shown = script.relative_to(Path.cwd())
            except ValueError:
                shown = script
            return f"; `python {shown}` writes it"
    return ""


def prepare_partitions(plan: LocalPlan) -> str:
    """The manifest URL to serve: given, reused, or freshly partitioned."""
    if plan.manifest_url is not None:
        if not storage.exists(plan.manifest_url):
            raise ConfigError(
                f"spec.graph.partitions.manifestURL: {storage.redact(plan.manifest_url)} "
                f"does not exist{_relative_hint(plan.manifest_url)}"
            )
        return plan.manifest_url
    p = plan.partitioning
    if p is None:
        raise ConfigError(f"{plan.kind} {plan.name!r} has no graph to serve")
    if not storage.exists(p.graph_url):
        raise ConfigError(
            f"spec.graph.source.url: {storage.redact(p.graph_url)} does not exist"
            f"{_relative_hint(p.graph_url)}{_maker_hint(p.graph_url)}"
        )
    from distgnn.graph.io import load_graph
    from distgnn.partition.partitioner import partition_graph

    graph = load_graph(p.graph_url)  # once: for the reuse check and for partitioning
    reuse = _find_reusable(p, graph)
    if reuse is not None:
        log.info(
            "reusing existing partitions (same input and options)",
            extra=kv(manifest=storage.redact(reuse)),
        )
        return reuse
    log.info(
        "partitioning",
        extra=kv(
            graph=storage.redact(p.graph_url),
            num_parts=p.num_parts,
            method=p.method,
            out=storage.redact(p.out_url),
        ),
    )
    if storage.is_local(p.out_url):
        os.makedirs(storage.local_path(p.out_url), exist_ok=True)
    partition_graph(
        graph,
        p.num_parts,
        p.out_url,
        p.graph_name,
        **asdict(p.options),
    )
    return p.manifest_url


def _find_reusable(p: PartitionPlan, graph: GraphData) -> str | None:
    """The manifest URL if partitions with the same input fingerprint and options exist."""
    from distgnn.partition.reuse import find_reusable

    found = find_reusable(p.out_url, p.graph_name, graph.fingerprint, p.options, p.num_parts)
    return p.manifest_url if found is not None else None
