"""Edge cases where least-privilege RBAC meets the reconciler, and command building."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from distgnn.api import parse_job, trainer_command
from distgnn.cli import build_parser
from distgnn_operator.kube import ApiError
from distgnn_operator.reconcile import OperatorContext, Reconciler


class _ForbiddenPodGroups:
    """An API whose RBAC forbids PodGroups (gang scheduling off in the chart)."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.kinds: list[str] = []

    async def list(self, kind: str, ns: str, labels: Any = None) -> list[dict[str, Any]]:
        self.kinds.append(kind)
        if kind == "PodGroup":
            raise ApiError(self.status, "podgroups is forbidden")
        return []

    async def get(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        self.kinds.append(f"{kind}/{name}")
        return None


async def test_forbidden_podgroups_list_as_none() -> None:
    api = _ForbiddenPodGroups(403)
    rec = Reconciler(OperatorContext(api=api))  # type: ignore[arg-type]
    assert await rec.observe("ns", "distgnn.dev/job-name", "j", "uid-1") == {}
    # the token Secret is read by name, never listed (no list/watch on Secrets)
    assert "Secret/j-token" in api.kinds and "Secret" not in api.kinds


async def test_other_api_errors_still_raise() -> None:
    rec = Reconciler(OperatorContext(api=_ForbiddenPodGroups(500)))  # type: ignore[arg-type]
    with pytest.raises(ApiError):
        await rec.observe("ns", "distgnn.dev/job-name", "j", "uid-1")


def test_trainer_command_with_all_neighbour_fanouts_parses(repo_root: Any) -> None:
    """``-1`` (all neighbours) must reach the trainer as a value, not as an option."""
    obj = yaml.safe_load((repo_root / "examples" / "cora-graphsage.yaml").read_text())
    obj["spec"]["trainers"]["app"]["fanouts"] = [-1, -1]
    cmd = trainer_command(parse_job(obj))
    assert cmd[:2] == ["distgnn", "train"]
    args = build_parser().parse_args(cmd[1:])
    assert args.fanouts in ("-1,-1", [-1, -1])
