"""Two real `distgnn serve` processes (2 workers each) serving Cora to real clients."""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from servers import Servers, partition_cora, running_servers

from distgnn.distributed import DistGraph, DistTensor, initialize, node_split, sample_neighbors
from distgnn.distributed.readplan import owners, plan_read
from distgnn.distributed.sampling import sample_hop_edges
from distgnn.errors import AuthError, ServerError
from distgnn.partition.loader import load_partition
from distgnn.rpc.client import Connection, Timeouts
from distgnn.rpc.protocol import HEADER, MAGIC, MsgType, decode_bytes, encode_bytes


@pytest.fixture(scope="module")
def cora2(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> str:
    return partition_cora(cora_path, tmp_path_factory.mktemp("cora2"), num_parts=2)


@pytest.fixture(scope="module")
def srv(cora2: str) -> Iterator[Servers]:
    with running_servers(cora2, num_parts=2, workers=2) as s:
        yield s
    assert s.returncodes == [0, 0], "servers must drain and exit 0 on SIGTERM"


@pytest.fixture(scope="module")
def new2orig(cora2: str) -> tuple[np.ndarray, np.ndarray]:
    parts = [load_partition(cora2, p) for p in range(2)]
    return np.concatenate([p.orig_nid for p in parts]), np.concatenate([p.orig_eid for p in parts])


def test_every_feature_read_equals_input(srv: Servers, cora_path: Path, new2orig) -> None:
    data = np.load(cora_path)
    with initialize(servers=srv.addrs, token=srv.token) as ctx:
        g = DistGraph("cora", ctx=ctx)
        assert not ctx.standalone and g.num_nodes() == len(data["feat"])
        perm = np.random.default_rng(0).permutation(g.num_nodes())
        feat = g.ndata["feat"][torch.from_numpy(perm)]
        np.testing.assert_array_equal(feat.numpy(), data["feat"][new2orig[0][perm]])
        lab = g.ndata["label"][perm]
        np.testing.assert_array_equal(lab.numpy(), data["label"][new2orig[0][perm]])
        # sampler order (random seeds, then ascending runs): long runs are received in
        # place, short ones through a scratch buffer
        mixed = np.concatenate([perm[:300], np.sort(perm[300:])])
        pol = g.ndata["feat"].policy
        parts = owners(mixed, pol.offsets, "node", "_N")
        plan = plan_read(mixed, parts, pol.offsets, np.empty((mixed.size, 3)))
        assert plan.scatter.size < mixed.size // 2  # most rows received in place
        np.testing.assert_array_equal(
            g.ndata["feat"][mixed].numpy(), data["feat"][new2orig[0][mixed]]
        )
        # one partition only (answer received straight into the output)
        first = np.arange(10)
        np.testing.assert_array_equal(
            g.ndata["feat"][first].numpy(), data["feat"][new2orig[0][first]]
        )


def test_sampling_and_structure_over_servers(srv: Servers, cora_path: Path, new2orig) -> None:
    data = np.load(cora_path)
    orig_n, orig_e = new2orig
    with initialize(env=srv.env()) as ctx:
        g = DistGraph(ctx=ctx)
        seeds = np.arange(g.num_nodes())
        s = sample_neighbors(g, seeds, 5)
        np.testing.assert_array_equal(orig_n[s.src.numpy()], data["src"][orig_e[s.eid.numpy()]])
        np.testing.assert_array_equal(orig_n[s.dst.numpy()], data["dst"][orig_e[s.eid.numpy()]])
        indeg = g.in_degrees().numpy()
        counts = np.bincount(s.dst.numpy(), minlength=g.num_nodes())
        np.testing.assert_array_equal(counts, np.minimum(indeg, 5))
        np.testing.assert_array_equal(
            g.in_degrees().numpy(), np.bincount(data["dst"], minlength=len(orig_n))[orig_n]
        )
        src, dst = g.find_edges(s.eid)
        assert torch.equal(src, s.src) and torch.equal(dst, s.dst)
        mask = g.ndata["train_mask"]
        shares = [node_split(mask, g.get_partition_book(), rank=r, world_size=3) for r in range(3)]
        want = np.flatnonzero(data["train_mask"][orig_n])
        np.testing.assert_array_equal(np.sort(torch.cat(shares).numpy()), want)


def test_sampled_hops_over_servers_equal_in_process_ones(srv: Servers, cora2: str) -> None:
    """Answers received back to back into one column per hop (no concatenation) give the
    hop the in-process handlers give, for every fanout kind."""
    seeds = np.random.default_rng(3).permutation(2708)[:900]
    with initialize(env=srv.env()) as ctx, DistGraph.standalone(cora2) as local:
        g = DistGraph(ctx=ctx)
        for fanout, replace in ((4, False), (3, True), (-1, False), (0, False)):
            a = sample_hop_edges(g, seeds, fanout, replace, seed=7)
            b = sample_hop_edges(local, seeds, fanout, replace, seed=7)
            for x, y in zip(a, b, strict=True):
                assert (x is None) == (y is None)
                if x is not None:
                    np.testing.assert_array_equal(x, y)
            assert a.etype is None and a.src.dtype == a.eid.dtype == np.int64
            # uniform fanouts bound the edges: both servers' columns land in one array
            assert (a.src.base is not None and a.eid.base is not None) == (fanout >= 0)
            np.testing.assert_array_equal(seeds[a.dst_index], g.find_edges(a.eid)[1].numpy())


def test_wrong_or_missing_token_is_refused(srv: Servers) -> None:
    t = Timeouts(request=10, connect=10)
    for bad in ("wrong", None):
        c = Connection(*srv.addrs[0], bad, t)
        with pytest.raises(AuthError, match="refused"):
            c.connect()
        c.close()
    with pytest.raises(AuthError):
        initialize(servers=srv.addrs, token="nope", connect_timeout=10)


def _raw(srv: Servers, data: bytes) -> bytes:
    """Send raw bytes, return everything the server answers before closing."""
    with socket.create_connection(srv.addrs[0], timeout=20) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_garbage_and_truncated_frames_do_not_hurt_the_server(srv: Servers) -> None:
    # garbage: an ERROR frame comes back and the connection closes
    reply = decode_bytes(_raw(srv, b"GET / HTTP/1.1\r\n\r\n" + b"x" * 40))
    assert reply.type == MsgType.ERROR and reply.meta["code"] in ("protocol", "auth")
    # truncated frame: connection simply closed
    assert _raw(srv, encode_bytes(MsgType.HELLO, 1, {"token": srv.token})[:20]) == b""
    # before authentication even a modest buffer is refused (nothing is allocated)
    pre = HEADER.pack(MAGIC, 1, int(MsgType.HELLO), 0, 1, 2, 1, 0) + (1 << 30).to_bytes(8, "little")
    assert b"protocol" in _raw(srv, pre + b"{}")
    # authenticated, then an oversized and an unknown frame
    hello = encode_bytes(MsgType.HELLO, 1, {"token": srv.token})
    huge = (
        HEADER.pack(MAGIC, 1, int(MsgType.PULL), 0, 2, 2, 1, 0)
        + (1 << 62).to_bytes(8, "little")
        + b"{}"
    )
    unknown = HEADER.pack(MAGIC, 1, 200, 0, 3, 2, 0, 0) + b"{}"
    for bad in (huge, unknown):
        out = _raw(srv, hello + bad)
        assert MAGIC in out and b"protocol" in out, (bad, out)
    # a request that is well-formed but wrong gets an error, and the connection lives on
    c = Connection(*srv.addrs[0], srv.token, Timeouts(10, 10))
    with pytest.raises(ServerError, match="out of range"):
        c.request(MsgType.PULL, {"name": "node/_N/feat"}, [np.array([10**9])])
    with pytest.raises(ServerError, match="unknown tensor"):
        c.request(MsgType.PULL, {"name": "node/_N/none"}, [np.array([0])])
    assert c.request(MsgType.PING, {}).meta["part_id"] == 0
    c.close()
    # and a good client is still served in full
    with initialize(servers=srv.addrs, token=srv.token) as ctx:
        assert DistGraph(ctx=ctx).ndata["feat"][np.arange(2708)].shape == (2708, 1433)


def test_health_endpoints(srv: Servers) -> None:
    for info in srv.ready:
        base = f"http://127.0.0.1:{info['health_port']}"
        with urllib.request.urlopen(base + "/readyz", timeout=10) as r:
            assert r.status == 200 and json.loads(r.read())["status"] == "ready"
        with urllib.request.urlopen(base + "/healthz", timeout=10) as r:
            assert r.status == 200


def _connections_to_two_workers(srv: Servers) -> tuple[Connection, Connection]:
    seen: dict[int, Connection] = {}
    extra = []
    for _ in range(60):
        c = Connection(*srv.addrs[0], srv.token, Timeouts(10, 10))
        c.connect()
        if c.server_info["pid"] in seen:
            extra.append(c)
        else:
            seen[c.server_info["pid"]] = c
        if len(seen) == 2:
            break
    for c in extra:
        c.close()
    assert len(seen) == 2, "connections should be spread over both workers"
    a, b = seen.values()
    return a, b


def test_workers_share_one_copy(srv: Servers) -> None:
    info = srv.ready[0]
    shm = info["shm_dir"]
    feat_file = os.path.join(shm, b"node/_N/feat".hex() + ".npy")
    assert os.path.exists(feat_file)
    assert len([f for f in os.listdir(shm) if f.endswith(".npy")]) == len(
        set(os.listdir(shm))
    ) - len([f for f in os.listdir(shm) if not f.endswith(".npy")])
    a, b = _connections_to_two_workers(srv)
    try:
        for pid in info["workers"]:
            with open(f"/proc/{pid}/maps", encoding="utf-8") as f:
                maps = f.read()
            # worker attached to the shared folder (no private copy of the partition)
            assert shm in maps
        # a tensor created and written through one worker is seen by the other
        a.request(
            MsgType.INIT_TENSOR,
            {"name": "node/_N/shared", "dtype": "float32", "shape": [1336, 2], "persistent": True},
        )
        a.request(
            MsgType.PUSH,
            {"name": "node/_N/shared"},
            [np.array([3]), np.array([[7.0, 8.0]], dtype=np.float32)],
        )
        got = b.request(MsgType.PULL, {"name": "node/_N/shared"}, [np.array([3, 4])]).bufs[0]
        assert got.tolist() == [[7.0, 8.0], [0.0, 0.0]]
    finally:
        a.close()
        b.close()


def test_non_persistent_tensor_released_on_close(srv: Servers) -> None:
    ctx1 = initialize(servers=srv.addrs, token=srv.token)
    ctx2 = initialize(servers=srv.addrs, token=srv.token)
    t1 = DistTensor((2708, 2), torch.float32, "tmp", "ones", ctx=ctx1)
    t2 = DistTensor((2708, 2), torch.float32, "tmp", ctx=ctx2)
    ctx1.close()
    assert t2[[0]].tolist() == [[1.0, 1.0]]  # still held by ctx2
    ctx2.close()
    with initialize(servers=srv.addrs, token=srv.token) as ctx3:
        assert "tmp" not in DistGraph(ctx=ctx3).ndata
    assert t1.name == "tmp"


def test_server_log_lines_name_their_partition_once(srv: Servers) -> None:
    """Every JSON line of a server (parent and workers) carries ``partition``, and none a
    second spelling (``part``) of the same field."""
    for i in range(2):
        recs = [json.loads(x) for x in srv.log_text(i).splitlines() if x.startswith("{")]
        msgs = {r["msg"] for r in recs}
        assert {"graph server starting", "load partition: started", "worker ready"} <= msgs, msgs
        assert [r for r in recs if "part" in r] == []
        assert {r.get("partition") for r in recs} == {i}
