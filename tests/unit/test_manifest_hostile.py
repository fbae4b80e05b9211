"""Hostile ``distgnn run`` manifests: each one ends in one ConfigError line (exit 2).

The cases are the ones an adversarial review found ending in tracebacks, MemoryError or
minutes of CPU; the fuzzer mutates a manifest with labels, annotations, storage,
checkpoint and podTemplate (seeded, bounded) and allows nothing but ConfigError.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.manifest_fuzz import mutate_bytes, mutate_tree

from distgnn import cli
from distgnn.api import parse_job
from distgnn.api.manifest_yaml import MAX_BYTES, loads
from distgnn.errors import ConfigError
from distgnn.local.plan import load_yaml, plan_from_manifest

BASE = """\
apiVersion: distgnn.dev/v1alpha1
kind: DistGNNJob
metadata:
  name: fuzz
  labels: {team: gnn}
  annotations: {note: hello}
spec:
  graph:
    source: {url: data/g.npz}
  storage:
    endpoint: http://127.0.0.1:9000
    region: us-east-1
    credentialsSecret: {name: s3-creds}
  trainers:
    replicas: 2
    podTemplate:
      labels: {a: b}
      env: [{name: X, value: y}]
      tolerations: [{key: k, operator: Exists}]
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 1
              preference: {matchExpressions: [{key: zone, operator: In, values: [a]}]}
    app: {name: node-classification, epochs: 1, lr: 0.01, dropout: 0.5, weightDecay: 0.0}
    checkpoint: {url: ckpt}
"""


def _bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + f"\nkind: *a{levels - 1}\n"


HOSTILE: dict[str, bytes] = {
    "non_utf8": b"\xff\xfe\x00k" + BASE.encode(),
    "labels_string": BASE.replace("labels: {team: gnn}", 'labels: "abc"').encode(),
    "labels_list": BASE.replace("labels: {team: gnn}", "labels: [a, b]").encode(),
    "labels_value_list": BASE.replace("labels: {team: gnn}", "labels: {a: [1]}").encode(),
    "annotations_int": BASE.replace("annotations: {note: hello}", "annotations: 5").encode(),
    "deep_lists": b"kind: " + b"[" * 10_000 + b"]" * 10_000,
    "deep_maps": "".join(" " * i + f"k{i}:\n" for i in range(200)).encode(),
    "nul_in_url": BASE.replace("url: data/g.npz", 'url: "a\\0b"').encode(),
    "surrogate_in_url": BASE.replace("url: data/g.npz", 'url: "\\ud800"').encode(),
    "surrogate_in_label_key": BASE.replace("team: gnn", '"\\udc80": x').encode(),
    "alias_bomb_kind": _bomb().encode(),
    "big_list": b"kind: [" + b"1," * 200_000 + b"1]",
    "duplicate_key": BASE.replace(
        "kind: DistGNNJob", "kind: DistGNNJob\nkind: GraphServer"
    ).encode(),
    "duplicate_spec_key": BASE.replace("replicas: 2", "replicas: 2\n    replicas: 3").encode(),
    "python_tag": b"!!python/object/apply:os.system ['true']\n",
    "map_tag_on_a_list": b"kind: !!map [a, b]\n",
    "set_tag_on_a_scalar": b"kind: !!set abc\n",
    "huge_int": BASE.replace("replicas: 2", "replicas: " + "9" * 5000).encode(),
    "tilde_user": BASE.replace("url: data/g.npz", "url: ~nosuchuser-xyz/g.npz").encode(),
    "not_a_mapping": b"- 1\n- 2\n",
    "namespace_list": BASE.replace("name: fuzz", "name: fuzz\n  namespace: [x]").encode(),
    "lr_nan": BASE.replace("lr: 0.01", "lr: .nan").encode(),
    "dropout_nan": BASE.replace("dropout: 0.5", "dropout: .nan").encode(),
    "weight_decay_nan": BASE.replace("weightDecay: 0.0", "weightDecay: .nan").encode(),
    "dropout_one": BASE.replace("dropout: 0.5", "dropout: 1.0").encode(),
    "lr_inf": BASE.replace("lr: 0.01", "lr: .inf").encode(),
    "weight_decay_minus_inf": BASE.replace("weightDecay: 0.0", "weightDecay: -.inf").encode(),
}


def _load_and_plan(path: Path) -> Any:
    return plan_from_manifest(load_yaml(path), path, path.parent / "work")


def test_base_manifest_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(BASE, encoding="utf-8")
    plan, _ = _load_and_plan(path)
    assert plan.name == "fuzz"


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_manifest_is_one_config_error(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(HOSTILE[name])
    with pytest.raises(ConfigError) as ei:
        _load_and_plan(path)
    assert len(str(ei.value)) < 2000  # never quotes the whole value
    rc = cli.main(["run", str(path), "--state-dir", str(tmp_path / "state")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("distgnn run: error:"), err


def test_oversized_and_special_files_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"# " + b"x" * MAX_BYTES)
    with pytest.raises(ConfigError, match="larger than"):
        load_yaml(big)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_yaml(Path("/dev/zero"))
    fifo = tmp_path / "fifo.yaml"
    import os

    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):  # and no hang
        load_yaml(fifo)


def test_error_messages_quote_a_short_prefix() -> None:
    obj = yaml.safe_load(BASE)
    obj["kind"] = "K" * 100_000
    with pytest.raises(ConfigError) as ei:
        plan_from_manifest(obj, Path("/tmp/x.yaml"), None)
    assert len(str(ei.value)) < 300


def test_depth_and_size_bounds_apply_to_objects_too() -> None:
    """The operator and other callers pass objects, not YAML: the same bounds hold."""
    obj = yaml.safe_load(BASE)
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    obj["spec"]["trainers"]["podTemplate"]["affinity"] = {"x": deep}
    with pytest.raises(ConfigError, match="deeper"):
        parse_job(obj)  # the bound is checked before the affinity's fields
    shared = ["x"] * 10
    for _ in range(8):
        shared = [shared] * 10
    obj["spec"]["trainers"]["podTemplate"]["affinity"] = {"x": shared}
    with pytest.raises(ConfigError, match="values"):
        parse_job(obj)


def test_nan_infinity_and_dropout_one_are_refused_naming_the_field() -> None:
    for field, value, msg in [
        ("lr", math.nan, "finite"),
        ("dropout", math.nan, "finite"),
        ("weightDecay", math.nan, "finite"),
        ("lr", math.inf, "finite"),
        ("dropout", 1.0, "< 1"),
    ]:
        obj = yaml.safe_load(BASE)
        obj["spec"]["trainers"]["app"][field] = value
        with pytest.raises(ConfigError, match=rf"spec\.trainers\.app\.{field}: must be.*{msg}"):
            parse_job(obj)
    obj = yaml.safe_load(BASE)
    obj["spec"]["trainers"]["app"]["dropout"] = 0.99
    assert parse_job(obj).spec.trainers.app is not None


def test_merge_keys_and_anchors_still_work() -> None:
    text = BASE + "x-common: &c {a: 1}\nx-use: {<<: *c, b: 2}\n"
    obj = loads(text)
    assert obj["x-use"] == {"a": 1, "b": 2}


# -- fuzzing -----------------------------------------------------------------------------


def test_fuzzed_manifests_only_raise_config_error(tmp_path: Path) -> None:
    rng = random.Random(1313)
    base = yaml.safe_load(BASE)
    manifest = tmp_path / "job.yaml"
    kinds: dict[str, int] = {}
    for _ in range(1500):
        obj = mutate_tree(base, rng)
        try:
            plan_from_manifest(obj, manifest, tmp_path / "work")
            kinds["ok"] = kinds.get("ok", 0) + 1
        except ConfigError:
            kinds["refused"] = kinds.get("refused", 0) + 1
    assert kinds.get("refused", 0) > 1000


def test_fuzzed_yaml_bytes_only_raise_config_error() -> None:
    rng = random.Random(4242)
    for _ in range(600):
        try:
            obj = loads(mutate_bytes(BASE.encode(), rng))
            if isinstance(obj, dict):
                plan_from_manifest(obj, Path("/tmp/fuzz/job.yaml"), Path("/tmp/fuzz/work"))
        except ConfigError:
            pass
