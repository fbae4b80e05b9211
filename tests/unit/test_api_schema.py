"""The CRD schemas and parse_job enforce the same rules; generated files are fresh."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from distgnn.api import generate, parse_graphserver, parse_job, parse_manifest, schema, to_dict
from distgnn.errors import ConfigError

JOB: dict[str, Any] = {
    "apiVersion": "distgnn.dev/v1alpha1",
    "kind": "DistGNNJob",
    "metadata": {"name": "cora", "namespace": "ml"},
    "spec": {
        "graph": {"source": {"url": "s3://graphs/cora.npz"}},
        "partitioning": {"numParts": 2, "outputURL": "s3://graphs/parts"},
        "storage": {"endpoint": "http://s3:8333", "credentialsSecret": {"name": "s3"}},
        "servers": {"resources": {"limits": {"cpu": 2, "memory": "4Gi"}}},
        "trainers": {"replicas": 2, "app": {"name": "node-classification", "epochs": 3}},
    },
}
GS: dict[str, Any] = {
    "apiVersion": "distgnn.dev/v1alpha1",
    "kind": "GraphServer",
    "metadata": {"name": "cora-gs"},
    "spec": {"graph": {"partitions": {"manifestURL": "s3://graphs/parts/cora.json"}}},
}


def _validator(kind: str) -> jsonschema.Draft4Validator:
    crd = schema.job_crd() if kind == "DistGNNJob" else schema.graphserver_crd()
    return jsonschema.Draft4Validator(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def _walk(s: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, s
    for k, v in s.get("properties", {}).items():
        yield from _walk(v, f"{path}.{k}")
    if "items" in s:
        yield from _walk(s["items"], f"{path}[]")
    if isinstance(s.get("additionalProperties"), dict):
        yield from _walk(s["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize(
    "crd", [schema.job_crd(), schema.graphserver_crd()], ids=["job", "graphserver"]
)
def test_every_string_list_and_map_is_bounded(crd: dict[str, Any]) -> None:
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    nodes = list(_walk(root, ""))
    assert len(nodes) > 40
    for path, s in nodes:
        assert (
            "description" in s
            or path.endswith(("apiVersion", "kind", "metadata", "{}", "[]"))
            or path == ""
        ), path
        if s.get("type") == "string" or s.get("x-kubernetes-int-or-string"):
            assert "maxLength" in s, path
        if s.get("type") == "array":
            assert "maxItems" in s, path
        if s.get("type") == "object" and "additionalProperties" in s:
            assert "maxProperties" in s, path
        if s.get("type") == "integer" and "status" not in path:
            assert "minimum" in s and "maximum" in s, path


def test_crd_shape() -> None:
    crd = schema.job_crd()
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["dgj"] and names["categories"] == ["distgnn"]
    ver = crd["spec"]["versions"][0]
    assert ver["subresources"] == {"status": {}}
    cols = {c["name"]: c["jsonPath"] for c in ver["additionalPrinterColumns"]}
    assert cols["Phase"] == ".status.phase" and cols["Age"] == ".metadata.creationTimestamp"
    rules = ver["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["graph"][
        "x-kubernetes-validations"
    ]
    assert {"rule": "self == oldSelf", "message": "spec.graph is immutable"} in rules
    assert schema.graphserver_crd()["spec"]["names"]["shortNames"] == ["gsv"]


def test_generated_files_are_fresh(repo_root: Path) -> None:
    assert generate.main(["--root", str(repo_root), "--check"]) == 0
    crds = repo_root / "crds" / "distgnnjobs.distgnn.dev.yaml"
    chart = repo_root / "charts/distgnn/files/crds/distgnnjobs.distgnn.dev.yaml"
    assert crds.read_text() == chart.read_text()


def test_generate_check_detects_stale_and_write_repairs(tmp_path: Path) -> None:
    assert generate.main(["--root", str(tmp_path), "--check"]) == 1
    assert generate.main(["--root", str(tmp_path)]) == 0
    assert generate.main(["--root", str(tmp_path), "--check"]) == 0
    p = tmp_path / "docs/reference/distgnnjob.md"
    p.write_text(p.read_text() + "edit\n")
    assert generate.stale(tmp_path) == ["docs/reference/distgnnjob.md"]


def test_valid_manifests_pass_both_and_defaults_are_applied() -> None:
    _validator("DistGNNJob").validate(JOB)
    _validator("GraphServer").validate(GS)
    job = parse_job(JOB)
    assert job.metadata.namespace == "ml"
    assert job.spec.run_policy.backoff_limit == 3
    assert job.spec.trainers.app is not None and job.spec.trainers.app.fanouts == [10, 25]
    assert job.spec.storage.credentials_secret is not None
    assert job.spec.storage.credentials_secret.access_key_id_key == "AWS_ACCESS_KEY_ID"
    # the defaulted form is itself a valid manifest and parses to the same value
    full = {**JOB, "spec": to_dict(job.spec)}
    _validator("DistGNNJob").validate(full)
    assert parse_job(full).spec == job.spec
    gs = parse_manifest(GS)
    assert gs == parse_graphserver(GS) and gs.spec.partitioning.num_parts == 2


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        *head, last = path.split(".")
        node = obj
        for k in head:
            node = node.setdefault(k, {})
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return mutate


_DELETE = object()

# (mutation, message parse_job must give, whether the OpenAPI schema alone rejects it;
# the others are CEL rules, which jsonschema does not run)
BAD = [
    (_set("spec.trainers.replicas", 0), "spec.trainers.replicas: must be >= 1", True),
    (_set("spec.trainers.replicas", 5000), "spec.trainers.replicas: must be <= 1024", True),
    (_set("spec.trainers.replicas", "2"), "spec.trainers.replicas: must be an integer", True),
    (_set("spec.partitioning.method", "kahip"), "spec.partitioning.method: must be one of", True),
    (_set("spec.partitioning.haloHops", 9), "spec.partitioning.haloHops: must be <= 4", True),
    (_set("spec.graph.source.url", "x" * 3000), "spec.graph.source.url: must be at most", True),
    (_set("spec.graph.source", _DELETE), "spec.graph: exactly one of", False),
    (
        _set("spec.graph.partitions", {"manifestURL": "s3://a/b.json"}),
        "spec.graph: exactly one",
        False,
    ),
    (_set("spec.graph.source", {}), "spec.graph.source.url: is required", True),
    (_set("spec.trainers.command", ["python", "x.py"]), "spec.trainers: exactly one of app", False),
    (_set("spec.trainers.app.numLayers", 3), "spec.trainers.app.fanouts: fanouts must have", False),
    (_set("spec.trainers.app.lr", 0), "spec.trainers.app.lr: must be > 0", True),
    (_set("spec.trainers.app.name", "graph-regression"), "spec.trainers.app.name: must be", True),
    (
        _set("spec.trainers.app", {"name": "node-regression", "model": "rgcn"}),
        "spec.trainers.app.targetNtype: model rgcn needs targetNtype",
        False,
    ),
    (
        _set("spec.trainers.app", {"name": "edge-classification", "model": "rgcn"}),
        "spec.trainers.app.targetEtype: model rgcn for link-prediction, edge-classification",
        False,
    ),
    (
        _set("spec.trainers.app", {"name": "edge-regression", "model": "rgcn"}),
        "spec.trainers.app.targetEtype: model rgcn for link-prediction, edge-classification",
        False,
    ),
    (
        _set("spec.trainers.app.fanouts", [10] * 9),
        "spec.trainers.app.fanouts: must have at most",
        True,
    ),
    (_set("spec.servers.resources.limits.cpu", "two"), "is not a quantity", True),
    (_set("spec.storage.credentialsSecret.name", "Bad_Name"), "does not match", True),
    (_set("spec.runPolicy.cleanPodPolicy", "Some"), "spec.runPolicy.cleanPodPolicy", True),
    (_set("spec.trainers.replicaz", 2), "spec.trainers.replicaz: unknown field", False),
    (_set("spec.trainers", _DELETE), "spec.trainers: is required", True),
    (_set("metadata.name", "x" * 41), "metadata.name", False),
    (_set("kind", "Job"), "kind: must be DistGNNJob", False),
    # labels, node selectors, annotation keys and tolerations the API server would refuse in
    # the pods' StatefulSet or Job, on every pass (values: the CRD too; map keys: a
    # structural schema cannot constrain them, so only the parse: InvalidSpec)
    (
        _set("spec.servers.podTemplate", {"labels": {"bad key": "x"}}),
        "spec.servers.podTemplate.labels: key 'bad key' must be a Kubernetes label",
        False,
    ),
    (
        _set("spec.servers.podTemplate", {"labels": {"team": "a b"}}),
        "spec.servers.podTemplate.labels.team: 'a b' does not match",
        True,
    ),
    (
        _set("spec.trainers.podTemplate", {"nodeSelector": {"zone": "-a"}}),
        "spec.trainers.podTemplate.nodeSelector.zone: '-a' does not match",
        True,
    ),
    (
        _set("spec.trainers.podTemplate", {"nodeSelector": {"a/b/c": "x"}}),
        "spec.trainers.podTemplate.nodeSelector: key 'a/b/c' must be",
        False,
    ),
    (
        _set("spec.servers.podTemplate", {"annotations": {"two words": "fine value"}}),
        "spec.servers.podTemplate.annotations: key 'two words' must be",
        False,
    ),
    (
        _set("spec.servers.podTemplate", {"tolerations": [{"key": "a b", "operator": "Exists"}]}),
        "0].key: 'a b' does not match",  # tolerations[0] (the harness escapes only . and ()
        True,
    ),
    (
        _set("spec.servers.podTemplate", {"tolerations": [{"key": "k", "value": "a b"}]}),
        "0].value: 'a b' does not match",
        True,
    ),
    (
        _set("spec.servers.podTemplate", {"tolerations": [{"key": "gpu", "tolerationSeconds": 5}]}),
        "0].effect: effect must be NoExecute when tolerationSeconds is set",
        False,
    ),
    (
        _set("spec.trainers.podTemplate", {"tolerations": [{"effect": "NoSchedule"}]}),
        "0].operator: operator must be Exists when key is empty",
        False,
    ),
    # resources the API server refuses in a pod template (ValidateResourceRequirements)
    (
        _set(
            "spec.servers.resources", {"requests": {"memory": "4Gi"}, "limits": {"memory": "2Gi"}}
        ),
        "spec.servers.resources: each request must be at most its limit",
        False,
    ),
    (
        _set("spec.trainers.resources", {"limits": {"gpu": "1"}}),
        "spec.trainers.resources: resource names are cpu, memory",
        False,
    ),
    (
        _set("spec.trainers.resources", {"requests": {"nvidia.com/gpu": "1"}}),
        "spec.trainers.resources: an extended resource",
        False,
    ),
    (
        _set("spec.trainers.resources", {"limits": {"nvidia.com/gpu": "0.5"}}),
        "spec.trainers.resources: an extended resource",
        False,
    ),
    (
        _set("spec.servers.resources", {"limits": {"cpu": "-1"}}),
        "spec.servers.resources: quantities must not be negative",
        False,
    ),
    # a trainer process uses one GPU: a second one in its pod would idle
    (
        _set("spec.trainers.gpus", 2),
        "spec.trainers.gpus: must be <= 1 (a trainer process trains on one GPU, DDP's one "
        "device per rank as in DGL; for more GPUs raise trainers.replicas",
        True,
    ),
    (
        _set("spec.trainers.resources", {"limits": {"nvidia.com/gpu": "2"}}),
        "spec.trainers.resources: at most one GPU",
        False,
    ),
    (
        _set("spec.trainers.resources", {"limits": {"amd.com/gpu": 4}}),
        "spec.trainers.resources: at most one GPU",
        False,
    ),
]


@pytest.mark.parametrize(("mutate", "message", "schema_rejects"), BAD, ids=[b[1][:40] for b in BAD])
def test_bad_job_rejected(
    mutate: Callable[[dict[str, Any]], None], message: str, schema_rejects: bool
) -> None:
    obj = copy.deepcopy(JOB)
    mutate(obj)
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_job(obj)
    if schema_rejects:
        assert list(_validator("DistGNNJob").iter_errors(obj)), message


def test_graphserver_needs_one_source_and_no_graphserver_ref() -> None:
    obj = copy.deepcopy(GS)
    obj["spec"]["graph"] = {"graphServer": {"name": "other"}}
    with pytest.raises(ConfigError, match=r"spec\.graph\.graphServer: unknown field"):
        parse_graphserver(obj)
    with pytest.raises(ConfigError, match="must be DistGNNJob or GraphServer"):
        parse_manifest({"kind": "Pod"})
    with pytest.raises(ConfigError, match="must be a mapping"):
        parse_job([1, 2])


def test_errors_are_collected_and_capped() -> None:
    obj = copy.deepcopy(JOB)
    obj["spec"]["trainers"]["app"].update({f"bogus{i}": 1 for i in range(20)})
    with pytest.raises(ConfigError, match="and 12 more") as ei:
        parse_job(obj)
    assert str(ei.value).count("unknown field") == 8


@pytest.mark.parametrize(
    "crd", [schema.job_crd(), schema.graphserver_crd()], ids=["job", "graphserver"]
)
def test_crd_is_a_valid_customresourcedefinition(crd: dict[str, Any]) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(crd, "1.30.0", strict=True)


def test_kubernetes_keys_and_values_that_the_api_server_takes_pass_both() -> None:
    """The label, annotation and toleration forms Kubernetes accepts are not refused:
    prefixed keys, upper case in a label name, any case in an annotation key, an empty
    label value, a toleration of every taint (empty key)."""
    obj = copy.deepcopy(JOB)
    obj["spec"]["servers"]["podTemplate"] = {
        "labels": {"app.kubernetes.io/name": "Graph_Server.v1", "empty": ""},
        "annotations": {"Example.COM/Owner": "any text: at all", "x": ""},
        "nodeSelector": {"kubernetes.io/arch": "amd64", "node.example.com/gpu": "a" * 63},
        "tolerations": [{"operator": "Exists"}, {"key": "", "operator": "Exists"}],
    }
    _validator("DistGNNJob").validate(obj)
    tpl = parse_job(obj).spec.servers.pod_template
    assert tpl is not None and tpl.labels == {
        "app.kubernetes.io/name": "Graph_Server.v1",
        "empty": "",
    }


def test_resources_the_api_server_takes_pass() -> None:
    """Equal values in other units, whole extended resources with equal request and limit,
    hugepages, exponent forms: accepted."""
    obj = copy.deepcopy(JOB)
    obj["spec"]["servers"]["resources"] = {
        "requests": {"memory": "2048Mi", "cpu": "500m", "nvidia.com/gpu": "1"},
        "limits": {"memory": "2Gi", "cpu": "0.5", "nvidia.com/gpu": "1", "hugepages-2Mi": "64Mi"},
    }
    obj["spec"]["trainers"]["resources"] = {"requests": {"cpu": "2e2"}, "limits": {"cpu": "1e3"}}
    _validator("DistGNNJob").validate(obj)
    parse_job(obj)
