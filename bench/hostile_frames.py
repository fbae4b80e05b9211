"""Replay hostile frames, tokens, pickles and connection attacks against real graph servers.

    python bench/hostile_frames.py [--workers 2] [--case-timeout 20] [--json OUT]

Starts one ``distgnn serve`` (a generated 3,000-node graph, one partition) on 127.0.0.1
with small limits (so oversized requests are cheap to try) and sends each attack on its
own connection(s). After every case it checks the server: the marker file that a pickle
payload would create (``ran code``), the server and worker processes and the log
(``crashed``: a process died or was replaced, an ``internal`` error, a traceback), and a
PING on a fresh connection within 5 s (``hung``, also when the case itself did not finish
within ``--case-timeout``). ``refused cleanly`` means the server answered with an ERROR
frame of a client-error code (or closed the connection where that is the answer: idle,
slowloris, over the cap) and kept serving. ``accepted`` counts attacks that were answered
normally (0 expected). Prints one table row per group and a total; exit 1 unless crashed,
hung and ran code are all 0.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pickle
import secrets
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from distgnn.rpc.protocol import HEADER, MAGIC, VERSION, MsgType, encode_bytes, recv_frame

LIMITS = {
    "DISTGNN_SERVER_MAX_IDS": "100000",
    "DISTGNN_SERVER_MAX_REPLY_BYTES": "16M",
    "DISTGNN_SERVER_MAX_REQUEST_BYTES": "64M",
    "DISTGNN_SERVER_MAX_SAMPLE_EDGES": "1M",
    "DISTGNN_SERVER_MAX_TENSORS": "64",
    "DISTGNN_SERVER_MAX_TENSOR_BYTES": "64M",
    "DISTGNN_SERVER_MAX_CONNECTIONS": "64",
    "DISTGNN_SERVER_IDLE_TIMEOUT": "4",
    "DISTGNN_SERVER_SEND_TIMEOUT": "2",
    "DISTGNN_HEALTH_MAX_CONNECTIONS": "8",
    "DISTGNN_HEALTH_TIMEOUT": "1",
}
CLEAN_CODES = {"protocol", "auth", "bad_request", "busy", "resource"}
NODES = 3000


class Refused(Exception):
    """The server refused the attack cleanly."""


class Served(Exception):
    """The server answered the attack as a normal request."""


class Crashed(Exception):
    """An internal error answered the attack."""


@dataclass
class Case:
    group: str
    name: str
    run: Callable[[Target], None]


# --- the server ----------------------------------------------------------------------
def make_graph(out: Path) -> str:
    from distgnn.graph.io import graph_from_arrays
    from distgnn.partition.partitioner import partition_graph

    rng = np.random.default_rng(0)
    e = NODES * 8
    arrays = {
        "src": rng.integers(0, NODES, e, dtype=np.int64),
        "dst": rng.integers(0, NODES, e, dtype=np.int64),
        "feat": rng.random((NODES, 64), dtype=np.float32),
    }
    partition_graph(graph_from_arrays(arrays, "hostile"), 1, str(out), "g", method="random",
                    progress=False)  # fmt: skip
    return str(out / "g.json")


class Target:
    """The running server, its token, log and the pickle marker file."""

    def __init__(self, manifest: str, workers: int, tmp: Path) -> None:
        self.tmp = tmp
        self.token = secrets.token_hex(16)
        (tmp / "tok").write_text(self.token)
        self.marker = tmp / "PWNED"
        self.log = tmp / "server.log"
        ready = tmp / "ready.json"
        env = {**os.environ, **LIMITS, "DISTGNN_LOG_FORMAT": "json"}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "distgnn.cli", "serve", "--manifest", manifest,
                 "--part-id", "0", "--bind", "127.0.0.1", "--port", "0", "--health-port", "0",
                 "--workers", str(workers), "--token-file", str(tmp / "tok"),
                 "--ready-file", str(ready)],
                stdout=out, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        deadline = time.monotonic() + 120
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server failed to start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)
        self.info = json.loads(ready.read_text())
        self.addr = ("127.0.0.1", int(self.info["port"]))
        self.health = int(self.info["health_port"])
        self.log_pos = 0

    def pids(self) -> set[int]:
        try:
            p = psutil.Process(self.proc.pid)
            return {p.pid, *(c.pid for c in p.children())}
        except psutil.NoSuchProcess:
            return set()

    def new_log(self) -> str:
        with open(self.log, "rb") as f:
            f.seek(self.log_pos)
            data = f.read()
        self.log_pos += len(data)
        return data.decode(errors="replace")

    def raw(self, timeout: float = 10.0) -> socket.socket:
        s = socket.create_connection(self.addr, timeout=timeout)
        return s

    def authed(self, session: str | None = None) -> socket.socket:
        s = self.raw()
        meta = {"token": self.token, **({"session": session} if session else {})}
        s.sendall(encode_bytes(MsgType.HELLO, 1, meta))
        f = recv_frame(s, "srv", deadline=time.monotonic() + 10)
        if f.type != MsgType.HELLO:
            raise RuntimeError(f"login failed: {f.meta}")
        return s

    def ping_ok(self) -> bool:
        try:
            with self.authed() as s:
                s.sendall(encode_bytes(MsgType.PING, 2, {}))
                return recv_frame(s, "srv", deadline=time.monotonic() + 5).type == MsgType.PING
        except Exception:
            return False

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


# --- helpers ---------------------------------------------------------------------------
def frame(mtype: int, meta: bytes, lens: list[int] | None = None, payload: bytes = b"",
          version: int = VERSION, magic: bytes = MAGIC, flags: int = 0,
          nbufs: int | None = None) -> bytes:  # fmt: skip
    lens = lens or []
    head = HEADER.pack(magic, version, mtype, flags, 7, len(meta),
                       len(lens) if nbufs is None else nbufs, 0)  # fmt: skip
    return head + struct.pack(f"<{len(lens)}Q", *lens) + meta + payload


def jmeta(meta: dict[str, Any], bufs: list[tuple[str, list[Any]]] | None = None) -> bytes:
    return json.dumps({**meta, "bufs": bufs or []}).encode()


def expect_refusal(s: socket.socket, close_ok: bool = False, timeout: float = 15.0) -> None:
    """Read the answer: a clean ERROR -> Refused; a normal answer -> Served."""
    try:
        f = recv_frame(s, "srv", deadline=time.monotonic() + timeout)
    except Exception as e:
        if close_ok and "closed" in str(e):
            raise Refused() from None
        if "timeout" in str(e).lower() or "within" in str(e):
            raise TimeoutError("no answer") from None
        if "closed" in str(e) or "connection" in str(e).lower():
            raise Refused() from None  # closed after a partial frame of ours
        raise
    if f.type == MsgType.ERROR:
        if f.meta.get("code") in CLEAN_CODES:
            raise Refused()
        raise Crashed(f"{f.meta.get('code')}: {f.meta.get('message')}")
    raise Served(f"{f.type.name} {str(f.meta)[:100]}")


def send_hostile(data: bytes, authed: bool, close_ok: bool) -> Callable[[Target], None]:
    """Send ``data`` on a fresh connection (after HELLO when ``authed``); expect a refusal."""

    def run(t: Target) -> None:
        with t.authed() if authed else t.raw() as s:
            try:
                s.sendall(data)
            except OSError:
                raise Refused() from None
            expect_refusal(s, close_ok)

    return run


def pre_auth(data: bytes, close_ok: bool = True) -> Callable[[Target], None]:
    return send_hostile(data, False, close_ok)


def post_auth(data: bytes, close_ok: bool = False) -> Callable[[Target], None]:
    return send_hostile(data, True, close_ok)


def request(mtype: MsgType, meta: dict[str, Any], bufs: list[np.ndarray] | None = None
            ) -> Callable[[Target], None]:  # fmt: skip
    return post_auth(encode_bytes(mtype, 5, meta, bufs or []))


class Evil:
    """Unpickling this runs code that creates the marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


# --- the cases ---------------------------------------------------------------------------
def cases(marker: str) -> list[Case]:
    out: list[Case] = []
    add = out.append
    rng = np.random.default_rng(7)
    evil = pickle.dumps(Evil(marker), protocol=pickle.HIGHEST_PROTOCOL)
    evil0 = pickle.dumps(Evil(marker), protocol=0)

    # framing, before login
    for n in (1, 23, 24, 25, 100, 4096, 65536):
        add(Case("framing", f"garbage {n} B", pre_auth(rng.bytes(n))))
    add(Case("framing", "bad magic", pre_auth(frame(1, b"{}", magic=b"XXXX"))))
    for v in (0, 2, 255):
        add(Case("framing", f"version {v}", pre_auth(frame(1, b"{}", version=v))))
    for mt in (0, 15, 16, 100, 254):
        add(Case("framing", f"unknown type {mt}", pre_auth(frame(mt, b"{}"))))
    add(Case("framing", "meta length 4 GiB", pre_auth(HEADER.pack(MAGIC, 1, 1, 0, 1,
        0xFFFFFFFF, 0, 0))))  # fmt: skip
    add(Case("framing", "65535 buffers", pre_auth(HEADER.pack(MAGIC, 1, 1, 0, 1, 2, 65535, 0))))
    add(
        Case(
            "framing",
            "HELLO with 2^63 B buffer",
            pre_auth(frame(1, jmeta({"token": "x"}, [["uint8", [1]]]), [1 << 63])),
        )
    )
    add(Case("framing", "truncated header", pre_auth(frame(1, b"{}")[:10])))
    add(Case("framing", "truncated meta", pre_auth(frame(1, b'{"token": "abc"}')[:30])))
    add(Case("framing", "response flag", pre_auth(frame(1, b"{}", flags=1))))
    for mt in MsgType:
        if mt not in (MsgType.HELLO, MsgType.ERROR):
            add(Case("auth", f"{mt.name} before HELLO", pre_auth(frame(int(mt), b"{}"))))

    # tokens
    for name, tok in [
        ("empty", ""),
        ("wrong", "x" * 32),
        ("60 KiB", "a" * 60_000),
        ("lone surrogate", "\ud800"),
        ("NUL", "\x00" * 8),
        ("int", 5),
        ("list", [1]),
        ("object", {"a": 1}),
        ("null", None),
        ("bool", True),
    ]:
        add(Case("auth", f"token {name}", pre_auth(encode_bytes(MsgType.HELLO, 1,
                                                                  {"token": tok}))))  # fmt: skip
    add(Case("auth", "token prefix+1", lambda t: pre_auth(encode_bytes(
        MsgType.HELLO, 1, {"token": t.token + "x"}))(t)))  # fmt: skip
    add(Case("auth", "token prefix", lambda t: pre_auth(encode_bytes(
        MsgType.HELLO, 1, {"token": t.token[:-1]}))(t)))  # fmt: skip

    # JSON metadata
    add(Case("json", "nested 100k", post_auth(frame(11, b"[" * 100_000 + b"]" * 100_000),
                                              close_ok=True)))  # fmt: skip
    add(Case("json", "nested object 50k", post_auth(
        frame(11, b'{"a":' * 50_000 + b"1" + b"}" * 50_000), close_ok=True)))  # fmt: skip
    for name, raw in [("not json", b"not json"), ("array", b"[]"), ("number", b"1"),
                      ("null", b"null"), ("bad utf-8", b'{"a":"\xff\xfe"}'),
                      ("BOM", b'\xef\xbb\xbf{}'), ("bufs not list", b'{"bufs": 5}'),
                      ("bufs mismatch", b'{"bufs": [["int64", [1]]]}')]:  # fmt: skip
        add(Case("json", name, post_auth(frame(11, raw), close_ok=True)))
    add(Case("json", "meta over 1 MiB", post_auth(frame(11, b'{"a":"' + b"x" * (1 << 20)
                                                        + b'"}'), close_ok=True)))  # fmt: skip
    for name, raw in [
        ("NaN", b'{"name":"node/_N/feat","x":NaN}'),
        ("Infinity lr", b'{"name":"node/_N/feat","lr":Infinity}'),
    ]:
        add(Case("json", name, post_auth(frame(int(MsgType.SPARSE_UPDATE), raw[:-1]
                                                + b',"bufs":[]}'))))  # fmt: skip

    # buffer descriptors and dtypes
    descs = [
        ("shape 10^30 x 0", ["int64", [10**30, 0]], 0),
        ("shape [true]", ["int64", [True]], 8),
        ("shape [-1]", ["int64", [-1]], 8),
        ("shape [1.5]", ["int64", [1.5]], 8),
        ("9 dims", ["int64", [1] * 9], 8),
        ("shape str", ["int64", "8"], 8),
        ("object dtype", ["object", [1]], 8),
        ("|O dtype", ["|O", [1]], 8),
        ("complex", ["complex128", [1]], 16),
        ("unicode", ["<U2", [1]], 8),
        ("bytes", ["S8", [1]], 8),
        ("void", ["V8", [1]], 8),
        ("big-endian", [">f4", [2]], 8),
        ("float128", ["float128", [1]], 16),
        ("datetime", ["datetime64[s]", [1]], 8),
        ("dtype list", [["int64"], [1]], 8),
        ("length mismatch", ["int64", [2]], 8),
    ]
    for name, d, n in descs:
        add(Case("buffers", name, post_auth(frame(int(MsgType.PULL), json.dumps(
            {"name": "node/_N/feat", "bufs": [d]}).encode(), [n], b"\0" * n),
            close_ok=True)))  # fmt: skip
    add(
        Case(
            "buffers",
            "declared 1 TiB",
            post_auth(
                frame(
                    int(MsgType.PULL),
                    jmeta({"name": "node/_N/feat"}, [["int64", [1 << 37]]]),
                    [1 << 40],
                ),
                close_ok=True,
            ),
        )
    )
    add(
        Case(
            "buffers",
            "over request limit",
            post_auth(
                frame(
                    int(MsgType.PULL),
                    jmeta({"name": "node/_N/feat"}, [["int64", [9 << 20]]]),
                    [72 << 20],
                ),
                close_ok=True,
            ),
        )
    )

    # pickles
    add(Case("pickle", "raw pickle stream", pre_auth(evil)))
    add(Case("pickle", "pickle after login", post_auth(evil, close_ok=True)))
    add(Case("pickle", "pickle as object buffer", post_auth(frame(
        int(MsgType.PUSH), jmeta({"name": "node/_N/feat"}, [["int64", [1]], ["object", [1]]]),
        [8, len(evil)], b"\0" * 8 + evil), close_ok=True)))  # fmt: skip
    add(Case("pickle", "pickle as uint8 values", request(
        MsgType.PUSH, {"name": "node/_N/feat"},
        [np.array([0]), np.frombuffer(evil, np.uint8)[None, :]])))  # fmt: skip
    for enc, p in (("protocol 0", evil0.decode("latin-1")),
                   ("base64", base64.b64encode(evil).decode())):  # fmt: skip
        add(Case("pickle", f"{enc} pickle as token", pre_auth(
            encode_bytes(MsgType.HELLO, 1, {"token": p}))))  # fmt: skip
        add(
            Case(
                "pickle",
                f"{enc} pickle as name",
                request(MsgType.INIT_TENSOR, {"name": p, "dtype": "int8", "shape": [NODES]}),
            )
        )
        add(
            Case(
                "pickle",
                f"{enc} pickle as dtype",
                request(MsgType.INIT_TENSOR, {"name": "node/_N/p", "dtype": p, "shape": [NODES]}),
            )
        )
        add(Case("pickle", f"{enc} pickle as init", request(
            MsgType.INIT_TENSOR, {"name": "node/_N/p", "dtype": "int8", "shape": [NODES],
                                  "init": {"kind": p}})))  # fmt: skip
        add(
            Case(
                "pickle",
                f"{enc} pickle as prob",
                request(MsgType.SAMPLE_NEIGHBORS, {"fanout": 3, "prob": p}, [np.arange(10)]),
            )
        )
        add(Case("pickle", f"{enc} pickle as opt", request(
            MsgType.SPARSE_UPDATE, {"name": "node/_N/feat", "opt": p},
            [np.array([0]), np.zeros((1, 64), np.float32)])))  # fmt: skip
    add(
        Case(
            "pickle",
            "pickle as tensor data init",
            request(
                MsgType.INIT_TENSOR,
                {
                    "name": "node/_N/pk",
                    "dtype": "uint8",
                    "shape": [NODES, len(evil)],
                    "init": {"kind": "pickle"},
                },
            ),
        )
    )

    # names
    names = [
        "",
        "feat",
        "node/_N/../../etc/passwd",
        "../../x",
        "node/_N/a\x00b",
        "node/_N/\ud800",
        "node/" + "n" * 300 + "/x",
        "node/_N/" + "x" * 130,
        "graph/_/indptr",
        "node/_N/feat/x",
        5,
        None,
        ["node/_N/feat"],
    ]
    for nm in names:
        add(Case("names", f"PULL {str(nm)[:24]!r}", request(MsgType.PULL, {"name": nm},
                                                             [np.array([0])])))  # fmt: skip
        add(Case("names", f"INIT {str(nm)[:24]!r}", request(
            MsgType.INIT_TENSOR, {"name": nm, "dtype": "int8", "shape": [NODES]})))  # fmt: skip
    for nm in ("graph/_/indptr", "node/_N/feat", "node/_N/missing"):
        add(Case("names", f"DELETE {nm}", request(MsgType.DELETE_TENSOR, {"name": nm})))
        add(
            Case(
                "names",
                f"DELETE {nm} force",
                request(MsgType.DELETE_TENSOR, {"name": nm, "force": True}),
            )
        )
        add(Case("names", f"DETACH {nm}", request(MsgType.DETACH_TENSOR, {"name": nm})))

    # request contents
    feat = {"name": "node/_N/feat"}
    bad_rows = [("float rows", np.array([0.5])), ("2-D rows", np.zeros((2, 2), np.int64)),
                ("negative", np.array([-1])), ("out of range", np.array([NODES])),
                ("int64 max", np.array([2**63 - 1])), ("too many", np.zeros(100_001, np.int64)),
                ("bool rows", np.array([True]))]  # fmt: skip
    for name, rows in bad_rows:
        add(Case("requests", f"PULL {name}", request(MsgType.PULL, feat, [rows])))
    add(
        Case(
            "requests",
            "PULL over reply limit",
            request(MsgType.PULL, feat, [np.zeros(70_000, np.int64)]),
        )
    )
    add(Case("requests", "PULL no buffers", request(MsgType.PULL, feat)))
    row0 = np.array([0])
    for name, v in [("1e300 -> float32", np.full((1, 64), 1e300)),
                    ("wrong shape", np.zeros((1, 3), np.float32)),
                    ("missing values", None)]:  # fmt: skip
        add(
            Case(
                "requests",
                f"PUSH {name}",
                request(MsgType.PUSH, feat, [row0] if v is None else [row0, v]),
            )
        )
    add(
        Case(
            "requests",
            "PUSH op eval",
            request(MsgType.PUSH, {**feat, "op": "eval"}, [row0, np.zeros((1, 64), np.float32)]),
        )
    )
    for name, meta in [
        ("shape 10^30", {"shape": [10**30, 0]}), ("shape [true]", {"shape": [True]}),
        ("shape []", {"shape": []}), ("dtype object", {"dtype": "object"}),
        ("dtype complex", {"dtype": "complex64"}), ("init eval", {"init": {"kind": "eval"}}),
        ("init not object", {"init": "zeros"}), ("constant 1e300", {"init": {"kind": "constant",
                                                                       "value": 1e300}}),
        ("seed 2^70", {"seed": 2**70}), ("seed str", {"seed": "x"}), ("seed -1", {"seed": -1}),
        ("persistent str", {"persistent": "yes"}), ("bigger than quota", {"shape": [NODES, 10**5]}),
        ("bigger than shm", {"shape": [NODES, 10**9]}),
        ("data wrong shape", {"init": {"kind": "data"}}),
    ]:  # fmt: skip
        base = {"name": "node/_N/hostile", "dtype": "float32", "shape": [NODES]}
        add(Case("requests", f"INIT {name}", request(MsgType.INIT_TENSOR, {**base, **meta})))
    add(
        Case(
            "requests",
            "INIT NaN into int32 data",
            request(
                MsgType.INIT_TENSOR,
                {
                    "name": "node/_N/nan",
                    "dtype": "int32",
                    "shape": [NODES],
                    "init": {"kind": "data"},
                },
                [np.full(NODES, np.nan)],
            ),
        )
    )
    seeds = [np.arange(1000)]
    for name, meta, b in [
        ("fanout 10^9 replace", {"fanout": 10**9, "replace": True}, seeds),
        ("fanout 10^30", {"fanout": 10**30}, seeds), ("fanout -5", {"fanout": -5}, seeds),
        ("fanout true", {"fanout": True}, seeds), ("fanout str", {"fanout": "10"}, seeds),
        ("fanout etype", {"fanout": {"x:y:z": 3}}, seeds), ("fanout {}", {"fanout": {}}, seeds),
        ("seeds x fanout", {"fanout": 2000, "replace": True}, seeds),
        ("too many seeds", {"fanout": 1}, [np.zeros(100_001, np.int64)]),
        ("seed str", {"fanout": 5, "seed": "x"}, seeds), ("seed 2^70", {"fanout": 5,
                                                                       "seed": 2**70}, seeds),
        ("prob traversal", {"fanout": 5, "prob": "../../feat"}, seeds),
        ("prob int", {"fanout": 5, "prob": 3}, seeds), ("replace str", {"fanout": 5,
                                                                       "replace": "y"}, seeds),
        ("seeds out of range", {"fanout": 5}, [np.array([NODES])]),
        ("runs str", {"fanout": 5, "runs": "yes"}, seeds), ("runs 1", {"fanout": 5, "runs": 1},
                                                           seeds),
    ]:  # fmt: skip
        add(Case("requests", f"SAMPLE {name}", request(MsgType.SAMPLE_NEIGHBORS, meta, b)))
    for name, meta, b in [
        ("FIND_EDGES out of range", {}, [np.array([10**12])]),
        ("DEGREES dir in, out of range", {"dir": "in"}, [np.array([-1])]),
        ("DEGREES too many", {"dir": "out"}, [np.zeros(100_001, np.int64)]),
        ("DEGREES float", {"dir": "out"}, [np.array([1.5])]),
        ("LIST after int", {"after": 5}, []),
        ("SPARSE_UPDATE no state", {"name": "node/_N/feat", "opt": "adagrad"},
         [row0, np.zeros((1, 64), np.float32)]),
        ("SPARSE_UPDATE opt eval", {"name": "node/_N/feat", "opt": "eval"},
         [row0, np.zeros((1, 64), np.float32)]),
        ("SPARSE_UPDATE state graph", {"name": "node/_N/feat", "opt": "adagrad",
                                       "state": {"sum": "graph/_/indptr"}},
         [row0, np.zeros((1, 64), np.float32)]),
        ("SPARSE_UPDATE 1e300 grads", {"name": "node/_N/feat", "opt": "adagrad",
                                       "state": {"sum": "node/_N/feat"}},
         [row0, np.full((1, 64), 1e300)]),
        ("ATTACH unknown", {"name": "node/_N/none"}, []),
        ("HELLO again", {"token": "x"}, []),
    ]:  # fmt: skip
        mt = {"FIND": MsgType.FIND_EDGES, "DEGR": MsgType.DEGREES, "LIST": MsgType.LIST_TENSORS,
              "SPAR": MsgType.SPARSE_UPDATE, "ATTA": MsgType.ATTACH_TENSOR,
              "HELL": MsgType.HELLO}[name[:4]]  # fmt: skip
        add(Case("requests", name, request(mt, meta, b)))

    # volume and connections
    add(Case("volume", "create flood past the count cap", create_flood))
    add(Case("volume", "other session deletes my tensor", third_party_delete))
    add(Case("volume", "connection flood (300, held 3 s)", connection_flood))
    add(Case("volume", "20 clients that never read", non_readers))
    add(Case("volume", "slowloris x20 before login", slowloris))
    add(Case("volume", "idle authenticated x20", idle_clients))
    add(Case("volume", "health port: 100 half-sent + garbage", health_flood))
    return out


def create_flood(t: Target) -> None:
    with t.authed("flood") as s:
        refused = 0
        for i in range(80):
            s.sendall(encode_bytes(MsgType.INIT_TENSOR, 10 + i, {
                "name": f"node/_N/flood{i}", "dtype": "int8", "shape": [NODES]}))  # fmt: skip
            f = recv_frame(s, "srv", deadline=time.monotonic() + 10)
            if f.type == MsgType.ERROR:
                if f.meta.get("code") not in CLEAN_CODES:
                    raise Crashed(str(f.meta))
                refused += 1
        for i in range(80):  # clean up: the creator may delete
            s.sendall(encode_bytes(MsgType.DELETE_TENSOR, 200 + i,
                                   {"name": f"node/_N/flood{i}", "force": True}))  # fmt: skip
            recv_frame(s, "srv", deadline=time.monotonic() + 10)
    if refused == 0:
        raise Served("no create was refused")
    raise Refused()


def third_party_delete(t: Target) -> None:
    with t.authed("owner") as a, t.authed("intruder") as c:
        a.sendall(encode_bytes(MsgType.INIT_TENSOR, 1, {"name": "node/_N/mine", "dtype": "int8",
                                                        "shape": [NODES]}))  # fmt: skip
        recv_frame(a, "srv", deadline=time.monotonic() + 10)
        c.sendall(encode_bytes(MsgType.DELETE_TENSOR, 2, {"name": "node/_N/mine", "force": True}))
        try:
            expect_refusal(c)
        finally:
            a.sendall(encode_bytes(MsgType.DELETE_TENSOR, 3, {"name": "node/_N/mine"}))
            recv_frame(a, "srv", deadline=time.monotonic() + 10)


def _ping(s: socket.socket) -> bool:
    try:
        s.sendall(encode_bytes(MsgType.PING, 9, {}))
        return recv_frame(s, "srv", deadline=time.monotonic() + 5).type == MsgType.PING
    except Exception:
        return False


def connection_flood(t: Target) -> None:
    socks, busy = [], 0
    trainer = t.authed()  # a client connected before the flood keeps being served
    try:
        for _ in range(300):
            try:
                socks.append(socket.create_connection(t.addr, timeout=5))
            except OSError:
                busy += 1
        time.sleep(1.0)
        for s in socks:
            s.setblocking(False)
            try:
                if s.recv(1 << 16):
                    busy += 1  # the ERROR "busy" frame
            except (BlockingIOError, OSError):
                pass
        time.sleep(2.0)
        if not _ping(trainer):
            raise TimeoutError("the server stopped answering during the flood")
    finally:
        for s in socks:
            s.close()
        trainer.close()
    deadline = time.monotonic() + 10  # the flood's slots are freed once it is gone
    while not t.ping_ok():
        if time.monotonic() > deadline:
            raise TimeoutError("new connections were refused after the flood")
        time.sleep(0.2)
    if busy == 0:
        raise Served("no connection was refused")
    raise Refused()


def non_readers(t: Target) -> None:
    socks = []
    try:
        for _ in range(20):
            s = t.authed()
            s.sendall(
                encode_bytes(MsgType.PULL, 3, {"name": "node/_N/feat"}, [np.arange(60_000) % NODES])
            )  # 15 MB each, never read
            socks.append(s)
        if not t.ping_ok():
            raise TimeoutError("the server stopped answering")
        time.sleep(4.0)  # send timeout 2 s: every blocked answer is dropped
        dropped = 0
        for s in socks:
            s.settimeout(5)
            try:
                while s.recv(1 << 20):
                    pass
                dropped += 1
            except OSError:
                dropped += 1
        if dropped != len(socks):
            raise TimeoutError("blocked answers were kept")
    finally:
        for s in socks:
            s.close()
    raise Refused()


def slowloris(t: Target) -> None:
    socks = [t.raw() for _ in range(20)]
    head = encode_bytes(MsgType.HELLO, 1, {"token": t.token})
    t0 = time.monotonic()
    try:
        closed: set[int] = set()
        i = 0
        while len(closed) < len(socks) and time.monotonic() - t0 < 16:
            for k, s in enumerate(socks):
                if k in closed:
                    continue
                try:
                    s.send(head[i : i + 1])
                except OSError:
                    closed.add(k)
            i = min(i + 1, 10)  # never complete the header
            time.sleep(0.5)
        if len(closed) < len(socks):
            raise TimeoutError("slow clients were kept past the login timeout")
    finally:
        for s in socks:
            s.close()
    raise Refused()


def idle_clients(t: Target) -> None:
    socks = [t.authed() for _ in range(20)]
    try:
        time.sleep(5.5)  # idle timeout 4 s
        for s in socks:
            s.settimeout(3)
            if s.recv(1) != b"":
                raise Served("unexpected data on an idle connection")
    except TimeoutError:
        raise TimeoutError("idle connections were kept") from None
    finally:
        for s in socks:
            s.close()
    raise Refused()


def health_flood(t: Target) -> None:
    socks = []
    try:
        for i in range(100):
            s = socket.create_connection(("127.0.0.1", t.health), timeout=5)
            s.sendall(b"GET /readyz HTTP/1.1\r\n" if i % 2 else os.urandom(64))
            socks.append(s)
        if not t.ping_ok():
            raise TimeoutError("the data path stopped answering")
        threads = len(psutil.Process(t.proc.pid).threads())
        if threads > 8 + 8:
            raise Crashed(f"{threads} threads in the server parent")
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{t.health}/readyz", timeout=2) as r:
                if r.status == 200:
                    raise Refused()
        except OSError:
            time.sleep(0.2)
    raise TimeoutError("/readyz did not answer after the flood")


# --- the run -----------------------------------------------------------------------------
def run_case(t: Target, case: Case, timeout: float) -> str:
    pids = t.pids()
    result: list[str] = []

    def target() -> None:
        try:
            case.run(t)
            result.append("accepted")
        except Refused:
            result.append("refused")
        except Served:
            result.append("accepted")
        except Crashed:
            result.append("crashed")
        except TimeoutError:
            result.append("hung")
        except Exception as e:
            result.append(f"error: {type(e).__name__}: {e}")

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(timeout)
    outcome = result[0] if result else "hung"
    if outcome.startswith("error"):
        outcome = "hung" if "timed out" in outcome else "crashed"
    if t.marker.exists():
        return "ran code"
    time.sleep(0.05)
    log = t.new_log()
    if t.proc.poll() is not None or t.pids() != pids or "Traceback" in log:
        return "crashed"
    if '"code": "internal"' in log:
        return "crashed"
    if not t.ping_ok():
        return "hung"
    return outcome


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--case-timeout", type=float, default=25.0)
    ap.add_argument("--json", default=None, help="also write every case's outcome here")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="distgnn-hostile-") as d:
        tmp = Path(d)
        manifest = make_graph(tmp / "parts")
        t = Target(manifest, a.workers, tmp)
        rows: list[tuple[str, str, str]] = []
        t0 = time.monotonic()
        try:
            for case in cases(str(t.marker)):
                outcome = run_case(t, case, a.case_timeout)
                rows.append((case.group, case.name, outcome))
                if a.verbose or outcome not in ("refused",):
                    print(f"  {case.group:9} {case.name:42} {outcome}", flush=True)
        finally:
            rc = t.stop()
    cols = ["refused", "accepted", "crashed", "hung", "ran code"]
    groups = list(dict.fromkeys(g for g, _, _ in rows))
    print(f"\nhostile frames against one server ({a.workers} workers), "
          f"{time.monotonic() - t0:.0f} s; server exit code after SIGTERM: {rc}\n")  # fmt: skip
    print(f"| {'group':10} | tried | refused cleanly | accepted | crashed | hung | ran code |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    total: Counter[str] = Counter()
    for g in groups:
        c = Counter(o for gg, _, o in rows if gg == g)
        total.update(c)
        print(f"| {g:10} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in cols) + " |")
    print(f"| {'total':10} | {sum(total.values())} | "
          + " | ".join(str(total[k]) for k in cols) + " |")  # fmt: skip
    if a.json:
        Path(a.json).write_text(
            json.dumps(
                [dict(zip(("group", "case", "outcome"), r, strict=True)) for r in rows], indent=1
            )
        )
    bad = total["crashed"] + total["hung"] + total["ran code"]
    return 1 if bad or rc != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
