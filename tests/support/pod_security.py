"""Checker for the Kubernetes "restricted" Pod Security Standard, plus our own stricter rule.

Implemented from the rule list of https://kubernetes.io/docs/concepts/security/pod-security-standards/
(the "baseline" controls, which "restricted" includes, then the "restricted" ones), so that
manifests can be checked offline, without an API server running the PodSecurity admission.
On top of the standard, :func:`violations` requires ``readOnlyRootFilesystem: true`` on every
container (pass ``read_only_root=False`` to check the standard alone).

Accepts a bare pod spec (a dict with ``containers``) or a workload: Pod, Job, CronJob,
Deployment, StatefulSet, DaemonSet, ReplicaSet, ReplicationController, PodTemplate.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["RESTRICTED_VOLUME_TYPES", "SAFE_SYSCTLS", "pod_of", "violations"]

# Restricted: "Volume Types" — every volume must be one of these.
RESTRICTED_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
# Baseline: "Sysctls" — the safe set.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
# Baseline: "SELinux" — allowed types (empty/unset is allowed too).
ALLOWED_SELINUX_TYPES = frozenset(
    {"container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
# Restricted: "Capabilities" — the only capability that may be added.
ALLOWED_ADDED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
ALLOWED_SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
CONTAINER_FIELDS = ("initContainers", "containers", "ephemeralContainers")

_TEMPLATE_KINDS = frozenset(
    {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController", "Job"}
)


def pod_of(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """``(pod metadata, pod spec)`` of a pod spec, a Pod or a workload with a pod template."""
    kind = obj.get("kind")
    if kind is None and "containers" in obj:
        return {}, obj
    if kind == "Pod":
        return obj.get("metadata") or {}, obj["spec"]
    if kind in _TEMPLATE_KINDS:
        template = obj["spec"]["template"]
    elif kind == "CronJob":
        template = obj["spec"]["jobTemplate"]["spec"]["template"]
    elif kind == "PodTemplate":
        template = obj["template"]
    else:
        raise ValueError(f"not a pod spec or a workload with a pod template: kind={kind!r}")
    return template.get("metadata") or {}, template["spec"]


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for field in CONTAINER_FIELDS:
        for c in spec.get(field) or []:
            yield f"{field}[{c.get('name', '?')}]", c


def _sc(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("securityContext") or {}


def _check_selinux(where: str, opts: Mapping[str, Any] | None) -> list[str]:
    out: list[str] = []
    if not opts:
        return out
    if opts.get("type") and opts["type"] not in ALLOWED_SELINUX_TYPES:
        out.append(f"{where}.seLinuxOptions.type={opts['type']!r} is not an allowed type")
    for key in ("user", "role"):
        if opts.get(key):
            out.append(f"{where}.seLinuxOptions.{key} must not be set")
    return out


def _check_common(where: str, sc: Mapping[str, Any]) -> list[str]:
    """Rules written the same way at pod and container level."""
    out = _check_selinux(where, sc.get("seLinuxOptions"))
    if (sc.get("windowsOptions") or {}).get("hostProcess"):
        out.append(f"{where}.windowsOptions.hostProcess must not be true")
    if sc.get("runAsUser") == 0:
        out.append(f"{where}.runAsUser must not be 0 (root)")
    if sc.get("runAsNonRoot") is False:
        out.append(f"{where}.runAsNonRoot must not be false")
    seccomp = (sc.get("seccompProfile") or {}).get("type")
    if seccomp is not None and seccomp not in ALLOWED_SECCOMP_TYPES:
        out.append(f"{where}.seccompProfile.type={seccomp!r} must be RuntimeDefault or Localhost")
    apparmor = (sc.get("appArmorProfile") or {}).get("type")
    if apparmor == "Unconfined":
        out.append(f"{where}.appArmorProfile.type must not be Unconfined")
    return out


def violations(obj: Mapping[str, Any], *, read_only_root: bool = True) -> list[str]:
    """Every violation of the "restricted" profile (and of readOnlyRootFilesystem), as text.

    An empty list means the pod passes.
    """
    meta, spec = pod_of(obj)
    out: list[str] = []
    pod_sc = _sc(spec)

    # Baseline: host namespaces.
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"spec.{key} must not be true")
    # Pod-level security context (SELinux, HostProcess, root user, seccomp, AppArmor).
    out += _check_common("spec.securityContext", pod_sc)
    # Baseline: sysctls.
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"spec.securityContext.sysctls: {sysctl.get('name')!r} is not a safe sysctl")
    # Baseline: AppArmor annotations.
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith(APPARMOR_ANNOTATION_PREFIX) and not (
            value == "runtime/default" or str(value).startswith("localhost/")
        ):
            out.append(f"metadata.annotations[{key}]={value!r} is not an allowed AppArmor profile")
    # Baseline: hostPath volumes; restricted: only the allowed volume types.
    for vol in spec.get("volumes") or []:
        types = [k for k in vol if k != "name"]
        for t in types:
            if t == "hostPath":
                out.append(f"spec.volumes[{vol.get('name')}] must not be a hostPath volume")
            elif t not in RESTRICTED_VOLUME_TYPES:
                out.append(f"spec.volumes[{vol.get('name')}] has a disallowed type {t!r}")

    pod_non_root = pod_sc.get("runAsNonRoot") is True
    pod_seccomp_ok = (pod_sc.get("seccompProfile") or {}).get("type") in ALLOWED_SECCOMP_TYPES
    containers = list(_containers(spec))
    if not spec.get("containers"):
        out.append("spec.containers is empty")
    for where, c in containers:
        sc = _sc(c)
        csc = f"{where}.securityContext"
        out += _check_common(csc, sc)
        if sc.get("privileged"):
            out.append(f"{csc}.privileged must not be true")
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"{csc}.procMount must be Default")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{csc}.allowPrivilegeEscalation must be false")
        if not pod_non_root and sc.get("runAsNonRoot") is not True:
            out.append(f"{csc}.runAsNonRoot must be true (or set on the pod)")
        if (
            not pod_seccomp_ok
            and (sc.get("seccompProfile") or {}).get("type") not in ALLOWED_SECCOMP_TYPES
        ):
            out.append(
                f"{csc}.seccompProfile.type must be RuntimeDefault or Localhost (or set on the pod)"
            )
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{csc}.capabilities.drop must include ALL")
        for cap in caps.get("add") or []:
            if cap not in ALLOWED_ADDED_CAPABILITIES:
                out.append(f"{csc}.capabilities.add: {cap!r} is not allowed")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"{where}.ports: hostPort {port['hostPort']} is not allowed")
        if read_only_root and sc.get("readOnlyRootFilesystem") is not True:
            out.append(f"{csc}.readOnlyRootFilesystem must be true")
    return out
