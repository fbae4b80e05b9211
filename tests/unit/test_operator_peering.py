"""kopf's peering objects are the operator's to create (not a Helm hook's): which ones, where,
and that a replica started with ``--peering`` creates them at startup."""

from __future__ import annotations

import pytest

from distgnn_operator.__main__ import build_parser, setup
from distgnn_operator.peering import peering_objects


def test_cluster_wide_one_cluster_peering() -> None:
    assert peering_objects("dg-distgnn", []) == [
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "ClusterKopfPeering",
            "metadata": {"name": "dg-distgnn"},
        }
    ]


def test_namespaced_one_peering_per_namespace_globs_skipped() -> None:
    objs = peering_objects("p", ["team-a", "team-b", "team-a", "team-*"])
    assert [(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs] == [
        ("KopfPeering", "team-a", "p"),
        ("KopfPeering", "team-b", "p"),
    ]


def _startup_handlers(argv: list[str]) -> list[str]:
    registry = setup(build_parser().parse_args(argv))[0]
    return [
        h.id for h in registry._activities.get_all_handlers() if str(h.activity.value) == "startup"
    ]


@pytest.mark.parametrize(("argv", "expected"), [([], []), (["--peering", "p"], ["create_peering"])])
def test_only_a_peered_operator_creates_the_object(argv: list[str], expected: list[str]) -> None:
    assert [h.rsplit(".", 1)[-1] for h in _startup_handlers(argv)] == expected
