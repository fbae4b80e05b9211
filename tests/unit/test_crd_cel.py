"""The CRDs' CEL rules and patterns, evaluated offline as the API server would.

kmock runs no CEL and no pattern checks, so the rules in ``x-kubernetes-validations`` are
evaluated here with a CEL library (cel-python) against sample objects (``self`` and, for
transition rules, ``oldSelf``), and every ``pattern`` is compiled with RE2 (the API server's
regular-expression engine) and checked to agree with Python's ``re`` (local mode's parser).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import celpy
import jsonschema
import pytest
import re2

from distgnn import contract
from distgnn.api import parse_graphserver, parse_job, schema, to_dict
from distgnn.api import types as t
from distgnn.api.fields import (
    CANONICAL_ETYPE,
    DOMAIN_PREFIXED_PATH,
    HTTP_URL,
    IMAGE_REF,
    STORAGE_SCHEMES,
    url_pattern,
)
from distgnn.errors import ConfigError

Obj = dict[str, Any]
L2: Obj = {"numLayers": 2, "fanouts": [5, 10]}
CRDS = {"DistGNNJob": schema.job_crd(), "GraphServer": schema.graphserver_crd()}


def _root(kind: str) -> Obj:
    return dict(CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def _nodes(s: Obj, path: str = "") -> Iterator[tuple[str, Obj]]:
    yield path, s
    for k, v in s.get("properties", {}).items():
        yield from _nodes(v, f"{path}.{k}")
    if "items" in s:
        yield from _nodes(s["items"], f"{path}[]")
    if isinstance(s.get("additionalProperties"), dict):
        yield from _nodes(s["additionalProperties"], f"{path}{{}}")


def _node(kind: str, path: str) -> Obj:
    return dict(next(s for p, s in _nodes(_root(kind)) if p == path))


def _rule(kind: str, path: str, text: str) -> Obj:
    found = [
        r for r in _node(kind, path).get("x-kubernetes-validations", []) if text in r["message"]
    ]
    assert len(found) == 1, (path, text, found)
    return dict(found[0])


def cel(rule: str, self: Any, old: Any = None) -> bool:
    env = celpy.Environment()
    prog = env.program(env.compile(rule))
    act = {"self": celpy.json_to_cel(self)}
    if old is not None:
        act["oldSelf"] = celpy.json_to_cel(old)
    return bool(prog.evaluate(act))


def all_rules() -> list[tuple[str, str, Obj]]:
    return [
        (kind, path, r)
        for kind in CRDS
        for path, s in _nodes(_root(kind))
        for r in s.get("x-kubernetes-validations", [])
    ]


@pytest.mark.parametrize(("kind", "path", "rule"), all_rules(), ids=lambda x: str(x)[:50])
def test_every_rule_compiles_and_its_field_path_exists(kind: str, path: str, rule: Obj) -> None:
    env = celpy.Environment()
    env.compile(rule["rule"])  # raises on a syntax error
    assert rule["message"] and "\n" not in rule["message"]
    if "fieldPath" in rule:  # the API server refuses a fieldPath naming no property
        name = rule["fieldPath"].removeprefix(".")
        assert name in _node(kind, path)["properties"], rule


# --- transition rules: what may not change on a running job ---------------------------


def job_spec(**trainers: Any) -> Obj:
    """A defaulted spec, as the API server stores it (defaults before validation)."""
    obj = {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "cora"},
        "spec": {
            "graph": {"source": {"url": "s3://graphs/cora.npz"}},
            "trainers": {"replicas": 2, "app": {"name": "node-classification"}, **trainers},
        },
    }
    return dict(to_dict(parse_job(obj).spec))


def test_trainer_replicas_are_immutable() -> None:
    rule = _rule("DistGNNJob", ".spec.trainers", "replicas is immutable")
    assert rule["fieldPath"] == ".replicas"
    old = job_spec()["trainers"]
    grown = job_spec(replicas=4)["trainers"]
    assert cel(rule["rule"], grown, old) is False
    assert "delete the job and create it again" in rule["message"]
    # other trainer fields may change (and the same replicas pass)
    assert cel(rule["rule"], job_spec(image="example.org/x:2")["trainers"], old) is True
    assert cel(rule["rule"], old, copy.deepcopy(old)) is True


@pytest.mark.parametrize(
    ("kind", "path", "old", "new", "allowed"),
    [
        (
            "DistGNNJob",
            ".spec.graph",
            {"source": {"url": "s3://a/g"}},
            {"source": {"url": "s3://a/h"}},
            False,
        ),
        (
            "DistGNNJob",
            ".spec.graph",
            {"source": {"url": "s3://a/g"}},
            {"source": {"url": "s3://a/g"}},
            True,
        ),
        ("DistGNNJob", ".spec.partitioning", {"numParts": 2}, {"numParts": 4}, False),
        (
            "GraphServer",
            ".spec.graph",
            {"partitions": {"manifestURL": "s3://a/m.json"}},
            {"source": {"url": "s3://a/g"}},
            False,
        ),
    ],
)
def test_immutable_specs(kind: str, path: str, old: Obj, new: Obj, allowed: bool) -> None:
    rule = _rule(kind, path, "immutable")
    assert cel(rule["rule"], new, old) is allowed


MULTIKUEUE = "kueue.x-k8s.io/multikueue"


@pytest.mark.parametrize(
    ("old", "new", "allowed"),
    [
        (None, None, True),
        (MULTIKUEUE, MULTIKUEUE, True),
        (contract.CONTROLLER_NAME, contract.CONTROLLER_NAME, True),
        (MULTIKUEUE, contract.CONTROLLER_NAME, False),  # taken back from MultiKueue
        (MULTIKUEUE, None, False),  # removed: this operator would start running it
        (None, MULTIKUEUE, False),  # set later: this operator would abandon its children
        (None, contract.CONTROLLER_NAME, False),
    ],
)
def test_managed_by_is_immutable(old: str | None, new: str | None, allowed: bool) -> None:
    """As a batch Job's spec.managedBy: neither set, changed nor removed after creation
    (the rule sits on spec, which always exists, so that adding or removing the field is
    seen too: a rule on the field itself runs only when both values exist)."""
    rule = _rule("DistGNNJob", ".spec", "managedBy is immutable")
    assert rule["fieldPath"] == ".managedBy"
    assert "cannot be set, changed or removed" in rule["message"]

    def spec(who: str | None, **trainers: Any) -> Obj:
        s = job_spec(**trainers)
        return s if who is None else {**s, "managedBy": who}

    assert cel(rule["rule"], spec(new), spec(old)) is allowed
    # the rest of the spec may change (Kueue flips runPolicy.suspend on admission)
    assert cel(rule["rule"], spec(old, image="example.org/x:2"), spec(old)) is True


MANAGERS_OK = [MULTIKUEUE, contract.CONTROLLER_NAME, "example.com/a/b:c", "a/~x%20y"]
MANAGERS_BAD = ["multikueue", "/x", "kueue.x-k8s.io/", "Kueue.io/x", "a.b/x y", "-a.io/x", ""]


def test_managed_by_pattern_is_batch_jobs() -> None:
    """apimachinery's IsDomainPrefixedPath (a DNS subdomain, '/', RFC 3986 path
    characters) in RE2 and Python alike, at most 63 characters; local mode refuses the same."""
    for v in MANAGERS_OK:
        assert re.search(DOMAIN_PREFIXED_PATH, v) and re2.search(DOMAIN_PREFIXED_PATH, v), v
    for v in MANAGERS_BAD:
        assert not re.search(DOMAIN_PREFIXED_PATH, v), v
        assert not re2.search(DOMAIN_PREFIXED_PATH, v), v
    node = _node("DistGNNJob", ".spec.managedBy")
    assert node["maxLength"] == 63 and node["pattern"] == DOMAIN_PREFIXED_PATH
    for v, ok in [(MULTIKUEUE, True), ("Kueue", False), ("a.io/" + "x" * 59, False)]:
        obj = _job()
        obj["spec"]["managedBy"] = v
        assert _schema_errors(obj) == ([] if ok else ["spec.managedBy"]), v
        if ok:
            assert parse_job(obj).spec.managed_by == v
        else:
            with pytest.raises(ConfigError, match=r"spec\.managedBy"):
                parse_job(obj)


# --- the CEL rules and their Python twins agree -------------------------------------------

TWINS: list[tuple[type, str, list[Obj]]] = [
    (
        # the API server's ValidateTolerations, which a pod template must pass
        t.Toleration,
        ".spec.servers.podTemplate.tolerations[]",
        [
            {"key": "gpu", "operator": "Exists"},
            {"operator": "Exists"},
            {"key": "", "operator": "Exists"},
            {"key": "gpu", "value": "a100"},
            {"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},
            {"key": "n", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            {},
            {"key": ""},
            {"value": "x", "operator": "Equal"},
            {"key": "gpu", "operator": "Exists", "value": "a100"},
            {"key": "gpu", "tolerationSeconds": 30},
            {"key": "gpu", "effect": "NoSchedule", "tolerationSeconds": 30},
        ],
    ),
    (
        t.JobGraph,
        ".spec.graph",
        [
            {"source": {"url": "s3://a/g"}},
            {"partitions": {"manifestURL": "s3://a/m.json"}},
            {"graphServer": {"name": "gs"}},
            {},
            {"source": {"url": "s3://a/g"}, "graphServer": {"name": "gs"}},
            {
                "source": {"url": "s3://a/g"},
                "partitions": {"manifestURL": "s3://a/m.json"},
                "graphServer": {"name": "gs"},
            },
        ],
    ),
    (
        t.Trainers,
        ".spec.trainers",
        [
            {"replicas": 2, "app": {"name": "node-classification"}},
            {"replicas": 2, "command": ["python", "x.py"], "args": ["--a"]},
            {"replicas": 2},
            {"replicas": 2, "app": {"name": "node-classification"}, "command": ["x"]},
            {"replicas": 2, "app": {"name": "node-classification"}, "args": ["--a"]},
            {"replicas": 2, "app": {"name": "node-classification"}, "gpus": 1},
            {"replicas": 2, "app": {"name": "node-classification"}, "gpus": 2},
        ],
    ),
    (
        t.App,
        ".spec.trainers.properties.app",
        [
            {"name": "node-classification", "numLayers": 2, "fanouts": [5, 10]},
            {"name": "node-classification", "numLayers": 3, "fanouts": [5, 10]},
            {"name": "node-classification", "numLayers": 1, "fanouts": [5]},
            {"name": "node-classification", "model": "rgcn", "targetNtype": "paper", **L2},
            {"name": "node-classification", "model": "rgcn", **L2},
            {"name": "node-classification", "targetNtype": "paper", **L2},
            {"name": "node-classification", "model": "gat", "targetNtype": "paper", **L2},
            {"name": "link-prediction", "model": "rgcn", **L2},
            {"name": "link-prediction", "model": "rgcn", "targetEtype": "a:w:p", **L2},
            {"name": "link-prediction", "targetEtype": "a:w:p", **L2},
            {"name": "node-classification", "model": "rgcn", "targetEtype": "a:w:p", **L2},
            {"name": "link-prediction", "model": "rgcn", "targetNtype": "p", **L2},
            {
                "name": "link-prediction",
                "model": "rgcn",
                "targetEtype": "a:w:p",
                "targetNtype": "p",
                **L2,
            },
            {"name": "inference", "model": "rgcn", "targetNtype": "p", "outputURL": "o", **L2},
            {"name": "inference", "model": "rgcn", "targetEtype": "a:w:p", "outputURL": "o", **L2},
            {"name": "inference", "model": "rgcn", "outputURL": "o", **L2},
            {
                "name": "node-classification",
                "model": "rgcn",
                "targetNtype": "p",
                "numBases": 2,
                "sparseLr": 0.1,
                **L2,
            },
            {"name": "node-classification", "numBases": 2, **L2},
            {"name": "node-classification", "model": "gat", "sparseLr": 0.1, **L2},
            {"name": "node-regression", **L2},
            {"name": "node-regression", "model": "gat", **L2},
            {"name": "node-regression", "model": "rgcn", **L2},
            {"name": "node-regression", "model": "rgcn", "targetNtype": "p", **L2},
            {"name": "edge-classification", **L2},
            {"name": "edge-classification", "model": "rgcn", **L2},
            {"name": "edge-classification", "model": "rgcn", "targetEtype": "a:w:p", **L2},
            {"name": "edge-regression", **L2},
            {"name": "edge-regression", "model": "rgcn", **L2},
        ],
    ),
]


def _python_verdicts(cls: type, obj: Obj) -> list[bool]:
    from distgnn.api.validate import _Errors, load

    inst = load(cls, obj, "x", _Errors())
    rules = [r for r in cls.RULES if r.check is not None and r.cel]  # type: ignore[attr-defined]
    return [r.check(inst) for r in rules]


@pytest.mark.parametrize(
    ("cls", "path", "samples"), TWINS, ids=lambda x: getattr(x, "__name__", "")
)
def test_cel_rules_agree_with_their_python_twins(cls: type, path: str, samples: list[Obj]) -> None:
    node = _node("DistGNNJob", path.replace(".properties", ""))
    rules = [r for r in node["x-kubernetes-validations"] if "oldSelf" not in r["rule"]]
    twins = [r for r in cls.RULES if r.check is not None and r.cel]  # type: ignore[attr-defined]
    assert len(rules) == len(twins)
    verdicts = set()
    for obj in samples:
        want = _python_verdicts(cls, obj)
        got = [cel(r["rule"], obj) for r in rules]
        assert got == want, (obj, got, want)
        verdicts.add(all(got))
    assert verdicts == {True, False}  # the samples exercise both outcomes


def test_metadata_name_length_rule() -> None:
    rule = _root("DistGNNJob")["x-kubernetes-validations"][0]
    assert cel(rule["rule"], {"metadata": {"name": "a" * 40}}) is True
    assert cel(rule["rule"], {"metadata": {"name": "a" * 41}}) is False


@pytest.mark.parametrize("kind", sorted(CRDS))
@pytest.mark.parametrize(
    ("name", "ok"),
    [("cora", True), ("a-1", True), ("a", True), ("1cora", False), ("a.b", False), ("a-", False)],
)
def test_metadata_name_is_a_service_name(kind: str, name: str, ok: bool) -> None:
    """The API server takes any DNS subdomain as a custom resource's name, but refuses a
    Service whose name is not an RFC 1035 label, and every resource has Services named
    ``NAME-...``: such a name is refused at admission (CEL) and by parse_job/GraphServer."""
    (rule,) = [r for r in _root(kind)["x-kubernetes-validations"] if "matches" in r["rule"]]
    assert cel(rule["rule"], {"metadata": {"name": name}}) is ok
    obj = _job() if kind == "DistGNNJob" else copy.deepcopy(GRAPHSERVER)
    obj["metadata"]["name"] = name
    parse = parse_job if kind == "DistGNNJob" else parse_graphserver
    if ok:
        parse(obj)
    else:
        with pytest.raises(ConfigError, match=r"metadata\.name"):
            parse(obj)


GRAPHSERVER: Obj = {
    "apiVersion": "distgnn.dev/v1alpha1",
    "kind": "GraphServer",
    "metadata": {"name": "cora"},
    "spec": {"graph": {"partitions": {"manifestURL": "s3://graphs/cora.json"}}},
}


# --- patterns: RE2 (API server) and Python re (local mode) agree ---------------------------


def all_patterns() -> list[str]:
    return sorted({s["pattern"] for kind in CRDS for _, s in _nodes(_root(kind)) if "pattern" in s})


IMAGES_OK = [
    "ubuntu",
    "ghcr.io/distgnn/distgnn-runtime:0.1.0",
    "registry.example.com:5000/team/app_x:v1.2-cuda",
    "localhost:5000/a/b/c",
    "example.org/distgnn:test",
    "[2001:db8::1]:5000/repo:tag",
    "busybox@sha256:" + "a" * 64,
    "ghcr.io/x/y:1.0@sha256:" + "0123456789abcdef" * 4,
]
IMAGES_BAD = [
    "",
    "Ubuntu",
    "ghcr.io/Distgnn/runtime",
    "repo:tag with space",
    "repo:",
    "repo::tag",
    "repo:-tag",
    "/repo",
    "repo/",
    "repo@sha256:short",
    "https://ghcr.io/x/y",
    "repo:" + "t" * 129,
]
URLS_OK = ["s3://bucket/cora.npz", "s3://b", "s3a://bucket/a/b.json", "file:///data/g.npz"]
URLS_BAD = [
    "ftp://host/cora.npz",
    "gs://bucket/cora.npz",
    "cora.npz",
    "/data/cora.npz",
    "s3:/bucket/x",
    "s3://",
    "s3:///key",
    "file://relative/x",
    "s3://bucket/has space",
    "",
]
ETYPES_OK = ["author:writes:paper", "a:b:c", "paper:written-by:author", "n_1:r.2:n-3"]
ETYPES_BAD = ["writes", "a:b", "a:b:c:d", "a::c", ":b:c", "a:b:", "a:b c:d", "a:b:c ", ""]
ENDPOINTS_OK = ["http://s3:8333", "https://s3.eu-west-1.amazonaws.com", "http://10.0.0.1:9000/"]
ENDPOINTS_BAD = ["s3.example.com", "ftp://s3", "http://", "http:// x"]


@pytest.mark.parametrize("pattern", all_patterns())
def test_every_pattern_is_re2_and_anchored(pattern: str) -> None:
    re2.compile(pattern)
    assert pattern.startswith("^") and pattern.endswith("$"), pattern


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (IMAGE_REF, IMAGES_OK, IMAGES_BAD),
        (url_pattern(STORAGE_SCHEMES), URLS_OK, URLS_BAD),
        (HTTP_URL, ENDPOINTS_OK, ENDPOINTS_BAD),
        (CANONICAL_ETYPE, ETYPES_OK, ETYPES_BAD),
    ],
    ids=["image", "storage-url", "endpoint", "canonical-etype"],
)
def test_patterns_accept_and_refuse_alike_in_re2_and_python(
    pattern: str, good: list[str], bad: list[str]
) -> None:
    for s in good:
        assert re.search(pattern, s) and re2.search(pattern, s), s
    for s in bad:
        assert not re.search(pattern, s) and not re2.search(pattern, s), s


def test_image_pattern_is_not_catastrophic() -> None:
    # Python's backtracking engine runs this pattern in local mode: worst cases stay linear-ish
    for evil in ("a" * 500 + "!", "a-" * 250 + "!", ("a." * 250)[:511] + "/"):
        assert re.search(IMAGE_REF, evil) is None


# --- whole manifests against the openAPIV3Schema (jsonschema, Draft 4) ------------------------


def _job(**patch: Any) -> Obj:
    obj: Obj = {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "cora"},
        "spec": {
            "graph": {"partitions": {"manifestURL": "s3://graphs/cora.json"}},
            "storage": {"endpoint": "http://s3:8333"},
            "servers": {"image": "example.org/distgnn:test"},
            "trainers": {
                "replicas": 2,
                "image": "example.org/distgnn:test",
                "app": {"name": "node-classification", "dropout": 0.5},
            },
        },
    }
    for path, value in patch.items():
        *head, last = path.split("__")
        node = obj["spec"]
        for k in head:
            node = node[k]
        node[last] = value
    return obj


def _schema_errors(obj: Obj) -> list[str]:
    v = jsonschema.Draft4Validator(_root("DistGNNJob"))
    return [".".join(str(p) for p in e.absolute_path) for e in v.iter_errors(obj)]


def test_sample_job_is_valid() -> None:
    assert _schema_errors(_job()) == []
    parse_job(_job())


@pytest.mark.parametrize(
    ("patch", "field", "local_message"),
    [
        (
            {"graph__partitions__manifestURL": "ftp://h/cora.json"},
            "spec.graph.partitions.manifestURL",
            "unsupported URL scheme ftp://",
        ),
        (
            {"graph__partitions__manifestURL": "gs://b/cora.json"},
            "spec.graph.partitions.manifestURL",
            "unsupported URL scheme gs://",
        ),
        ({"trainers__image": "Not An Image"}, "spec.trainers.image", "does not match"),
        ({"servers__image": "ghcr.io/x/y:"}, "spec.servers.image", "does not match"),
        ({"storage__endpoint": "s3.example.com"}, "spec.storage.endpoint", "does not match"),
        ({"trainers__gpus": 2}, "spec.trainers.gpus", "for more GPUs raise trainers.replicas"),
        ({"trainers__app__dropout": 1.0}, "spec.trainers.app.dropout", "must be < 1"),
        ({"trainers__app__dropout": -0.1}, "spec.trainers.app.dropout", "must be >= 0"),
        ({"trainers__app__lr": 0}, "spec.trainers.app.lr", "must be > 0"),
        ({"trainers__app__weightDecay": -1e-4}, "spec.trainers.app.weightDecay", "must be >= 0"),
    ],
)
def test_bad_values_are_refused_at_admission_and_in_local_mode(
    patch: Obj, field: str, local_message: str
) -> None:
    obj = _job(**patch)
    assert _schema_errors(obj) == [field]
    with pytest.raises(
        ConfigError, match=re.escape(f"{field}: ") + ".*" + re.escape(local_message)
    ):
        parse_job(obj)


@pytest.mark.parametrize("path", ["cora.json", "../parts/cora.json", "/data/cora.json"])
def test_plain_paths_are_local_mode_only(path: str) -> None:
    """Documented: the CRD wants a URL; ``distgnn run`` resolves paths against the manifest."""
    obj = _job(graph__partitions__manifestURL=path)
    assert _schema_errors(obj) == ["spec.graph.partitions.manifestURL"]
    assert parse_job(obj).spec.graph.partitions is not None
