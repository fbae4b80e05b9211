"""Pod building blocks shared by every child: the restricted security profile, volumes,
storage credentials, user overrides. Pure functions returning plain dicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distgnn import contract
from distgnn.api import types as t

UID = 1000
TMP_VOLUME = "tmp"
SHM_VOLUME = "dshm"
TOKEN_VOLUME = "token"


@dataclass(frozen=True)
class DesiredContext:
    """Operator settings the builders need (no globals: passed in explicitly)."""

    runtime_image: str = "ghcr.io/distgnn/distgnn:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    partitions_url: str | None = None
    """Default ``partitioning.outputURL`` (``<url>/<namespace>/<name>``) when a job gives none."""
    gang_scheduler: str = "scheduler-plugins-scheduler"
    shm_size_limit: str = "1Gi"
    extra_labels: dict[str, str] = field(default_factory=dict)
    image_pull_secrets: tuple[str, ...] = ()
    """Names of the Secrets every pod pulls its images with (the chart's
    ``runtimeImage.pullSecrets``), unless the pod template gives its own."""


def image_pull_secrets(names: tuple[str, ...] | list[str]) -> list[dict[str, str]]:
    """A pod's ``imagePullSecrets`` (LocalObjectReferences), in the order given, each once."""
    return [{"name": n} for n in dict.fromkeys(names)]


def pod_security_context() -> dict[str, Any]:
    """Pod-level part of the Kubernetes "restricted" Pod Security profile."""
    return {
        "runAsNonRoot": True,
        "runAsUser": UID,
        "runAsGroup": UID,
        "fsGroup": UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """Container-level part of the restricted profile, with a read-only root file system."""
    return {
        "runAsNonRoot": True,
        "runAsUser": UID,
        "runAsGroup": UID,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def scratch_volumes(ctx: DesiredContext) -> list[dict[str, Any]]:
    """/tmp and /dev/shm as emptyDirs (the root file system is read-only)."""
    return [
        {"name": TMP_VOLUME, "emptyDir": {}},
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": ctx.shm_size_limit}},
    ]


def scratch_mounts() -> list[dict[str, Any]]:
    return [
        {"name": TMP_VOLUME, "mountPath": "/tmp"},
        {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
    ]


def token_volume(secret: str) -> dict[str, Any]:
    return {
        "name": TOKEN_VOLUME,
        "secret": {
            "secretName": secret,
            "defaultMode": 0o440,
            "items": [{"key": contract.TOKEN_KEY, "path": contract.TOKEN_KEY}],
        },
    }


def token_mount() -> dict[str, Any]:
    return {"name": TOKEN_VOLUME, "mountPath": contract.TOKEN_MOUNT_DIR, "readOnly": True}


TOKEN_FILE = f"{contract.TOKEN_MOUNT_DIR}/{contract.TOKEN_KEY}"


def env_var(name: str, value: str) -> dict[str, Any]:
    """A literal variable; an empty value is left out (the API server drops ``value: ""``,
    so sending it would read back as a change and be patched on every pass)."""
    return {"name": name, "value": value} if value != "" else {"name": name}


def env_list(env: dict[str, str]) -> list[dict[str, Any]]:
    """Literal variables, sorted by name for stable output."""
    return [env_var(k, v) for k, v in sorted(env.items())]


def credential_env(st: t.Storage) -> list[dict[str, Any]]:
    """S3 credentials from the Secret via secretKeyRef; the values never leave the Secret."""
    cs = st.credentials_secret
    if cs is None:
        return []
    return [
        {
            "name": contract.ENV_S3_KEY,
            "valueFrom": {"secretKeyRef": {"name": cs.name, "key": cs.access_key_id_key}},
        },
        {
            "name": contract.ENV_S3_SECRET,
            "valueFrom": {"secretKeyRef": {"name": cs.name, "key": cs.secret_access_key_key}},
        },
    ]


def pod_name_env() -> dict[str, Any]:
    return {
        "name": contract.ENV_POD_NAME,
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
    }


def resources(res: t.Resources | None, gpus: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if res is not None and res.requests:
        out["requests"] = {k: str(v) for k, v in sorted(res.requests.items())}
    if res is not None and res.limits:
        out["limits"] = {k: str(v) for k, v in sorted(res.limits.items())}
    if gpus:
        out.setdefault("limits", {})["nvidia.com/gpu"] = str(gpus)
    return out


def apply_template(pod: dict[str, Any], meta: dict[str, Any], tpl: t.PodTemplate | None) -> None:
    """Apply the user's bounded pod overrides; our own labels always win."""
    if tpl is None:
        return
    spec = pod
    if tpl.labels:
        meta["labels"] = {**tpl.labels, **meta.get("labels", {})}
    if tpl.annotations:
        meta["annotations"] = {**tpl.annotations, **meta.get("annotations", {})}
    if tpl.node_selector:
        spec["nodeSelector"] = dict(sorted(tpl.node_selector.items()))
    if tpl.tolerations:
        spec["tolerations"] = [
            {
                k: v
                for k, v in {
                    "key": x.key,
                    "operator": x.operator,
                    "value": x.value,
                    "effect": x.effect,
                    "tolerationSeconds": x.toleration_seconds,
                }.items()
                if v is not None and v != ""  # the API server drops empty strings
            }
            for x in tpl.tolerations
        ]
    if tpl.affinity:
        spec["affinity"] = tpl.affinity
    if tpl.priority_class_name:
        spec["priorityClassName"] = tpl.priority_class_name
    if tpl.service_account_name:
        spec["serviceAccountName"] = tpl.service_account_name
    if tpl.image_pull_secrets is not None:  # replaces the operator's default; [] for none
        secrets = image_pull_secrets([x.name for x in tpl.image_pull_secrets])
        spec.pop("imagePullSecrets", None)
        if secrets:
            spec["imagePullSecrets"] = secrets
    if tpl.env:
        for c in spec["containers"]:
            c["env"] = c["env"] + [env_var(e.name, e.value) for e in tpl.env]
