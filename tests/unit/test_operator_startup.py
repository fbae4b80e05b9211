"""The operator's start: distinct HA peering priorities, short log lines, settings once."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator

import kopf
import pytest
from kopf._core.actions.loggers import LocalObjectLogger, ObjectLogger

from distgnn import log as dlog
from distgnn_operator.__main__ import build_parser, setup, start_priority
from distgnn_operator.logs import compact_kopf_records, settings_summary


def test_each_replica_gets_its_own_priority_oldest_first() -> None:
    """kopf pauses a replica that sees a peer of higher *or equal* priority: ties stall HA.
    A replica started later ranks lower, so it stands by instead of preempting."""
    args = build_parser().parse_args(["--peering", "distgnn"])
    prios = []
    for _ in range(5):
        prios.append(setup(args)[1].peering.priority)
        time.sleep(0.002)
    assert prios == sorted(prios, reverse=True) and len(set(prios)) == 5
    assert 0 not in prios  # kopf's default, shared by every replica
    assert start_priority() < prios[-1]


def test_priority_and_lifetime_can_be_given(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(["--peering", "p", "--peering-priority", "0"])
    st = setup(args)[1]
    assert st.peering.priority == 0 and st.peering.lifetime == 60
    monkeypatch.setenv("DISTGNN_PEERING_PRIORITY", "9")
    monkeypatch.setenv("DISTGNN_PEERING_LIFETIME", "15")
    st = setup(build_parser().parse_args(["--peering", "p"]))[1]
    assert st.peering.priority == 9 and st.peering.lifetime == 15
    monkeypatch.setenv("DISTGNN_PEERING_LIFETIME", "soon")
    with pytest.raises(SystemExit, match="DISTGNN_PEERING_LIFETIME: must be an integer"):
        build_parser()


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    old_level, old = root.level, list(root.handlers)
    buf = io.StringIO()
    dlog.setup(level="DEBUG", fmt="json", stream=buf)
    compact_kopf_records()
    yield buf
    for h in list(root.handlers):
        if getattr(h, "_distgnn", False):
            root.removeHandler(h)
    for h in old:
        if h not in root.handlers:
            root.addHandler(h)
    root.setLevel(old_level)


BODY = kopf.Body(
    {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "cora", "namespace": "ml", "uid": "u-1"},
    }
)


@pytest.mark.parametrize("cls", [ObjectLogger, LocalObjectLogger])
def test_kopf_object_lines_are_short(captured: io.StringIO, cls: type[ObjectLogger]) -> None:
    settings = kopf.OperatorSettings()
    assert len(repr(settings)) > 1000  # what every line used to carry
    cls(body=BODY, settings=settings).info("Handler 'x' succeeded.")
    (line,) = captured.getvalue().splitlines()
    assert len(line) < 300, line
    obj = json.loads(line)
    assert obj["msg"] == "Handler 'x' succeeded."
    assert obj["object"] == "DistGNNJob ml/cora"
    assert not {"settings", "k8s_ref", "k8s_skip"} & set(obj)


def test_kopf_record_itself_is_untouched(captured: io.StringIO) -> None:
    """kopf's event poster reads k8s_ref/k8s_skip from the same record after us."""
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    root = logging.getLogger()
    keep = Keep()
    root.addHandler(keep)
    try:
        ObjectLogger(body=BODY, settings=kopf.OperatorSettings()).info("x")
    finally:
        root.removeHandler(keep)
    assert seen and hasattr(seen[0], "settings") and hasattr(seen[0], "k8s_ref")
    assert "object" not in seen[0].__dict__


def test_settings_summary_is_one_short_line(captured: io.StringIO) -> None:
    _, settings, _ = setup(build_parser().parse_args(["--peering", "p"]))
    fields = settings_summary(settings, namespaces="*")
    logging.getLogger("distgnn_operator").info("starting", extra={"fields": fields})
    (line,) = captured.getvalue().splitlines()
    obj = json.loads(line)
    assert obj["peering"] == "p" and obj["peering_priority"] == settings.peering.priority
    assert obj["finalizer"] == "distgnn.dev/finalizer" and len(line) < 600


def test_exit_timeout_and_graphserver_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's own exit timeout is 10 minutes: the operator sets 20 s (under Kubernetes'
    default 30 s grace period) unless told otherwise; the GraphServer wait is a flag too."""
    _, st, octx = setup(build_parser().parse_args([]))
    assert st.process.ultimate_exiting_timeout == 20
    assert octx.graphserver_wait_seconds == 300
    args = ["--exit-timeout", "7.5", "--graphserver-wait-seconds", "45"]
    _, st, octx = setup(build_parser().parse_args(args))
    assert st.process.ultimate_exiting_timeout == 7.5 and octx.graphserver_wait_seconds == 45
    monkeypatch.setenv("DISTGNN_EXIT_TIMEOUT", "12")
    monkeypatch.setenv("DISTGNN_GRAPHSERVER_WAIT_SECONDS", "600")
    _, st, octx = setup(build_parser().parse_args([]))
    assert st.process.ultimate_exiting_timeout == 12 and octx.graphserver_wait_seconds == 600
    for bad in ("0", "-1", "inf", "soon"):
        monkeypatch.setenv("DISTGNN_EXIT_TIMEOUT", bad)
        with pytest.raises(SystemExit, match="DISTGNN_EXIT_TIMEOUT: must be a positive number"):
            build_parser()
    monkeypatch.delenv("DISTGNN_EXIT_TIMEOUT")
    with pytest.raises(SystemExit):  # argparse: one line on stderr, exit 2
        build_parser().parse_args(["--graphserver-wait-seconds", "0"])


def test_image_pull_secrets_from_the_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every pod's default imagePullSecrets: ``--image-pull-secret`` (repeatable), else
    ``DISTGNN_IMAGE_PULL_SECRETS`` (the chart's runtimeImage.pullSecrets, comma-separated);
    a name that is no Secret name stops the operator at start with one line."""
    monkeypatch.delenv("DISTGNN_IMAGE_PULL_SECRETS", raising=False)
    _, _, octx = setup(build_parser().parse_args([]))
    assert octx.desired.image_pull_secrets == ()
    monkeypatch.setenv("DISTGNN_IMAGE_PULL_SECRETS", "regcred, mirror.creds,")
    _, _, octx = setup(build_parser().parse_args([]))
    assert octx.desired.image_pull_secrets == ("regcred", "mirror.creds")
    args = build_parser().parse_args(["--image-pull-secret", "a", "--image-pull-secret", "b"])
    _, _, octx = setup(args)
    assert octx.desired.image_pull_secrets == ("a", "b")
    monkeypatch.setenv("DISTGNN_IMAGE_PULL_SECRETS", "Reg_Cred")
    with pytest.raises(SystemExit, match="DISTGNN_IMAGE_PULL_SECRETS: 'Reg_Cred' is not"):
        setup(build_parser().parse_args([]))
    with pytest.raises(SystemExit):  # argparse: one line on stderr, exit 2
        build_parser().parse_args(["--image-pull-secret", "UPPER"])
