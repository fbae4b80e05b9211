"""Commands and contract environments built from a job, for local mode and the operator."""

from __future__ import annotations

from collections.abc import Sequence

from distgnn import contract, storage
from distgnn.api import types as t
from distgnn.errors import ConfigError


def graph_name(name: str, part: t.Partitioning) -> str:
    """The graph name: ``partitioning.graphName`` or the resource's name."""
    return part.graph_name or name


def manifest_url(
    name: str,
    graph: t.JobGraph | t.ServerGraph,
    part: t.Partitioning,
    default_output: str | None = None,
) -> str:
    """Manifest URL used by the servers: given, or ``OUTPUT/NAME.json`` after partitioning.

    A GraphServer source has no manifest of its own (use the GraphServer's status).
    """
    if graph.partitions is not None:
        return graph.partitions.manifest_url
    if isinstance(graph, t.JobGraph) and graph.graph_server is not None:
        raise ConfigError("spec.graph.graphServer: the manifest comes from the GraphServer")
    out = part.output_url or default_output
    if not out:
        raise ConfigError("spec.partitioning.outputURL: is required (no default output URL)")
    return storage.join(out, f"{graph_name(name, part)}.json")


def balance_mask(spec: t.DistGNNJobSpec | t.GraphServerSpec) -> str:
    """The node data that ``balanceTrain`` balances: the training app's ``trainMask``
    (a GraphServer, or a job with its own command, uses ``train_mask``)."""
    app = spec.trainers.app if isinstance(spec, t.DistGNNJobSpec) else None
    return app.train_mask if app is not None else DEFAULT_TRAIN_MASK


DEFAULT_TRAIN_MASK = "train_mask"


def partition_command(
    name: str,
    graph: t.JobGraph | t.ServerGraph,
    part: t.Partitioning,
    default_output: str | None = None,
    train_mask: str = DEFAULT_TRAIN_MASK,
) -> list[str]:
    """``distgnn partition INPUT --out URL --name NAME --reuse ...`` for a raw-graph source.

    ``--reuse`` makes it a no-op when identical partitions already exist at the output;
    ``train_mask`` (see :func:`balance_mask`) is what ``balanceTrain`` balances.
    """
    if graph.source is None:
        raise ConfigError("spec.graph.source: partitioning needs a source graph")
    out = part.output_url or default_output
    if not out:
        raise ConfigError("spec.partitioning.outputURL: is required (no default output URL)")
    cmd = [
        "distgnn",
        "partition",
        graph.source.url,
        "--out",
        out,
        "--name",
        graph_name(name, part),
        "--num-parts",
        str(part.num_parts),
        "--method",
        part.method,
        "--halo-hops",
        str(part.halo_hops),
        "--seed",
        str(part.seed),
        "--reuse",
    ]
    if part.balance_train:
        cmd += ["--balance-train", "--train-mask", train_mask]
    else:  # explicit: the command's own default is on
        cmd.append("--no-balance-train")
    if part.balance_edges:
        cmd.append("--balance-edges")
    return cmd


def _num(v: float) -> str:
    return repr(float(v)) if isinstance(v, float) else str(v)


PYTHONS = ("python", "python3")
SCRIPT_RUNNER = "distgnn.train.script"
"""Runs a user's ``python SCRIPT`` / ``python -m MODULE`` as plain python does, but a
module missing from the environment exits 2 (:mod:`distgnn.train.script`)."""


def user_command(argv: list[str]) -> list[str]:
    """A user command as the trainers run it: ``python SCRIPT ARGS`` / ``python -m MODULE
    ARGS`` through :data:`SCRIPT_RUNNER` (``python -m distgnn.train.script SCRIPT ARGS``),
    so that a missing module exits 2 as for ``distgnn train``; any other command (``python
    -c``, interpreter options, another program) as written."""
    if len(argv) >= 2 and argv[0] in PYTHONS and (argv[1] == "-m" or argv[1][:1] != "-"):
        return [argv[0], "-m", SCRIPT_RUNNER, *argv[1:]]
    return list(argv)


def trainer_command(job: t.DistGNNJob | t.DistGNNJobSpec) -> list[str]:
    """``distgnn train APP --flag value ...`` (every option explicit) or the user's command
    (:func:`user_command`: ``python SCRIPT`` through the script runner)."""
    spec = job.spec if isinstance(job, t.DistGNNJob) else job
    tr = spec.trainers
    if tr.command is not None:
        return user_command([*tr.command, *(tr.args or [])])
    app = tr.app
    if app is None:
        raise ConfigError("spec.trainers: exactly one of app, command must be set")
    cmd = [
        "distgnn",
        "train",
        app.name,
        "--model",
        app.model,
        "--epochs",
        str(app.epochs),
        "--num-layers",
        str(app.num_layers),
        "--hidden",
        str(app.hidden),
        # joined form: argparse would read a leading "-1" (all neighbours) as an option
        "--fanouts=" + ",".join(str(f) for f in app.fanouts),
        "--batch-size",
        str(app.batch_size),
        "--lr",
        _num(app.lr),
        "--dropout",
        _num(app.dropout),
        "--precision",
        app.precision,
        "--weight-decay",
        _num(app.weight_decay),
        "--feat",
        app.feat,
        "--label",
        app.label,
        "--train-mask",
        app.train_mask,
        "--val-mask",
        app.val_mask,
        "--test-mask",
        app.test_mask,
        "--seed",
        str(app.seed),
    ]
    if app.target_ntype is not None:
        cmd += ["--target-ntype", app.target_ntype]
    if app.target_etype is not None:
        cmd += ["--target-etype", app.target_etype]
    if app.model == "rgcn":
        cmd.append("--sparse-embedding" if app.sparse_embedding else "--no-sparse-embedding")
        if app.sparse_lr is not None:
            cmd += ["--sparse-lr", _num(app.sparse_lr)]
        if app.num_bases is not None:
            cmd += ["--num-bases", str(app.num_bases)]
    if app.name == "link-prediction":
        cmd += ["--num-negs", str(app.num_negs), "--exclude", app.exclude]
    if app.name == "inference" or app.infer_after_training:
        if app.infer_after_training:
            cmd.append("--infer-after-training")
        if app.checkpoint_url is not None:
            cmd += ["--checkpoint-url", app.checkpoint_url]
        cmd += [
            "--output-url",
            inference_output_url(spec) or "",
            "--embedding-layer",
            app.embedding_layer,
            "--infer-batch-size",
            str(app.infer_batch_size),
        ]
    return cmd


def inference_output_url(job: t.DistGNNJob | t.DistGNNJobSpec) -> str | None:
    """Where the job's inference writes (``trainers.app.outputURL``), or None without one."""
    spec = job.spec if isinstance(job, t.DistGNNJob) else job
    app = spec.trainers.app
    if app is None or (app.name != "inference" and not app.infer_after_training):
        return None
    return app.output_url


def storage_env(st: t.Storage) -> dict[str, str]:
    """Non-secret storage variables (endpoint, region); credentials come from a Secret."""
    env: dict[str, str] = {}
    if st.endpoint:
        env[contract.ENV_S3_ENDPOINT] = st.endpoint
    if st.region:
        env[contract.ENV_S3_REGION] = st.region
    return env


def _token_env(token: str | None, token_file: str | None) -> dict[str, str]:
    if token_file:
        return {contract.ENV_TOKEN_FILE: token_file}
    if token:
        return {contract.ENV_TOKEN: token}
    return {}


def trainer_env(
    job: t.DistGNNJob,
    *,
    servers: Sequence[tuple[str, int]] | str,
    manifest: str,
    world_size: int,
    master_addr: str,
    master_port: int = contract.RENDEZVOUS_PORT,
    rank: int | None = None,
    token: str | None = None,
    token_file: str | None = None,
    metrics_file: str | None = None,
    termination_log: str | None = None,
    metrics_port: int | None = None,
    progress_port: int | None = None,
) -> dict[str, str]:
    """The contract environment of one trainer (``rank`` unset: JOB_COMPLETION_INDEX).

    ``metrics_port`` (only with ``spec.monitoring.metrics``) turns /metrics on;
    ``progress_port`` overrides rank 0's /progress port."""
    spec = job.spec
    env = {
        contract.ENV_JOB_NAME: job.metadata.name,
        contract.ENV_SERVERS: servers
        if isinstance(servers, str)
        else contract.format_servers(list(servers)),
        contract.ENV_MANIFEST: manifest,
        contract.ENV_WORLD_SIZE: str(world_size),
        contract.ENV_MASTER_ADDR: master_addr,
        contract.ENV_MASTER_PORT: str(master_port),
        contract.ENV_NUM_SAMPLERS: str(spec.trainers.num_samplers),
        **_token_env(token, token_file),
        **storage_env(spec.storage),
    }
    if rank is not None:
        env[contract.ENV_RANK] = str(rank)
        env[contract.ENV_LOCAL_RANK] = "0"
    if metrics_file:
        env[contract.ENV_METRICS_FILE] = metrics_file
    if termination_log:
        env[contract.ENV_TERMINATION_LOG] = termination_log
    if spec.trainers.checkpoint is not None:
        env[contract.ENV_CHECKPOINT_URL] = spec.trainers.checkpoint.url
    if spec.trainers.feature_cache_mb:
        env[contract.ENV_FEATURE_CACHE_MB] = str(spec.trainers.feature_cache_mb)
    if metrics_port is not None and spec.monitoring.metrics:
        env[contract.ENV_METRICS_PORT] = str(metrics_port)
    if progress_port is not None:
        env[contract.ENV_PROGRESS_PORT] = str(progress_port)
    return env


def server_env(
    servers: t.Servers,
    st: t.Storage,
    *,
    manifest: str,
    part_id: int | None = None,
    port: int = contract.SERVER_PORT,
    health_port: int = contract.SERVER_HEALTH_PORT,
    bind: str | None = None,
    token: str | None = None,
    token_file: str | None = None,
    ready_file: str | None = None,
    owner: str | None = None,
    metrics_port: int | None = None,
) -> dict[str, str]:
    """The contract environment of one graph server (``part_id`` unset: from POD_NAME).

    ``owner`` (the DistGNNJob or GraphServer) becomes the ``job`` field of its log lines;
    ``metrics_port`` turns /metrics on."""
    env = {
        contract.ENV_MANIFEST: manifest,
        contract.ENV_SERVER_PORT: str(port),
        contract.ENV_HEALTH_PORT: str(health_port),
        contract.ENV_SERVER_WORKERS: str(servers.workers),
        **_token_env(token, token_file),
        **storage_env(st),
    }
    if part_id is not None:
        env[contract.ENV_PART_ID] = str(part_id)
    if bind:
        env[contract.ENV_SERVER_BIND] = bind
    if ready_file:
        env[contract.ENV_READY_FILE] = ready_file
    if owner:
        env[contract.ENV_JOB_NAME] = owner
    if metrics_port is not None:
        env[contract.ENV_METRICS_PORT] = str(metrics_port)
    return env


SERVER_COMMAND = ("distgnn", "serve")
"""Servers read manifest, partition and ports from :func:`server_env`."""
