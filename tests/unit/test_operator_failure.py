"""Root cause of a failed pod from its termination message: one line for the condition,
the traceback (cut at its start, not its end) for an event."""

from __future__ import annotations

import json
from typing import Any

import pytest

from distgnn_operator.failure import DETAIL_MAX, first_failure, summarize

TB = (
    "Traceback (most recent call last):\n"
    '  File "/app/distgnn/train/cli.py", line 118, in main\n'
    "    return _run(args)\n"
    "RuntimeError: CUDA out of memory on rank 1"
)
JSON_LOG = "\n".join(
    json.dumps(r)
    for r in (
        {"ts": 1.0, "level": "info", "logger": "distgnn.partition", "msg": "loading graph"},
        {
            "ts": 2.0,
            "level": "error",
            "logger": "distgnn.cli",
            "msg": "partition failed",
            "exc": "Traceback (most recent call last):\n  ...\nMemoryError: cannot allocate",
        },
    )
)

SUMMARY = [
    # the trainers' JSON error object (distgnn.train.cli.main)
    (
        json.dumps(
            {
                "error": "RuntimeError",
                "message": "CUDA out of memory on rank 1",
                "rank": "1",
                "traceback": TB,
            }
        ),
        None,
        "RuntimeError: CUDA out of memory on rank 1",
        "Traceback (most recent call last)",
    ),
    # a multi-line exception message keeps its first line only
    (
        json.dumps({"error": "ValueError", "message": "bad fanouts\nsee docs", "traceback": ""}),
        None,
        "ValueError: bad fanouts",
        "",
    ),
    # FallbackToLogsOnError: a plain Python traceback in the log tail
    ("some output\n" + TB + "\n", None, "RuntimeError: CUDA out of memory on rank 1", "Traceback"),
    # the CLI's one-line error (a user mistake)
    (
        "distgnn partition: error: spec.graph.source.url: no such object s3://b/g.npz",
        None,
        "distgnn partition: error: spec.graph.source.url: no such object s3://b/g.npz",
        "distgnn partition",
    ),
    # JSON log lines (distgnn.log): the error record's exception
    (JSON_LOG, None, "MemoryError: cannot allocate (partition failed)", "loading graph"),
    # nothing written: the container's reason and exit code
    ("", "OOMKilled", "OOMKilled (exit code 137): the container exceeded its memory limit", ""),
    (None, "Error", "Error (exit code 137)", ""),
    # anything else: its last line
    ("starting\nkilled by signal 9", None, "killed by signal 9", "starting"),
]


@pytest.mark.parametrize(("message", "reason", "summary", "detail_has"), SUMMARY)
def test_summary_is_one_line_root_cause(
    message: str | None, reason: str | None, summary: str, detail_has: str
) -> None:
    got, detail = summarize(message, reason, 137)
    assert got == summary
    assert "\n" not in got and len(got) <= 300
    assert detail_has in detail


def test_long_traceback_keeps_its_end() -> None:
    tb = "Traceback (most recent call last):\n" + "  frame\n" * 1000 + "KeyError: 'feat'"
    summary, detail = summarize(
        json.dumps({"error": "KeyError", "message": "'feat'", "traceback": tb})
    )
    assert summary == "KeyError: 'feat'"
    assert len(detail) == DETAIL_MAX and detail.startswith("…") and detail.endswith("'feat'")


def _pod(name: str, rank: int, code: int, msg: str, at: str) -> dict[str, Any]:
    term = {"exitCode": code, "message": msg, "finishedAt": at}
    return {
        "metadata": {
            "name": name,
            "labels": {"batch.kubernetes.io/job-completion-index": str(rank)},
        },
        "status": {"containerStatuses": [{"state": {"terminated": term}}]},
    }


def test_first_failure_is_the_earliest_failed_pod() -> None:
    pods = [
        _pod("t-0", 0, 1, "ConnectionResetError: peer closed", "2026-01-01T00:00:09Z"),
        _pod("t-1", 1, 1, TB, "2026-01-01T00:00:03Z"),
        _pod("t-2", 2, 0, '{"testAccuracy": 0.8}', "2026-01-01T00:00:01Z"),
    ]
    fail = first_failure(pods)
    assert fail is not None and fail.pod == "t-1" and fail.rank == "1"
    assert fail.headline() == "RuntimeError: CUDA out of memory on rank 1 (rank 1, pod t-1)"
    assert first_failure([pods[2]]) is None


def _containers(*statuses: tuple[str, int | None]) -> dict[str, Any]:
    """A trainer pod (rank 0) whose containers have these (name, exit code); None: running."""
    css = []
    for name, code in statuses:
        state = {"running": {}} if code is None else {"terminated": {"exitCode": code}}
        css.append({"name": name, "state": state})
    init = [{"name": "server", "state": {"terminated": {"exitCode": 2}}}]
    return {
        "metadata": {"name": "t-0", "labels": {"batch.kubernetes.io/job-completion-index": "0"}},
        "status": {"containerStatuses": css, "initContainerStatuses": init},
    }


@pytest.mark.parametrize(
    ("statuses", "code", "config_error"),
    [
        ([("trainer", 2)], 2, True),  # `distgnn train`'s configuration error
        ([("trainer", 1)], 1, False),  # any other failure: retried
        ([("trainer", 137)], 137, False),  # killed (OOM): retried
        ([("trainer", 0), ("trainer-1", 2)], 2, True),  # a co-located pod's second trainer
        ([("istio-proxy", 2), ("trainer", 1)], 1, False),  # a sidecar's status does not count
        ([("istio-proxy", 2), ("trainer", None)], None, False),
    ],
)
def test_the_failed_trainer_containers_exit_code(
    statuses: list[tuple[str, int | None]], code: int | None, config_error: bool
) -> None:
    fail = first_failure([_containers(*statuses)], "trainer")
    if code is None:
        assert fail is None
        return
    assert fail is not None and fail.exit_code == code and fail.config_error is config_error


def test_exit_code_without_a_container_name_and_of_a_malformed_status() -> None:
    fail = first_failure([_pod("t-0", 0, 2, "ConfigError: --feat: no", "")])
    assert fail is not None and fail.exit_code == 2 and fail.config_error
    pod = _pod("t-0", 0, 1, "x", "")
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = "2"
    fail = first_failure([pod])
    assert fail is not None and fail.exit_code is None and not fail.config_error


def test_a_disrupted_group_is_told_from_the_job_or_the_first_pod() -> None:
    """Disrupted: the Job failed by its DisruptionTarget rule (the evicted pod may be gone),
    or the first failing pod has the condition; an exit-code FailJob rule is not one."""
    from distgnn_operator.reconcile import trainers_disrupted

    def job(reason: str, message: str) -> dict[str, Any]:
        cond = {"type": "Failed", "status": "True", "reason": reason, "message": message}
        return {"status": {"conditions": [cond]}}

    by_rule = job("PodFailurePolicy", "Pod ml/t-1 has condition DisruptionTarget matching ...")
    assert trainers_disrupted(by_rule, None)
    by_exit = job("PodFailurePolicy", "Container trainer ... exit code 2")
    assert not trainers_disrupted(by_exit, None)
    assert not trainers_disrupted(job("BackoffLimitExceeded", "Job has reached ..."), None)
    pod = {
        "metadata": {"name": "t-1"},
        "status": {
            "conditions": [{"type": "DisruptionTarget", "status": "True"}],
            "containerStatuses": [{"name": "trainer", "state": {"terminated": {"exitCode": 143}}}],
        },
    }
    first = first_failure([pod], "trainer")
    assert first is not None and first.disrupted
    assert trainers_disrupted(job("BackoffLimitExceeded", ""), first)
    pod["status"]["conditions"][0]["status"] = "False"
    plain = first_failure([pod], "trainer")
    assert plain is not None and not plain.disrupted
