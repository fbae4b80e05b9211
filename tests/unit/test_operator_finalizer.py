"""The JSON patch with which a pass adds kopf's finalizer (distgnn_operator.finalizer)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from distgnn_operator.finalizer import FINALIZER, finalizer_patch
from distgnn_operator.handlers import HandlerSettings, make_settings


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
