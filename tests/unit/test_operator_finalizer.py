"""The JSON patch with which a pass adds kopf's finalizer (distgnn_operator.finalizer)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from distgnn_operator.finalizer import FINALIZER, FinalizerKeeper, finalizer_patch
from distgnn_operator.handlers import HandlerSettings, make_settings
from distgnn_operator.kube import ApiError


def body(**md: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "ml", "resourceVersion": "7", **md}}


def test_the_finalizer_is_kopfs() -> None:
    assert make_settings(HandlerSettings()).persistence.finalizer == FINALIZER


def test_added_to_the_version_read_keeping_other_finalizers() -> None:
    b = body(finalizers=["example.com/hold"])
    ops = finalizer_patch(b)
    assert ops is not None
    out = jsonpatch.apply_patch(b, ops)
    assert out["metadata"]["finalizers"] == ["example.com/hold", FINALIZER]
    newer = copy.deepcopy(b)
    newer["metadata"]["resourceVersion"] = "8"  # changed since the pass read it
    with pytest.raises(jsonpatch.JsonPatchTestFailed):  # the API server: 422, no write
        jsonpatch.apply_patch(newer, ops)


def test_absent_list_is_created() -> None:
    ops = finalizer_patch(body())
    assert ops is not None
    assert jsonpatch.apply_patch(body(), ops)["metadata"]["finalizers"] == [FINALIZER]


@pytest.mark.parametrize(
    "md",
    [
        {"finalizers": [FINALIZER]},  # in place: a pass sends nothing
        {"finalizers": ["x/y", FINALIZER]},
        # being deleted: the API server refuses a new finalizer, kopf adds none either
        {"deletionTimestamp": "2026-01-01T00:00:00Z"},
    ],
)
def test_nothing_to_send(md: dict[str, Any]) -> None:
    assert finalizer_patch(body(**md)) is None


class _Api:
    """Answers the finalizer patch with ``status`` (200: applied); counts the patches."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.sent = 0

    async def json_patch(
        self, kind: str, ns: str, name: str, ops: list[dict[str, Any]]
    ) -> dict[str, Any]:
        self.sent += 1
        if self.status != 200:
            raise ApiError(self.status, "refused")
        return {"metadata": {"name": name, "finalizers": [FINALIZER]}}


async def test_a_refused_patch_is_sent_again_only_for_a_newer_version() -> None:
    """422: a failed test (a newer version exists) or a refusal of this version; either
    way the same version is not patched again on the next passes."""
    api, keeper = _Api(422), FinalizerKeeper()
    b = body()
    for _ in range(3):
        assert await keeper.ensure(api, "DistGNNJob", b) is b  # type: ignore[arg-type]
    assert api.sent == 1
    newer = body(resourceVersion="8")
    api.status = 200
    out = await keeper.ensure(api, "DistGNNJob", newer)  # type: ignore[arg-type]
    assert api.sent == 2 and out is not None and FINALIZER in out["metadata"]["finalizers"]


async def test_gone_and_other_errors() -> None:
    assert await FinalizerKeeper().ensure(_Api(404), "GraphServer", body()) is None  # type: ignore[arg-type]
    with pytest.raises(ApiError):  # e.g. 403: RBAC, reported by the pass
        await FinalizerKeeper().ensure(_Api(403), "GraphServer", body())  # type: ignore[arg-type]
