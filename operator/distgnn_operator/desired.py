"""Desired children of a DistGNNJob or GraphServer: pure builders, plain dicts out.

Trainers run as an **Indexed Job** rather than a StatefulSet or bare pods: each pod
gets a stable rank from ``JOB_COMPLETION_INDEX`` and a stable hostname
(``NAME-trainers-0``) that a headless Service turns into DNS for ``MASTER_ADDR``;
the Job controller tracks completion (``completions = parallelism = replicas``), and
``backoffLimit: 0`` makes one failing rank fail the Job, because DDP cannot replace a
single rank: the operator restarts the whole group instead (``runPolicy.backoffLimit``).
Servers run as a StatefulSet: pod ordinal = partition id, stable DNS per partition.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from distgnn import contract
from distgnn.api import commands as cmds
from distgnn.api import types as t
from distgnn_operator import monitoring as mon
from distgnn_operator import podspec as ps
from distgnn_operator.podspec import DesiredContext

API_VERSION = f"{contract.API_GROUP}/{contract.API_VERSION}"
ANN_RESTARTS = f"{contract.LABEL_PREFIX}/restarts"
ANN_TOKEN_HASH = f"{contract.LABEL_PREFIX}/token-hash"
"""On the server pod template: a new token Secret changes it, so the servers roll."""
TRAINER_CONTAINER = "trainer"
SERVER_CONTAINER = "server"
"""The graph-server container of a server pod (and sidecar of a co-located trainer pod)."""
"""The trainer container of a trainer pod (a co-located pod's others: ``trainer-1``, ...)."""
PARTITION_CONTAINER = "partition"
"""The container of the partitioning Job's pod."""
PARTITION_BACKOFF_LIMIT = 2
"""Retries of the partitioning Job (failures other than a configuration error)."""
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

__all__ = [
    "DesiredContext",
    "GraphServerInfo",
    "Stage",
    "desired_graphserver_children",
    "desired_job_children",
]


@dataclass(frozen=True)
class Stage:
    """What the reconciler observed; the defaults give every child (for goldens and charts)."""

    partitioned: bool = True
    servers_ready: bool = True
    finished: bool = False
    restarts: int = 0
    trainers_started: bool = False
    """the trainer Job exists: it is kept while servers are briefly not ready"""
    token_hash: str | None = None
    """hash of the token Secret's value (server pod annotation); None: not known yet"""


@dataclass(frozen=True)
class GraphServerInfo:
    """What a job needs from the GraphServer it attaches to."""

    name: str
    manifest_url: str
    num_parts: int
    token_secret: str


def names(name: str) -> dict[str, str]:
    """Deterministic child names of a resource called ``name``."""
    return {
        "token": f"{name}-token",
        "partition": f"{name}-partition",
        "server": f"{name}-server",
        "trainers": f"{name}-trainers",
        "podgroup": name,
    }


def owner_ref(kind: str, meta: t.ObjectMeta) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": meta.name,
        "uid": meta.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    """Whether ``obj``'s controller owner reference (as :func:`owner_ref` writes it) is
    ``uid``."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


def _labels(owner_label: str, name: str, role: str | None, ctx: DesiredContext) -> dict[str, str]:
    out = {**ctx.extra_labels, contract.LABEL_MANAGED_BY: contract.MANAGED_BY, owner_label: name}
    if role:
        out[contract.LABEL_ROLE] = role
    return out


def _meta(name: str, ns: str, labels: dict[str, str], owner: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "namespace": ns, "labels": labels, "ownerReferences": [owner]}


def output_url(meta: t.ObjectMeta, part: t.Partitioning, ctx: DesiredContext) -> str | None:
    if part.output_url:
        return part.output_url
    if ctx.partitions_url:
        return f"{ctx.partitions_url.rstrip('/')}/{meta.namespace}/{meta.name}"
    return None


def _pod(
    containers: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    restart: str,
    ctx: DesiredContext,
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "securityContext": ps.pod_security_context(),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": restart,
        "containers": containers,
        "volumes": ps.scratch_volumes(ctx) + volumes,
    }
    if ctx.image_pull_secrets:  # a pod template's own list replaces them (apply_template)
        pod["imagePullSecrets"] = ps.image_pull_secrets(ctx.image_pull_secrets)
    return pod


def server_container(srv: Any, env: list[dict[str, Any]], ctx: DesiredContext) -> dict[str, Any]:
    """The graph server container: its image, rpc and health ports, readiness on
    ``/readyz`` and liveness on ``/healthz`` (the StatefulSet's and the co-located
    sidecar's)."""
    c = _container(
        SERVER_CONTAINER,
        srv.image or ctx.runtime_image,
        srv.image_pull_policy or ctx.image_pull_policy,
        list(cmds.SERVER_COMMAND),
        env,
        [ps.token_mount()],
        ps.resources(srv.resources),
    )
    c["ports"] = [
        {"name": "rpc", "containerPort": contract.SERVER_PORT, "protocol": "TCP"},
        {"name": "health", "containerPort": contract.SERVER_HEALTH_PORT, "protocol": "TCP"},
    ]
    probe = {"port": "health", "scheme": "HTTP"}
    c["readinessProbe"] = {
        "httpGet": {"path": "/readyz", **probe},
        "periodSeconds": 5,
        "timeoutSeconds": 3,
        "failureThreshold": 3,
    }
    c["livenessProbe"] = {
        "httpGet": {"path": "/healthz", **probe},
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": 6,
    }
    return c


def _container(
    name: str,
    image: str,
    pull: str,
    command: list[str],
    env: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
    res: dict[str, Any],
) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": pull,
        "command": command,
        "env": env,
        "securityContext": ps.container_security_context(),
        "volumeMounts": ps.scratch_mounts() + mounts,
        "terminationMessagePath": contract.TERMINATION_LOG_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if res:
        c["resources"] = res
    return c


def headless_service(
    name: str,
    ns: str,
    labels: dict[str, str],
    owner: dict[str, Any],
    selector: dict[str, str],
    ports: dict[str, int],
) -> dict[str, Any]:
    """A headless Service (stable per-pod DNS, ready or not) with named TCP ports."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, ns, labels, owner),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector,
            "ports": [
                {"name": k, "port": v, "targetPort": v, "protocol": "TCP"} for k, v in ports.items()
            ],
        },
    }


def token_secret(
    name: str, ns: str, labels: dict[str, str], owner: dict[str, Any], token: str | None
) -> dict[str, Any]:
    """The per-resource token; created once with a random value and never rewritten."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(name, ns, labels, owner),
        "type": "Opaque",
        "stringData": {contract.TOKEN_KEY: token or secrets.token_urlsafe(32)},
    }


def partition_job(
    meta: t.ObjectMeta,
    graph: t.JobGraph | t.ServerGraph,
    part: t.Partitioning,
    st: t.Storage,
    srv: t.Servers,
    labels: dict[str, str],
    owner: dict[str, Any],
    ctx: DesiredContext,
    train_mask: str = cmds.DEFAULT_TRAIN_MASK,
) -> dict[str, Any]:
    """A batch Job running ``distgnn partition`` (it no-ops when the partitions exist)."""
    n = names(meta.name)
    cmd = cmds.partition_command(
        meta.name, graph, part, output_url(meta, part, ctx), train_mask=train_mask
    )
    env = ps.env_list({"HOME": "/tmp", **cmds.storage_env(st)}) + ps.credential_env(st)
    c = _container(
        PARTITION_CONTAINER,
        srv.image or ctx.runtime_image,
        srv.image_pull_policy or ctx.image_pull_policy,
        cmd,
        env,
        [],
        ps.resources(srv.resources),
    )
    pod = _pod([c], [], "Never", ctx)
    pmeta: dict[str, Any] = {"labels": dict(labels)}
    ps.apply_template(pod, pmeta, srv.pod_template)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(n["partition"], meta.namespace, labels, owner),
        "spec": {
            "backoffLimit": PARTITION_BACKOFF_LIMIT,
            "podFailurePolicy": partition_failure_policy(),
            "template": {"metadata": pmeta, "spec": pod},
        },
    }


DISRUPTED = {"type": "DisruptionTarget", "status": "True"}
"""The pod condition of a pod evicted, preempted or on a drained or lost node."""


def trainer_failure_policy() -> dict[str, Any]:
    """The trainer Job's ``podFailurePolicy``: a disrupted pod fails the Job at once, as
    any failed pod does (``backoffLimit: 0``; a DDP group cannot take one replaced rank,
    so ``Ignore`` would leave the others hanging on a collective), but the Job's
    ``Failed`` condition then says so (reason ``PodFailurePolicy``, naming
    ``DisruptionTarget``) even when the evicted pod is gone, and the operator restarts the
    group without counting it against ``runPolicy.backoffLimit``."""
    return {"rules": [{"action": "FailJob", "onPodConditions": [dict(DISRUPTED)]}]}


def partition_failure_policy() -> dict[str, Any]:
    """The partitioning Job's ``podFailurePolicy`` (batch/v1; its pods' ``restartPolicy``
    is ``Never``, as the API server requires): the partitioner's configuration-error exit
    status fails the Job at once (a wrong URL, a malformed graph: retrying cannot help),
    and a pod disrupted by a node drain, preemption or eviction (condition
    ``DisruptionTarget``) is replaced without counting against ``backoffLimit``."""
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": PARTITION_CONTAINER,
                    "operator": "In",
                    "values": [contract.EXIT_CONFIG_ERROR],
                },
            },
            {"action": "Ignore", "onPodConditions": [dict(DISRUPTED)]},
        ]
    }


def server_children(
    meta: t.ObjectMeta,
    num_parts: int,
    manifest: str,
    st: t.Storage,
    srv: t.Servers,
    owner_label: str,
    owner: dict[str, Any],
    ctx: DesiredContext,
    *,
    replicas: int,
    client_labels: list[dict[str, str]],
    token_hash: str | None = None,
    metrics: bool = False,
) -> list[dict[str, Any]]:
    """Headless Service, StatefulSet (ordinal = partition) and NetworkPolicy of the servers."""
    n = names(meta.name)
    ns = meta.namespace
    labels = _labels(owner_label, meta.name, contract.ROLE_SERVER, ctx)
    selector = {owner_label: meta.name, contract.LABEL_ROLE: contract.ROLE_SERVER}
    svc = headless_service(
        n["server"],
        ns,
        labels,
        owner,
        selector,
        {"rpc": contract.SERVER_PORT, "health": contract.SERVER_HEALTH_PORT},
    )
    env = ps.env_list(
        {
            "HOME": "/tmp",
            **cmds.server_env(
                srv,
                st,
                manifest=manifest,
                token_file=ps.TOKEN_FILE,
                owner=meta.name,
                metrics_port=contract.SERVER_METRICS_PORT if metrics else None,
            ),
        }
    )
    env = [*env, ps.pod_name_env(), *ps.credential_env(st)]
    c = server_container(srv, env, ctx)
    pod = _pod([c], [ps.token_volume(n["token"])], "Always", ctx)
    pmeta: dict[str, Any] = {"labels": dict(labels)}
    if token_hash:
        pmeta["annotations"] = {ANN_TOKEN_HASH: token_hash}
    mon.server_metrics(c, pmeta, metrics)
    ps.apply_template(pod, pmeta, srv.pod_template)
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(n["server"], ns, labels, owner),
        "spec": {
            "serviceName": n["server"],
            "replicas": replicas if replicas else 0,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector},
            "template": {"metadata": pmeta, "spec": pod},
        },
    }
    del num_parts  # replicas carries it (0 while suspended or waiting)
    netpol = server_network_policy(n["server"], ns, labels, owner, selector, client_labels, metrics)
    return [svc, sts, netpol]


def server_network_policy(
    name: str,
    ns: str,
    labels: dict[str, str],
    owner: dict[str, Any],
    selector: dict[str, str],
    client_labels: list[dict[str, str]],
    metrics: bool,
) -> dict[str, Any]:
    """NetworkPolicy ``name`` (the servers' StatefulSet's name): ingress of the server pods
    matched by ``selector``, only from pods carrying one of ``client_labels`` (a job's
    trainers, or every job attached to a GraphServer) to ``rpc`` and ``health``
    (``/readyz`` for a client that checks it; the kubelet's probes are always allowed),
    and with metrics the metrics port from anywhere. Egress is left open: servers read
    their partition from object storage, whose addresses no pod selector names."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name, ns, labels, owner),
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": cl}} for cl in client_labels],
                    "ports": [
                        {"protocol": "TCP", "port": contract.SERVER_PORT},
                        {"protocol": "TCP", "port": contract.SERVER_HEALTH_PORT},
                    ],
                },
                *mon.server_metrics_ingress(metrics),
            ],
        },
    }


def trainer_children(
    job: t.DistGNNJob,
    manifest: str,
    num_parts: int,
    server_name: str,
    token_secret_name: str,
    owner: dict[str, Any],
    ctx: DesiredContext,
    stage: Stage,
    gs_name: str | None,
) -> list[dict[str, Any]]:
    """Headless trainer Service, the Indexed trainer Job and the trainers' NetworkPolicy."""
    meta, spec = job.metadata, job.spec
    tr = spec.trainers
    n = names(meta.name)
    ns = meta.namespace
    labels = _labels(contract.LABEL_JOB, meta.name, contract.ROLE_TRAINER, ctx)
    selector = trainer_selector(meta.name)
    svc = headless_service(
        n["trainers"], ns, labels, owner, selector, {"rendezvous": contract.RENDEZVOUS_PORT}
    )
    servers = [
        (contract.server_dns_name(server_name, i, server_name, ns), contract.SERVER_PORT)
        for i in range(num_parts)
    ]
    master = f"{n['trainers']}-0.{n['trainers']}.{ns}.svc"
    env = cmds.trainer_env(
        job,
        servers=servers,
        manifest=manifest,
        world_size=tr.replicas,
        master_addr=master,
        token_file=ps.TOKEN_FILE,
        termination_log=contract.TERMINATION_LOG_PATH,
        metrics_port=contract.TRAINER_METRICS_PORT,
    )
    envl = ps.env_list({"HOME": "/tmp", contract.ENV_LOG_FORMAT: "json", **env})
    envl = [*envl, ps.pod_name_env(), *ps.credential_env(spec.storage)]
    c = trainer_container(job, ctx, TRAINER_CONTAINER, envl)
    c["ports"] = rendezvous_ports()
    pod = _pod([c], [ps.token_volume(token_secret_name)], "Never", ctx)
    pod["subdomain"] = n["trainers"]
    plabels = dict(labels)
    if gs_name:
        plabels[contract.LABEL_GRAPHSERVER] = gs_name
    pmeta: dict[str, Any] = {"labels": plabels}
    mon.trainer_endpoints(c, pmeta, spec.monitoring.metrics)
    tjob = trainer_job(job, ctx, stage, owner, labels, pod, pmeta, tr.replicas)
    netpol = trainer_network_policy(meta.name, ns, labels, owner, spec.monitoring.metrics, 1)
    return [svc, tjob, netpol]


def trainer_selector(job_name: str) -> dict[str, str]:
    """Labels every trainer pod of job ``job_name`` carries, and no other pod: server and
    partitioner pods have another role, other jobs' pods another job label, and a
    GraphServer's pods no job label of ours (our labels win over a pod template's)."""
    return {contract.LABEL_JOB: job_name, contract.LABEL_ROLE: contract.ROLE_TRAINER}


def trainer_network_policy(
    job_name: str,
    ns: str,
    labels: dict[str, str],
    owner: dict[str, Any],
    metrics: bool,
    metrics_ports: int,
) -> dict[str, Any]:
    """NetworkPolicy ``NAME-trainers``: ingress of the job's trainer pods (with
    ``trainers.colocate`` each also holds a graph server), for every topology.

    From this job's other trainer pods, every port: rank 0's rendezvous port, the ports
    the DDP backend's peers connect to (gloo and NCCL listen on ephemeral ports, so no
    port list can be given) and, co-located, the graph server's ``rpc`` port. From the
    operator's pods, only ``progress``; with metrics, the ``metrics_ports`` trainer
    metrics ports (one per trainer container) from anywhere. Nothing else: graph servers
    only answer, the health port needs only the kubelet (always allowed), and the
    containers of a pod talk over loopback.
    """
    selector = trainer_selector(job_name)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(names(job_name)["trainers"], ns, labels, owner),
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": dict(selector)}}]},
                *mon.trainer_ingress(metrics, metrics_ports),
            ],
        },
    }


def trainer_container(
    job: t.DistGNNJob, ctx: DesiredContext, name: str, env: list[dict[str, Any]]
) -> dict[str, Any]:
    """A trainer container (image, command, token mount, resources) with ``env``."""
    tr = job.spec.trainers
    return _container(
        name,
        tr.image or ctx.runtime_image,
        tr.image_pull_policy or ctx.image_pull_policy,
        cmds.trainer_command(job),
        env,
        [ps.token_mount()],
        ps.resources(tr.resources, tr.gpus),
    )


def rendezvous_ports() -> list[dict[str, Any]]:
    """The ports of the container rank 0 runs in (torch.distributed's rendezvous)."""
    return [{"name": "rendezvous", "containerPort": contract.RENDEZVOUS_PORT, "protocol": "TCP"}]


def trainer_job(
    job: t.DistGNNJob,
    ctx: DesiredContext,
    stage: Stage,
    owner: dict[str, Any],
    labels: dict[str, str],
    pod: dict[str, Any],
    pmeta: dict[str, Any],
    completions: int,
) -> dict[str, Any]:
    """The Indexed trainer Job of ``completions`` pods, after the scheduling policy and
    the user's pod template are applied to ``pod`` / ``pmeta``."""
    _scheduling(pod, pmeta, job, ctx)
    ps.apply_template(pod, pmeta, job.spec.trainers.pod_template)
    jmeta = _meta(names(job.metadata.name)["trainers"], job.metadata.namespace, labels, owner)
    jmeta["annotations"] = {ANN_RESTARTS: str(stage.restarts)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": jmeta,
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": completions,
            "backoffLimit": 0,
            "podFailurePolicy": trainer_failure_policy(),
            "template": {"metadata": pmeta, "spec": pod},
        },
    }


def _scheduling(
    pod: dict[str, Any], pmeta: dict[str, Any], job: t.DistGNNJob, ctx: DesiredContext
) -> None:
    sp = job.spec.run_policy.scheduling_policy
    if sp is None:
        return
    if sp.priority_class_name:
        pod["priorityClassName"] = sp.priority_class_name
    if sp.queue:
        pmeta["labels"][QUEUE_LABEL] = sp.queue
    if sp.gang is not None and sp.gang.enabled:
        pmeta["labels"][POD_GROUP_LABEL] = names(job.metadata.name)["podgroup"]
        pod["schedulerName"] = sp.gang.scheduler or ctx.gang_scheduler


def pod_group(
    job: t.DistGNNJob, owner: dict[str, Any], ctx: DesiredContext, own_servers: bool
) -> dict[str, Any] | None:
    """A scheduler-plugins PodGroup when gang scheduling is enabled."""
    sp = job.spec.run_policy.scheduling_policy
    if sp is None or sp.gang is None or not sp.gang.enabled:
        return None
    total = job.spec.trainers.replicas + (job.spec.partitioning.num_parts if own_servers else 0)
    if job.spec.trainers.colocate:  # one pod per partition: its server and its trainers
        total = job.spec.partitioning.num_parts
    labels = _labels(contract.LABEL_JOB, job.metadata.name, None, ctx)
    # scheduler-plugins' PodGroupSpec has minMember, minResources and scheduleTimeoutSeconds
    # only (a structural CRD: anything else is pruned); the priority is on the pods.
    spec: dict[str, Any] = {"minMember": sp.gang.min_available or total}
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": _meta(
            names(job.metadata.name)["podgroup"], job.metadata.namespace, labels, owner
        ),
        "spec": spec,
    }


def desired_job_children(
    job: t.DistGNNJob,
    ctx: DesiredContext,
    *,
    graphserver: GraphServerInfo | None = None,
    token: str | None = None,
    stage: Stage | None = None,
) -> list[dict[str, Any]]:
    """Every child object the job should have now (raises ConfigError for a bad spec)."""
    stage = stage or Stage()
    meta, spec = job.metadata, job.spec
    owner = owner_ref("DistGNNJob", meta)
    n = names(meta.name)
    suspended = spec.run_policy.suspend
    out: list[dict[str, Any]] = []
    pg = pod_group(job, owner, ctx, own_servers=spec.graph.graph_server is None)
    if pg is not None:
        out.append(pg)
    if spec.graph.graph_server is not None:
        if graphserver is None:
            return out
        manifest, num_parts = graphserver.manifest_url, graphserver.num_parts
        server_name, secret_name = names(graphserver.name)["server"], graphserver.token_secret
        servers_up = stage.servers_ready
    else:
        graph_objs, manifest = _graph_children(contract.LABEL_JOB, meta, spec, owner, ctx, token)
        out += graph_objs
        num_parts, server_name, secret_name = spec.partitioning.num_parts, n["server"], n["token"]
    if spec.graph.graph_server is None and spec.trainers.colocate:
        # the servers are sidecars of the trainer pods (distgnn_operator.colocate)
        from distgnn_operator.colocate import colocated_trainer_children

        keep_trainers = not (stage.finished and spec.run_policy.clean_pod_policy == "All")
        tchildren = colocated_trainer_children(
            job, manifest, num_parts, secret_name, owner, ctx, stage
        )
        out += [tchildren[0], tchildren[2]]  # the Service and NetworkPolicy
        if not suspended and keep_trainers and (stage.partitioned or stage.trainers_started):
            out.append(tchildren[1])
        return out
    if spec.graph.graph_server is None:
        keep_servers = not (stage.finished and spec.run_policy.clean_pod_policy != "None")
        replicas = num_parts if stage.partitioned and not suspended and keep_servers else 0
        trainer_sel = trainer_selector(meta.name)
        out += server_children(
            meta,
            num_parts,
            manifest,
            spec.storage,
            spec.servers,
            contract.LABEL_JOB,
            owner,
            ctx,
            replicas=replicas,
            client_labels=[trainer_sel],
            token_hash=stage.token_hash,
            metrics=spec.monitoring.metrics,
        )
        servers_up = stage.partitioned and (stage.servers_ready or pg is not None)
    keep_trainers = not (stage.finished and spec.run_policy.clean_pod_policy == "All")
    tchildren = trainer_children(
        job,
        manifest,
        num_parts,
        server_name,
        secret_name,
        owner,
        ctx,
        stage,
        spec.graph.graph_server.name if spec.graph.graph_server else None,
    )
    out += [tchildren[0], tchildren[2]]  # the Service and NetworkPolicy
    started = servers_up or stage.finished or stage.trainers_started
    if not suspended and keep_trainers and started:
        out.append(tchildren[1])
    return out


def _graph_children(
    lbl: str,
    meta: t.ObjectMeta,
    spec: t.DistGNNJobSpec | t.GraphServerSpec,
    owner: dict[str, Any],
    ctx: DesiredContext,
    token: str | None,
) -> tuple[list[dict[str, Any]], str]:
    """What a DistGNNJob with its own servers and a GraphServer both own for their graph:
    the token Secret and, for a source graph, the partitioning Job; with the manifest URL."""
    out = [
        token_secret(
            names(meta.name)["token"],
            meta.namespace,
            _labels(lbl, meta.name, None, ctx),
            owner,
            token,
        )
    ]
    manifest = cmds.manifest_url(
        meta.name, spec.graph, spec.partitioning, output_url(meta, spec.partitioning, ctx)
    )
    if spec.graph.source is not None:
        out.append(
            partition_job(
                meta,
                spec.graph,
                spec.partitioning,
                spec.storage,
                spec.servers,
                _labels(lbl, meta.name, contract.ROLE_PARTITIONER, ctx),
                owner,
                ctx,
                train_mask=cmds.balance_mask(spec),
            )
        )
    return out, manifest


def desired_graphserver_children(
    gs: t.GraphServer, ctx: DesiredContext, *, token: str | None = None, stage: Stage | None = None
) -> list[dict[str, Any]]:
    """Every child object the GraphServer should have now."""
    stage = stage or Stage()
    meta, spec = gs.metadata, gs.spec
    owner = owner_ref("GraphServer", meta)
    lbl = contract.LABEL_GRAPHSERVER
    out, manifest = _graph_children(lbl, meta, spec, owner, ctx, token)
    clients = [{lbl: meta.name, contract.LABEL_ROLE: contract.ROLE_TRAINER}]
    out += server_children(
        meta,
        spec.partitioning.num_parts,
        manifest,
        spec.storage,
        spec.servers,
        lbl,
        owner,
        ctx,
        replicas=spec.partitioning.num_parts if stage.partitioned else 0,
        client_labels=clients,
        token_hash=stage.token_hash,
        metrics=spec.monitoring.metrics,
    )
    return out
