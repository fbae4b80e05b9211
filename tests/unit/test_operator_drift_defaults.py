"""No update loop on a real API server: a child stored with the API server's defaults,
canonical quantities and dropped empty fields (:mod:`tests.support.apiserver_defaults`) is
not drift, so a pass over settled children sends nothing; a real change still is."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from tests.support.apiserver_defaults import stored
from tests.support.children import all_children

from distgnn_operator import drift
from distgnn_operator.reconcile import NO_DRIFT_KINDS, OperatorContext, Reconciler

Obj = dict[str, Any]


class _RecordingApi:
    """Records every write a pass sends."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, str]] = []

    async def create(self, obj: Obj) -> Obj:
        self.writes.append(("create", obj["kind"], obj["metadata"]["name"]))
        return obj

    async def patch(self, kind: str, ns: str, name: str, patch: Obj, **_: Any) -> Obj:
        self.writes.append(("patch", kind, name))
        return {}

    async def delete(self, kind: str, ns: str, name: str) -> bool:
        self.writes.append(("delete", kind, name))
        return True

    async def list(self, kind: str, ns: str, labels: Any = None) -> list[Obj]:
        return []


def _key(o: Obj) -> tuple[str, str]:
    return o["kind"], o["metadata"]["name"]


def _apply(want: list[Obj], have: dict[tuple[str, str], Obj]) -> list[tuple[str, str, str]]:
    api = _RecordingApi()
    rec = Reconciler(OperatorContext(api=api))  # type: ignore[arg-type]
    asyncio.run(rec.apply(want, have, lambda *_: None))
    return api.writes


def _stored_children() -> tuple[list[Obj], dict[tuple[str, str], Obj]]:
    """The desired children and, for each, what the API server stores after our create."""
    want = all_children()
    return want, {_key(o): stored(drift.canonicalize(o)) for o in want}


PATCHED_KINDS = sorted({o["kind"] for o in all_children()} - set(NO_DRIFT_KINDS))


def test_the_model_rewrites_what_the_api_server_rewrites() -> None:
    """The stored form really differs from what we send (else the tests below prove
    nothing): defaults added, quantities canonical, empty env values dropped."""
    assert PATCHED_KINDS == ["NetworkPolicy", "Service", "StatefulSet"]
    sts = stored(
        {
            "kind": "StatefulSet",
            "metadata": {"name": "s"},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "c",
                                "image": "x:1",
                                "env": [{"name": "E", "value": ""}],
                                "resources": {
                                    "requests": {"cpu": "1000m", "memory": "1024Mi"},
                                    "limits": {"cpu": "0.5"},
                                },
                            }
                        ]
                    }
                }
            },
        }
    )
    spec = sts["spec"]
    assert spec["revisionHistoryLimit"] == 10 and spec["podManagementPolicy"] == "OrderedReady"
    c = spec["template"]["spec"]["containers"][0]
    assert c["env"] == [{"name": "E"}]
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "500m"}}
    assert spec["template"]["spec"]["dnsPolicy"] == "ClusterFirst"


@pytest.mark.parametrize("kind", PATCHED_KINDS)
def test_api_server_defaults_are_not_drift(kind: str) -> None:
    want, have = _stored_children()
    for o in want:
        if o["kind"] != kind:
            continue
        patch = {k: v for k, v in o.items() if k not in ("apiVersion", "kind", "metadata")}
        patch["metadata"] = {"labels": o["metadata"]["labels"]}
        assert not drift.drifted(patch, have[_key(o)]), o["metadata"]["name"]


def test_a_pass_over_settled_children_writes_nothing() -> None:
    want, have = _stored_children()
    assert _apply(want, have) == []


def test_a_real_change_is_still_patched() -> None:
    want, have = _stored_children()
    sts = next(o for o in want if o["kind"] == "StatefulSet")
    changed = copy.deepcopy(have)
    c = changed[_key(sts)]["spec"]["template"]["spec"]["containers"][0]
    c["image"] = "example.org/other:2"
    svc = next(o for o in want if o["kind"] == "Service")
    changed[_key(svc)]["spec"]["ports"][0]["port"] += 1
    netpol = next(o for o in want if o["kind"] == "NetworkPolicy")
    changed[_key(netpol)]["spec"]["policyTypes"] = ["Ingress", "Egress"]
    assert sorted(_apply(want, changed)) == sorted(
        [("patch", k, n) for k, n in (_key(sts), _key(svc), _key(netpol))]
    )
