"""What a real API server stores for a built-in object it was sent: the documented defaults
(``k8s.io/kubernetes/pkg/apis/{core,apps,networking}/v1/defaults.go``), the ``omitempty``
fields Go's encoder drops when they hold their zero value, quantities in canonical form.

kmock's emulator stores what it is sent (plus the few rewrites of
:func:`tests.support.emulator.server_rewrites`); this is the fuller model the drift tests
compare against, so a field the operator sets in a form the API server rewrites, or a
default it would report as a change, shows up offline as a PATCH on every pass.
"""

from __future__ import annotations

import copy
from typing import Any

from distgnn_operator.quantity import QuantityError, canonical

Obj = dict[str, Any]

# Fields Go drops when empty (``json:",omitempty"`` on a non-pointer string / bool / list).
_OMIT_EMPTY_STRING = {
    "EnvVar": ("value",),
    "Toleration": ("key", "operator", "value", "effect"),
}


def _quantities(m: Obj | None) -> Obj | None:
    if not m:
        return None
    out = {}
    for k, v in m.items():
        try:
            out[k] = canonical(str(v))
        except QuantityError:
            out[k] = v
    return out


def _probe(p: Obj | None) -> None:
    if p is None:
        return
    p.setdefault("timeoutSeconds", 1)
    p.setdefault("periodSeconds", 10)
    p.setdefault("successThreshold", 1)
    p.setdefault("failureThreshold", 3)
    if "httpGet" in p:
        p["httpGet"].setdefault("scheme", "HTTP")
        p["httpGet"].setdefault("path", "/")


def _container(c: Obj) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    tag = c.get("image", "").rpartition(":")[2]
    c.setdefault("imagePullPolicy", "Always" if tag in ("", "latest") else "IfNotPresent")
    res = c.setdefault("resources", {})
    for k in ("requests", "limits"):
        q = _quantities(res.get(k))
        if q is None:
            res.pop(k, None)
        else:
            res[k] = q
    for p in c.get("ports") or []:
        p.setdefault("protocol", "TCP")
    for e in c.get("env") or []:
        for k in _OMIT_EMPTY_STRING["EnvVar"]:
            if e.get(k) == "":
                del e[k]
        ref = (e.get("valueFrom") or {}).get("fieldRef")
        if ref is not None:
            ref.setdefault("apiVersion", "v1")
    for key in ("readinessProbe", "livenessProbe", "startupProbe"):
        _probe(c.get(key))
    for key in ("command", "args", "env", "ports", "volumeMounts"):
        if key in c and not c[key]:
            del c[key]
    for m in c.get("volumeMounts") or []:
        if m.get("readOnly") is False:
            del m["readOnly"]


def pod_spec(spec: Obj) -> None:
    """SetDefaults_PodSpec and friends, in place."""
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("enableServiceLinks", True)
    # the deprecated twin: v1 conversion reads serviceAccount when serviceAccountName is
    # unset, and writes serviceAccountName back into it
    if spec.get("serviceAccount") and not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec["serviceAccount"]
    if spec.get("serviceAccountName"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    for c in (spec.get("initContainers") or []) + spec.get("containers", []):
        _container(c)
    for v in spec.get("volumes") or []:
        if "secret" in v:
            v["secret"].setdefault("defaultMode", 0o644)
        if "emptyDir" in v and v["emptyDir"].get("sizeLimit") is not None:
            v["emptyDir"]["sizeLimit"] = canonical(str(v["emptyDir"]["sizeLimit"]))
        if "emptyDir" in v and v["emptyDir"].get("medium") == "":
            del v["emptyDir"]["medium"]
    for t in spec.get("tolerations") or []:
        for k in _OMIT_EMPTY_STRING["Toleration"]:
            if t.get(k) == "":
                del t[k]
    for key in ("tolerations", "initContainers", "volumes", "imagePullSecrets"):
        if key in spec and not spec[key]:
            del spec[key]
    if "nodeSelector" in spec and not spec["nodeSelector"]:
        del spec["nodeSelector"]


def _template(tpl: Obj) -> None:
    tpl.setdefault("metadata", {})["creationTimestamp"] = None
    pod_spec(tpl["spec"])


def _statefulset(spec: Obj) -> None:
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault(
        "persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"}
    )
    _template(spec["template"])


def _service(spec: Obj) -> None:
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    ip = spec.setdefault("clusterIP", "10.96.0.10")
    spec.setdefault("clusterIPs", [ip])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    for p in spec.get("ports") or []:
        p.setdefault("protocol", "TCP")
        p.setdefault("targetPort", p["port"])
    if spec.get("publishNotReadyAddresses") is False:
        del spec["publishNotReadyAddresses"]


def _network_policy(spec: Obj) -> None:
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress"] + (["Egress"] if spec.get("egress") else [])
    for rule in (spec.get("ingress") or []) + (spec.get("egress") or []):
        for p in rule.get("ports") or []:
            p.setdefault("protocol", "TCP")
        for key in ("from", "to", "ports"):
            if key in rule and not rule[key]:
                del rule[key]


def _job(spec: Obj) -> None:
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", spec["parallelism"])
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    # SetDefaults_Job: Failed with a podFailurePolicy (pods are replaced only once
    # terminal), whose onPodConditions patterns get status True
    policy = spec.get("podFailurePolicy")
    spec.setdefault("podReplacementPolicy", "Failed" if policy else "TerminatingOrFailed")
    for rule in (policy or {}).get("rules") or []:
        for pattern in rule.get("onPodConditions") or []:
            pattern.setdefault("status", "True")
    spec.setdefault("manualSelector", False)
    _template(spec["template"])


SPEC_DEFAULTS = {
    "StatefulSet": _statefulset,
    "Service": _service,
    "NetworkPolicy": _network_policy,
    "Job": _job,
}


def apply_defaults(obj: Obj) -> None:
    """Default and normalise the ``spec`` of a created built-in object, in place (kinds
    other than those in :data:`SPEC_DEFAULTS` are left alone)."""
    fn = SPEC_DEFAULTS.get(str(obj.get("kind")))
    if fn is not None and isinstance(obj.get("spec"), dict):
        fn(obj["spec"])


def stored(sent: Obj) -> Obj:
    """The object as the API server stores and returns it after a create of ``sent``."""
    obj = copy.deepcopy(sent)
    md = obj["metadata"]
    md.update(uid="3f6c-uid", resourceVersion="42", generation=1)
    md["creationTimestamp"] = "2026-01-01T00:00:00Z"
    md["managedFields"] = [{"manager": "distgnn-operator", "operation": "Update"}]
    apply_defaults(obj)
    kind = obj["kind"]
    if kind == "StatefulSet":
        obj["status"] = {"replicas": 0, "availableReplicas": 0}
    elif kind == "Service":
        obj["status"] = {"loadBalancer": {}}
    elif kind == "Secret":
        obj.pop("stringData", None)
        obj["data"] = {"token": "dA=="}
    return obj
