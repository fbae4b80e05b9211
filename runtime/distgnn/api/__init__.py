"""DistGNNJob / GraphServer API: types, schema, parsing and the commands they imply.

Torch-free and kopf-free; shared by ``distgnn run`` and the operator.
"""

from __future__ import annotations

from distgnn.api.commands import (
    SERVER_COMMAND,
    graph_name,
    inference_output_url,
    manifest_url,
    partition_command,
    server_env,
    storage_env,
    trainer_command,
    trainer_env,
)
from distgnn.api.types import (
    App,
    DistGNNJob,
    DistGNNJobSpec,
    DistGNNJobStatus,
    GraphServer,
    GraphServerSpec,
    GraphServerStatus,
    JobGraph,
    ObjectMeta,
    Partitioning,
    RunPolicy,
    ServerGraph,
    Servers,
    Storage,
    Trainers,
)
from distgnn.api.validate import parse_graphserver, parse_job, parse_manifest, to_dict

__all__ = [
    "SERVER_COMMAND",
    "App",
    "DistGNNJob",
    "DistGNNJobSpec",
    "DistGNNJobStatus",
    "GraphServer",
    "GraphServerSpec",
    "GraphServerStatus",
    "JobGraph",
    "ObjectMeta",
    "Partitioning",
    "RunPolicy",
    "ServerGraph",
    "Servers",
    "Storage",
    "Trainers",
    "graph_name",
    "inference_output_url",
    "manifest_url",
    "parse_graphserver",
    "parse_job",
    "parse_manifest",
    "partition_command",
    "server_env",
    "storage_env",
    "to_dict",
    "trainer_command",
    "trainer_env",
]
