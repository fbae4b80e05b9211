"""Co-located trainers (``spec.trainers.colocate``): each partition's graph server runs
in the pod of that partition's trainers.

The trainer Indexed Job has one pod per partition (completion index = partition). Its
graph server is a **native sidecar** (an init container with ``restartPolicy: Always``,
Kubernetes >= 1.29): it starts first, the trainers start once its ``startupProbe``
(``/readyz``: partition loaded) passes, and the kubelet stops it when the trainers have
exited, so the pod (and the Job) completes. ``replicas / numParts`` trainer containers
share the pod; rank = pod index * that + container index (``DISTGNN_TRAINERS_PER_POD``
and ``LOCAL_RANK``). Server and trainers mount the pod's memory-backed ``/dev/shm``
volume: the trainers map the server's store read-only (``DISTGNN_LOCAL_STORE``) and read
the other partitions from the other pods' servers over TCP, through the trainer Service
(its ``rpc`` port). No server StatefulSet, Service or NetworkPolicy is created; the
trainers' NetworkPolicy ``NAME-trainers`` (:func:`~distgnn_operator.desired.trainer_network_policy`,
as for any job) also admits the other pods' trainers to the server's ``rpc`` port.
On an API server older than 1.29 the reconciler fails the job (``SidecarsUnsupported``).
"""

from __future__ import annotations

from typing import Any

from distgnn import contract
from distgnn.api import commands as cmds
from distgnn.api import types as t
from distgnn_operator import desired as d
from distgnn_operator import monitoring as mon
from distgnn_operator import podspec as ps

INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
"""The pod's completion index (= its partition), through the downward API."""
STARTUP_FAILURES = 1800
"""Startup probe attempts (every 2 s): one hour to load a partition."""


def index_env(name: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}}


def server_sidecar(job: t.DistGNNJob, manifest: str, ctx: d.DesiredContext) -> dict[str, Any]:
    """The partition's graph server as a native sidecar of the trainer pod."""
    spec = job.spec
    srv, st = spec.servers, spec.storage
    env = ps.env_list(
        {
            "HOME": "/tmp",
            **cmds.server_env(
                srv, st, manifest=manifest, token_file=ps.TOKEN_FILE, owner=job.metadata.name
            ),
        }
    )
    env = [*env, index_env(contract.ENV_PART_ID), *ps.credential_env(st)]
    c = d.server_container(srv, env, ctx)
    c["restartPolicy"] = "Always"  # a native sidecar (Kubernetes 1.29+)
    c["startupProbe"] = {
        "httpGet": {"path": "/readyz", "port": "health", "scheme": "HTTP"},
        "periodSeconds": 2,
        "timeoutSeconds": 3,
        "failureThreshold": STARTUP_FAILURES,
    }
    return c


def colocated_trainer_children(
    job: t.DistGNNJob,
    manifest: str,
    num_parts: int,
    token_secret_name: str,
    owner: dict[str, Any],
    ctx: d.DesiredContext,
    stage: d.Stage,
) -> list[dict[str, Any]]:
    """Headless trainer Service (rendezvous and rpc ports) and the Indexed trainer Job,
    one pod per partition with its server as a sidecar."""
    meta, spec = job.metadata, job.spec
    tr = spec.trainers
    n = d.names(meta.name)
    ns = meta.namespace
    labels = d._labels(contract.LABEL_JOB, meta.name, contract.ROLE_TRAINER, ctx)
    selector = d.trainer_selector(meta.name)
    svc = d.headless_service(
        n["trainers"],
        ns,
        labels,
        owner,
        selector,
        {"rendezvous": contract.RENDEZVOUS_PORT, "rpc": contract.SERVER_PORT},
    )
    hosts = [f"{n['trainers']}-{i}.{n['trainers']}.{ns}.svc" for i in range(num_parts)]
    per_pod = tr.replicas // num_parts
    env = cmds.trainer_env(
        job,
        servers=[(h, contract.SERVER_PORT) for h in hosts],
        manifest=manifest,
        world_size=tr.replicas,
        master_addr=hosts[0],
        token_file=ps.TOKEN_FILE,
        termination_log=contract.TERMINATION_LOG_PATH,
        metrics_port=contract.TRAINER_METRICS_PORT,
    )
    pmeta: dict[str, Any] = {"labels": dict(labels)}
    containers = []
    for j in range(per_pod):
        e = {
            "HOME": "/tmp",
            contract.ENV_LOG_FORMAT: "json",
            **env,
            contract.ENV_LOCAL_RANK: str(j),
            contract.ENV_TRAINERS_PER_POD: str(per_pod),
            contract.ENV_LOCAL_STORE: "/dev/shm",
        }
        if j and contract.ENV_METRICS_PORT in e:  # containers of a pod share its ports
            e[contract.ENV_METRICS_PORT] = str(contract.TRAINER_METRICS_PORT + j)
        envl = [
            *ps.env_list(e),
            index_env(contract.ENV_LOCAL_PARTITION),
            ps.pod_name_env(),
            *ps.credential_env(spec.storage),
        ]
        c = d.trainer_container(
            job, ctx, d.TRAINER_CONTAINER if j == 0 else f"{d.TRAINER_CONTAINER}-{j}", envl
        )
        if j == 0:
            c["ports"] = d.rendezvous_ports()
            mon.trainer_endpoints(c, pmeta, spec.monitoring.metrics)
        containers.append(c)
    pod = d._pod(containers, [ps.token_volume(token_secret_name)], "Never", ctx)
    pod["initContainers"] = [server_sidecar(job, manifest, ctx)]
    pod["subdomain"] = n["trainers"]
    tjob = d.trainer_job(job, ctx, stage, owner, labels, pod, pmeta, num_parts)
    netpol = d.trainer_network_policy(
        meta.name, ns, labels, owner, spec.monitoring.metrics, per_pod
    )
    return [svc, tjob, netpol]
