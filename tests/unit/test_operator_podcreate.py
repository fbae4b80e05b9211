"""Pods a child cannot create: which children are short of pods, the newest FailedCreate
event of a child (filtered here: the emulator ignores field selectors), its message."""

from __future__ import annotations

from typing import Any

import pytest

from distgnn_operator import podcreate as pc

Obj = dict[str, Any]


def sts(want: int, **status: int) -> Obj:
    return {"kind": "StatefulSet", "spec": {"replicas": want}, "status": status}


def job(spec: Obj, status: Obj) -> Obj:
    return {"kind": "Job", "spec": spec, "status": status}


DONE = {"conditions": [{"type": "Complete", "status": "True"}]}
FAILED = {"conditions": [{"type": "FailureTarget", "status": "True"}]}

SHORT = [
    (sts(2), True),
    (sts(2, replicas=1), True),
    (sts(2, replicas=2), False),
    (sts(2, readyReplicas=2), False),  # the tests' stand-in sets only readyReplicas
    (sts(0), False),  # scaled to 0 (partitioning, suspended, finished)
    (job({"parallelism": 3, "completions": 3}, {}), True),
    (job({"parallelism": 3, "completions": 3}, {"active": 2, "succeeded": 1}), False),
    (job({"parallelism": 3, "completions": 3}, {"active": 1, "succeeded": 1}), True),
    (job({"parallelism": 1, "completions": 1}, {"terminating": 1}), False),
    (job({"parallelism": 1}, {}), True),  # NonIndexed without completions
    (job({"parallelism": 2, "completions": 2, "suspend": True}, {}), False),
    (job({"parallelism": 2, "completions": 2}, DONE), False),
    (job({"parallelism": 2, "completions": 2}, FAILED), False),
    ({"kind": "Service", "spec": {}}, False),
]


@pytest.mark.parametrize(("obj", "short"), SHORT, ids=range(len(SHORT)))
def test_short_of_pods(obj: Obj, short: bool) -> None:
    assert pc.short_of_pods(obj) is short


def event(uid: str, msg: str, **kw: Any) -> Obj:
    return {
        "involvedObject": {"uid": uid, "kind": "StatefulSet"},
        "reason": kw.pop("reason", "FailedCreate"),
        "type": kw.pop("type", "Warning"),
        "message": msg,
        **kw,
    }


def test_the_newest_failed_create_of_the_child_only() -> None:
    events = [
        event("u1", "old", lastTimestamp="2026-01-01T00:00:05Z"),
        # events.k8s.io writers: eventTime (micro) and series, no lastTimestamp
        event(
            "u1",
            "series",
            eventTime="2026-01-01T00:00:01.000000Z",
            series={"lastObservedTime": "2026-01-01T00:00:09.500000Z"},
        ),
        event("u2", "another child's", lastTimestamp="2026-01-01T00:01:00Z"),
        event("u1", "not a create", reason="FailedMount", lastTimestamp="2026-01-01T00:02:00Z"),
        event("u1", "normal", type="Normal", lastTimestamp="2026-01-01T00:02:00Z"),
    ]
    newest = pc.newest_failed_create(events, "u1")
    assert newest is not None and newest["message"] == "series"
    assert pc.newest_failed_create(events, "u3") is None
    assert pc.field_selector("u1") == {"involvedObject.uid": "u1", "reason": "FailedCreate"}


def test_message_is_one_line_without_the_aggregation_prefix() -> None:
    ev = event(
        "u",
        '(combined from similar events): Error creating: pods "j-trainers-0-x" is forbidden:'
        "\n exceeded quota: q, requested: cpu=4, used: cpu=8, limited: cpu=10",
    )
    assert pc.describe("Job", "j-trainers", ev) == (
        'Job j-trainers cannot create its pods: Error creating: pods "j-trainers-0-x" is '
        "forbidden: exceeded quota: q, requested: cpu=4, used: cpu=8, limited: cpu=10"
    )
    long = pc.describe("Job", "j", event("u", "x" * 5000))
    assert len(long) < pc.MESSAGE_MAX + 50 and long.endswith("…")
