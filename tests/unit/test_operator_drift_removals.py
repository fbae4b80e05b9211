"""Fields taken out of the spec leave the children: :func:`drift.plan` compares with what
was applied last (annotation ``distgnn.dev/applied``) and nulls map keys no longer set, and
only those; a child stored with the API server's defaults and an unchanged record needs no
write."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from tests.support.apiserver_defaults import stored

from distgnn_operator import drift

Obj = dict[str, Any]


def _sts(tpl: Obj | None = None, labels: Obj | None = None, res: Obj | None = None) -> Obj:
    """The fields we set on a StatefulSet (as ``reconcile._fields`` gives them)."""
    container: Obj = {"name": "server", "image": "img:1", "imagePullPolicy": "IfNotPresent"}
    if res:
        container["resources"] = res
    pod = {"containers": [container], **(tpl or {})}
    return {
        "spec": {
            "replicas": 2,
            "serviceName": "j-server",
            "selector": {"matchLabels": {"app": "s"}},
            "template": {"metadata": {"labels": {"app": "s", **(labels or {})}}, "spec": pod},
        },
        "metadata": {"labels": {"app": "s"}},
    }


def _created(fields: Obj) -> Obj:
    """What the API server stores for a child created with ``fields`` and its record."""
    obj = {"kind": "StatefulSet", **copy.deepcopy(fields)}
    obj["metadata"] = {
        "name": "j-server",
        "labels": fields["metadata"]["labels"],
        "annotations": {drift.APPLIED: drift.applied_record(fields)},
    }
    return stored(drift.canonicalize(obj))


def _apply_merge_patch(obj: Obj, patch: Obj) -> Obj:
    """RFC 7386, as the API server applies a merge patch."""
    out = copy.deepcopy(obj)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _apply_merge_patch(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def test_unchanged_with_server_defaults_needs_no_write() -> None:
    fields = _sts({"nodeSelector": {"disk": "ssd"}}, res={"requests": {"cpu": "0.5"}})
    have = _created(fields)
    assert have["spec"]["template"]["spec"]["dnsPolicy"] == "ClusterFirst"  # defaults added
    assert drift.plan(fields, have) is None


CASES = {
    "a node selector key": (
        {"nodeSelector": {"disk": "ssd", "zone": "a"}},
        {"nodeSelector": {"disk": "ssd"}},
        {"nodeSelector": {"disk": "ssd"}},
    ),
    "the whole node selector": ({"nodeSelector": {"disk": "ssd"}}, {}, {}),
    "tolerations (a list: nulled when gone)": (
        {"tolerations": [{"key": "gpu", "operator": "Exists"}]},
        {},
        {},
    ),
    "the service account and its deprecated twin": ({"serviceAccountName": "reader"}, {}, {}),
    "the priority class": ({"priorityClassName": "high"}, {}, {}),
    "image pull secrets (a list: nulled when gone)": (
        {"imagePullSecrets": [{"name": "regcred"}]},
        {},
        {},
    ),
    "the affinity (a structure: nulled whole)": (
        {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}},
        {},
        {},
    ),
}
USER_KEYS = ("nodeSelector", "tolerations", "serviceAccountName", "serviceAccount")
USER_KEYS += ("priorityClassName", "affinity", "imagePullSecrets")


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_field_taken_out_is_gone_after_the_patch(case: str) -> None:
    before, after, expected = CASES[case]
    have = _created(_sts(before))
    fields = _sts(after)
    assert drift.drifted(fields, have) is False  # comparing only what we set misses it
    patch = drift.plan(fields, have)
    assert patch is not None
    result = _apply_merge_patch(have, patch)
    pod = stored({"kind": "StatefulSet", **result})["spec"]["template"]["spec"]
    assert {k: v for k, v in pod.items() if k in USER_KEYS and v} == expected
    assert drift.last_applied(result) == drift.canonicalize(fields)
    assert drift.plan(fields, result) is None  # settled again


def test_a_label_and_a_limit_taken_out() -> None:
    have = _created(
        _sts(labels={"tier": "gold"}, res={"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}})
    )
    fields = _sts(res={"requests": {"cpu": "1"}})
    assert drift.drifted(fields, have) is False
    patch = drift.plan(fields, have)
    assert patch is not None
    assert patch["spec"]["template"]["metadata"]["labels"] == {"app": "s", "tier": None}
    result = _apply_merge_patch(have, patch)
    assert result["spec"]["template"]["metadata"]["labels"] == {"app": "s"}
    # the containers list is sent whole: the limit goes with the list's replacement
    assert result["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "1"}
    }
    assert drift.plan(fields, result) is None


def test_keys_we_never_set_are_kept() -> None:
    """``kubectl rollout restart``'s annotation, another controller's label, a default:
    not in the record, so never nulled."""
    fields = _sts({"nodeSelector": {"disk": "ssd"}})
    have = _created(fields)
    have["spec"]["template"]["metadata"]["annotations"] = {"kubectl.kubernetes.io/restartedAt": "t"}
    have["spec"]["template"]["spec"]["nodeSelector"]["extra"] = "theirs"
    assert drift.plan(fields, have) is None
    patch = drift.plan(_sts(), have)
    assert patch is not None
    assert patch["spec"]["template"]["spec"]["nodeSelector"] == {"disk": None}  # not "extra"
    assert "annotations" not in patch["spec"]["template"]["metadata"]


def test_a_child_without_a_record_is_compared_as_before_and_gets_one_with_a_patch() -> None:
    fields = _sts({"nodeSelector": {"disk": "ssd"}})
    have = _created(fields)
    del have["metadata"]["annotations"][drift.APPLIED]
    assert drift.plan(fields, have) is None  # no write just to add the record
    changed = _sts({"nodeSelector": {"disk": "nvme"}})
    patch = drift.plan(changed, have)
    assert patch is not None and "disk" not in json.dumps(drift.removals({}, changed))
    assert drift.last_applied(_apply_merge_patch(have, patch)) == drift.canonicalize(changed)


def test_a_drifted_field_is_still_put_back() -> None:
    fields = _sts({"nodeSelector": {"disk": "ssd"}})
    have = _created(fields)
    have["spec"]["replicas"] = 5  # somebody scaled it
    patch = drift.plan(fields, have)
    assert patch is not None and patch["spec"]["replicas"] == 2


def test_a_record_too_large_is_dropped_not_kept_stale() -> None:
    fields = _sts({"nodeSelector": {"disk": "ssd"}})
    have = _created(fields)
    big = _sts({"nodeSelector": {f"k{i}": "v" * 60 for i in range(1200)}})
    assert drift.applied_record(big) is None
    patch = drift.plan(big, have)
    assert patch is not None and patch["metadata"]["annotations"] == {drift.APPLIED: None}


def test_an_unreadable_record_counts_as_none() -> None:
    have = _created(_sts())
    have["metadata"]["annotations"][drift.APPLIED] = "{not json"
    assert drift.last_applied(have) is None
    assert drift.plan(_sts(), have) is None
