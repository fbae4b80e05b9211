"""Request handlers on a real partition (in-process): bounded work, checked values, paging."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.support.cora import handlers_on, partition_cora

from distgnn.errors import ConfigError
from distgnn.rpc.protocol import MsgType, encode_bytes
from distgnn.server.handlers import LIST_PAGE, Handlers
from distgnn.server.limits import ServerLimits, parse_size
from distgnn.server.store import TensorError

LIMITS = ServerLimits(max_ids=5000, max_reply_bytes=4 << 20, max_sample_edges=20_000)


@pytest.fixture(scope="module")
def cora1(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> str:
    return partition_cora(tmp_path_factory.mktemp("cora1h"), cora_path, 1)


@pytest.fixture
def h(cora1: str) -> Iterator[Handlers]:
    with handlers_on(cora1, limits=LIMITS) as h:
        yield h


def _refused(h: Handlers, mtype: MsgType, meta: dict, bufs: list, match: str) -> None:
    with pytest.raises(TensorError, match=match):
        h.handle(mtype, meta, bufs, "s")


def test_work_per_request_is_bounded(h: Handlers) -> None:
    feat = {"name": "node/_N/feat"}  # 1433 float32 = 5732 bytes a row
    assert h.handle(MsgType.PULL, feat, [np.arange(700)])[1][0].shape == (700, 1433)
    _refused(h, MsgType.PULL, feat, [np.zeros(5001, np.int64)], "DISTGNN_SERVER_MAX_IDS")
    _refused(h, MsgType.PULL, feat, [np.zeros(800, np.int64)], "DISTGNN_SERVER_MAX_REPLY_BYTES")
    _refused(h, MsgType.DEGREES, {"dir": "out"}, [np.zeros(6000, np.int64)], "MAX_IDS")
    seeds = [np.arange(2000)]
    s = MsgType.SAMPLE_NEIGHBORS
    assert len(h.handle(s, {"fanout": 5}, seeds)[1][0]) <= 10_000
    _refused(h, s, {"fanout": 10**9, "replace": True}, seeds, "DISTGNN_SERVER_MAX_SAMPLE_EDGES")
    _refused(h, s, {"fanout": 11, "replace": True}, seeds, "would touch")
    for bad in (10**30, True, "5", [5], {"x": 1}, None, -2):
        _refused(h, s, {"fanout": bad}, seeds, "fanout")
    _refused(h, s, {"fanout": 5, "seed": "abc"}, seeds, "seed")
    _refused(h, s, {"fanout": 5, "seed": -1}, seeds, "seed")
    _refused(h, s, {"fanout": 5, "replace": "yes"}, seeds, "replace")


def test_values_that_do_not_fit_the_dtype_are_refused(h: Handlers) -> None:
    for dt in ("float32", "int32", "int64", "bool"):
        h.handle(MsgType.INIT_TENSOR, {"name": f"node/_N/{dt}", "dtype": dt, "shape": [2708]}, [])
    row = [np.array([0])]
    cases = [
        ("float32", np.array([1e300]), "float32"),
        ("float32", np.array([2**130], dtype=np.float64), "float32"),
        ("int32", np.array([np.nan]), "int32"),
        ("int32", np.array([np.inf]), "int32"),
        ("int32", np.array([2**40]), "int32"),
        ("int32", np.array([1.5]), "int32"),
        ("int64", np.array([2.0**63]), "int64"),
        ("bool", np.array([2]), "bool"),
    ]
    for dt, v, match in cases:
        _refused(h, MsgType.PUSH, {"name": f"node/_N/{dt}"}, [*row, v], f"do not fit {match}")
    h.handle(MsgType.PUSH, {"name": "node/_N/float32"}, [*row, np.array([np.nan, 3.5])[1:]])
    h.handle(MsgType.PUSH, {"name": "node/_N/int32"}, [*row, np.array([7.0])])
    h.handle(MsgType.PUSH, {"name": "node/_N/int64"}, [*row, np.array([-(2**62)])])
    h.handle(MsgType.PUSH, {"name": "node/_N/bool"}, [*row, np.array([1])])
    got = [h.handle(MsgType.PULL, {"name": f"node/_N/{d}"}, row)[1][0][0] for d in
           ("float32", "int32", "int64", "bool")]  # fmt: skip
    assert [float(x) for x in got] == [3.5, 7.0, float(-(2**62)), 1.0]
    init = {"name": "node/_N/c", "dtype": "float32", "shape": [2708]}
    _refused(h, MsgType.INIT_TENSOR, {**init, "init": {"kind": "constant", "value": 1e300}},
             [], "do not fit")  # fmt: skip
    _refused(h, MsgType.INIT_TENSOR, {**init, "dtype": "int32",
             "init": {"kind": "constant", "value": float("nan")}}, [], "finite")  # fmt: skip


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        ({"name": "node/_N/x", "dtype": "float32", "shape": [10**30, 0]}, "shape"),
        ({"name": "node/_N/x", "dtype": "float32", "shape": [True]}, "shape"),
        ({"name": "node/_N/x", "dtype": "object", "shape": [3]}, "dtype"),
        ({"name": "node/_N/" + "x" * 150, "dtype": "int8", "shape": [3]}, "not valid"),
        ({"name": "node/_N/" + "x" * 95, "dtype": "int8", "shape": [3]}, "longer than"),
        ({"name": "node/_N/\ud800", "dtype": "int8", "shape": [3]}, "not valid"),
        ({"name": "node/_N/x", "dtype": "int8", "shape": [3], "seed": 1e300}, "seed"),
        ({"name": "node/_N/x", "dtype": "int8", "shape": [3], "persistent": "no"}, "persistent"),
        ({"name": "node/_N/x", "dtype": "int8", "shape": [3], "init": {"kind": "eval"}}, "kind"),
    ],
)
def test_hostile_create_fields_are_bad_requests(h: Handlers, meta: dict, match: str) -> None:
    _refused(h, MsgType.INIT_TENSOR, meta, [], match)


def test_list_tensors_answers_in_bounded_pages(h: Handlers) -> None:
    n = LIST_PAGE + 100
    for i in range(n):
        h.handle(MsgType.INIT_TENSOR, {"name": f"node/_N/z{i:04d}-" + "x" * 80,
                                       "dtype": "int8", "shape": [2708]}, [])  # fmt: skip
    seen: dict[str, object] = {}
    after, pages = None, 0
    while True:
        meta, _ = h.handle(MsgType.LIST_TENSORS, {"after": after}, [])
        assert len(meta["tensors"]) <= LIST_PAGE
        assert len(encode_bytes(MsgType.LIST_TENSORS, 1, meta)) < 256 << 10
        seen.update(meta["tensors"])
        pages += 1
        after = meta["next"]
        if after is None:
            break
    assert pages == 2 and len([k for k in seen if k.startswith("node/_N/z")]) == n
    assert seen["node/_N/feat"] == {"dtype": "float32", "shape": [2708, 1433]}


def test_limits_come_from_memory_and_the_environment() -> None:
    lim = ServerLimits.derive(env={}, memory=8 << 30, shm_free=2 << 30, nofile=1024)
    assert lim.max_tensor_bytes == 1 << 30 and lim.max_request_bytes == 512 << 20
    assert lim.max_connections == 480 and lim.max_reply_bytes == 1 << 30
    lim = ServerLimits.derive(
        env={"DISTGNN_SERVER_MAX_IDS": "1M", "DISTGNN_SERVER_IDLE_TIMEOUT": "5.5"}, memory=8 << 30
    )
    assert lim.max_ids == 1 << 20 and lim.idle_timeout == 5.5
    assert ServerLimits.from_json(lim.to_json()) == lim
    assert json.loads(lim.to_json())["max_ids"] == 1 << 20
    assert parse_size("2GiB", "X") == 2 << 30
    for env in ({"DISTGNN_SERVER_MAX_IDS": "lots"}, {"DISTGNN_SERVER_MAX_IDS": "0"},
                {"DISTGNN_SERVER_SEND_TIMEOUT": "-1"}):  # fmt: skip
        with pytest.raises(ConfigError, match=next(iter(env))):
            ServerLimits().with_env(env)
