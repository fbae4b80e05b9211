"""Reconcile helpers, the client's credential handling and the command line."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from types import SimpleNamespace

import kopf
import pytest

from distgnn.api.schema import job_crd
from distgnn_operator.__main__ import build_parser, namespaces, setup
from distgnn_operator.desired import DesiredContext, owned_by
from distgnn_operator.handlers import HandlerSettings, make_settings
from distgnn_operator.kube import ApiError, Credentials, KubeApi, ServerVersion
from distgnn_operator.reconcile import job_state, parse_metrics, ready_replicas, subset


def test_subset_ignores_server_added_fields_but_sees_drift() -> None:
    have = {"spec": {"replicas": 2, "extra": 1, "tpl": [{"a": 1, "b": 2}]}, "status": {}}
    assert subset({"spec": {"replicas": 2, "tpl": [{"a": 1}]}}, have)
    assert not subset({"spec": {"replicas": 3}}, have)
    assert not subset({"spec": {"tpl": [{"a": 1}, {"a": 2}]}}, have)
    assert not subset({"spec": {"missing": "x"}}, have)


@pytest.mark.parametrize(
    ("job", "state"),
    [
        (None, "absent"),
        ({"spec": {"completions": 2}, "status": {"succeeded": 1}}, "running"),
        ({"spec": {"completions": 2}, "status": {"succeeded": 2}}, "succeeded"),
        ({"status": {"conditions": [{"type": "Failed", "status": "True"}]}}, "failed"),
        ({"status": {"conditions": [{"type": "Failed", "status": "False"}]}}, "running"),
        ({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}, "succeeded"),
    ],
)
def test_job_state(job: dict | None, state: str) -> None:
    assert job_state(job) == state


def test_ready_replicas() -> None:
    assert ready_replicas(None) == 0 and ready_replicas({"status": {}}) == 0
    assert ready_replicas({"status": {"readyReplicas": 3, "replicas": 4}}) == 3


def test_parse_metrics() -> None:
    got = parse_metrics('{"test_accuracy": 0.8, "val-acc": 1, "note": "x", "ok": true}')
    assert got == {"testAccuracy": 0.8, "valAcc": 1.0}
    assert parse_metrics("Traceback: boom") is None
    assert parse_metrics("[1, 2]") is None
    assert parse_metrics("") is None


def test_edge_regression_metrics_fill_the_rmse_column() -> None:
    # an edge-regression job's final line (examples/cora-edge-regression.yaml): the
    # printer column reads status.metrics.testRmse, as for node regression
    line = (
        '{"app": "edge-regression", "best_epoch": 8, "final_test_rmse": 0.1072, '
        '"inference_edges": 2112, "inference_test_mae": 0.078014, "inference_test_rmse": '
        '0.107192, "mean_test_rmse": 0.2724, "model": "sage", "num_targets": 1, '
        '"output_url": "/x", "test_edges": 2112, "test_mae": 0.0831, "test_rmse": 0.1113}'
    )
    got = parse_metrics(line)
    assert got is not None and got["testRmse"] == 0.1113 and got["meanTestRmse"] == 0.2724
    assert got["inferenceTestRmse"] == 0.107192 and "testAccuracy" not in got
    cols = job_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    assert next(c for c in cols if c["name"] == "RMSE")["jsonPath"] == ".status.metrics.testRmse"


def test_owned_by_needs_controller_ref() -> None:
    obj = {"metadata": {"ownerReferences": [{"uid": "u", "controller": True}]}}
    assert owned_by(obj, "u") and not owned_by(obj, "v")
    assert not owned_by({"metadata": {"ownerReferences": [{"uid": "u"}]}}, "u")


def test_credentials_from_kopf_inline_cert(tmp_path: Path) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    info = SimpleNamespace(
        server="https://k:6443/",
        token="t",
        scheme=None,
        ca_path=None,
        ca_data=None,
        insecure=None,
        certificate_path=None,
        certificate_data=pem,
        private_key_path=None,
        private_key_data=None,
    )
    c = Credentials.from_kopf(info, str(tmp_path))
    assert c.server == "https://k:6443" and c.token == "t"
    assert c.certificate_path is not None and Path(c.certificate_path).read_bytes() == pem
    assert Path(c.certificate_path).stat().st_mode & 0o077 == 0


def test_namespaces_from_flags_or_env() -> None:
    p = build_parser()
    assert namespaces(p.parse_args([]), {"DISTGNN_WATCH_NAMESPACES": " a, b ,,"}) == ["a", "b"]
    assert namespaces(p.parse_args(["-n", "x"]), {"DISTGNN_WATCH_NAMESPACES": "a"}) == ["x"]
    assert namespaces(p.parse_args([]), {}) == []


def test_setup_builds_registry_and_settings() -> None:
    args = build_parser().parse_args(["--runtime-image", "img:1", "--peering", "distgnn"])
    registry, settings, octx = setup(args)
    assert isinstance(registry, kopf.OperatorRegistry)
    assert octx.desired.runtime_image == "img:1"
    assert settings.peering.standalone is False and settings.peering.name == "distgnn"
    st = make_settings(HandlerSettings(watch_server_timeout=123))
    assert st.watching.server_timeout == 123 and st.peering.standalone is True
    assert st.persistence.finalizer == "distgnn.dev/finalizer"


def test_connection_failures_are_api_errors() -> None:
    """A refused connection (or a session closed under a request while the operator stops)
    is an ApiError the reconcile loop retries or drops, never a raw aiohttp exception."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go() -> None:
        api = KubeApi(timeout_s=5)
        api._creds = Credentials(server=f"http://127.0.0.1:{port}")
        try:
            with pytest.raises(ApiError) as e:
                await api.get("Pod", "ns", "p")
            assert e.value.status == 0 and "127.0.0.1" in str(e.value)
        finally:
            await api.close()
        with pytest.raises(ApiError, match="stopping"):
            await api.get("Pod", "ns", "p")

    asyncio.run(go())


def test_drift_compares_only_our_fields_in_canonical_form() -> None:
    from distgnn_operator.drift import canonicalize, drifted

    want = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "resources": {"requests": {"cpu": "0.5", "memory": "2048Mi"}},
                            "env": [{"name": "P", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                            "ports": [],
                        }
                    ],
                    "volumes": [{"name": "shm", "emptyDir": {"sizeLimit": "1024Mi"}}],
                }
            }
        }
    }
    stored = {
        "spec": {
            "updateStrategy": {"type": "RollingUpdate"},  # defaulted by the API server
            "template": {
                "spec": {
                    "containers": [
                        {
                            "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}},
                            "env": [
                                {
                                    "name": "P",
                                    "valueFrom": {
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "x"}
                                    },
                                }
                            ],
                            "terminationMessagePath": "/dev/termination-log",
                        }
                    ],
                    "volumes": [{"name": "shm", "emptyDir": {"sizeLimit": "1Gi"}}],
                    "dnsPolicy": "ClusterFirst",
                }
            },
        }
    }
    assert not drifted(want, stored)
    more = canonicalize(want)
    more["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    assert drifted(more, stored)
    assert more["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "1Gi"


def test_token_hash_annotation_rolls_servers_only_when_the_token_changes() -> None:
    from distgnn.api import parse_job
    from distgnn_operator.desired import ANN_TOKEN_HASH, Stage, desired_job_children
    from distgnn_operator.reconcile import secret_value, token_hash

    job = parse_job(
        {
            "apiVersion": "distgnn.dev/v1alpha1",
            "kind": "DistGNNJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
            "spec": {
                "graph": {"partitions": {"manifestURL": "s3://b/j.json"}},
                "partitioning": {"numParts": 2},
                "trainers": {"replicas": 1, "app": {"name": "node-classification"}},
            },
        }
    )

    def ann(h: str | None) -> str | None:
        objs = desired_job_children(job, stage=Stage(token_hash=h), ctx=_ctx())
        sts = next(o for o in objs if o["kind"] == "StatefulSet")
        return (sts["spec"]["template"]["metadata"].get("annotations") or {}).get(ANN_TOKEN_HASH)

    assert ann(None) is None
    assert ann(token_hash("a")) == token_hash("a") != token_hash("b")
    assert len(token_hash("secret")) == 16 and "secret" not in token_hash("secret")
    secret = {"data": {"token": "c2VjcmV0"}}  # base64("secret")
    assert secret_value(secret, "token") == "secret"
    assert secret_value({"stringData": {"token": "x"}}, "token") == "x"
    assert secret_value(None, "token") is None


def _ctx() -> DesiredContext:
    return DesiredContext(partitions_url="s3://parts")


def test_namespace_terminating_403_is_not_an_error() -> None:
    from distgnn_operator.handlers import _namespace_terminating

    msg = 'services "j-server" is forbidden: unable to create new content in namespace ml '
    assert _namespace_terminating(ApiError(403, msg + "because it is being terminated"))
    assert not _namespace_terminating(ApiError(403, 'services is forbidden: User "x" cannot'))
    assert not _namespace_terminating(ApiError(500, "being terminated"))


async def test_scheduler_keeps_the_earliest_due_pass_per_resource() -> None:
    from distgnn_operator.handlers import _Scheduler

    ran: list[tuple[str, str, str]] = []
    done = asyncio.Event()

    async def run(key: tuple[str, str, str]) -> None:
        ran.append(key)
        done.set()

    sched = _Scheduler()
    key = ("DistGNNJob", "ns", "a")
    sched.at(key, 5.0, run)
    sched.at(key, 0.05, run)  # earlier: replaces the 5 s timer
    sched.at(key, 1.0, run)  # later: ignored
    await asyncio.wait_for(done.wait(), 5)
    await asyncio.sleep(0.1)
    assert ran == [key]
    sched.at(key, 0.01, run)
    sched.cancel(key)  # the resource is gone
    await asyncio.sleep(0.1)
    assert ran == [key]
    await sched.close()


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ({"major": "1", "minor": "29", "gitVersion": "v1.29.3"}, (1, 29)),
        ({"major": "1", "minor": "28+", "gitVersion": "v1.28.9-eks-036c24b"}, (1, 28)),
        ({"major": "", "minor": "", "gitVersion": "v1.30.1+k3s1"}, (1, 30)),
    ],
)
def test_server_version_parse(body: dict, want: tuple[int, int]) -> None:
    v = ServerVersion.parse(body)
    assert (v.major, v.minor) == want and str(v) == body["gitVersion"]
    assert v.at_least(1, 28) and v.at_least(*want) and not v.at_least(want[0], want[1] + 1)


def test_server_version_unreadable() -> None:
    with pytest.raises(ValueError, match="no Kubernetes version"):
        ServerVersion.parse({"major": "one"})
