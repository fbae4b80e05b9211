"""One server worker process: accepts connections and answers requests.

Workers share the parent's listening socket (inherited file descriptor) and all
call ``accept()`` on it; the kernel hands each new connection to one of them.
This pre-fork model was chosen over ``SO_REUSEPORT`` (each worker binding its own
socket) because the port is bound once by the parent (``--port 0`` works, and a
worker restart never drops connections queued in a closed listener's backlog), and
over the parent passing accepted sockets because no extra hop or fd-passing
protocol is needed. Data lives in the shared :class:`~distgnn.server.store.ShmStore`.

Each connection gets a thread (NumPy and socket I/O release the GIL), up to
``max_connections`` per worker (beyond: an ERROR ``busy`` frame and close). The first
frame must be HELLO with the token (``hmac.compare_digest``) within ``auth_timeout``;
it may name the client's ``session`` (tensor ownership). A malformed frame gets an
ERROR frame and closes that connection only; a bad request gets an ERROR answer and the
connection stays. Connections use TCP keepalive; an authenticated connection idle for
``idle_timeout`` is closed; an answer that makes no progress for ``send_timeout`` (a
client that does not read) is dropped with its connection. On SIGTERM the worker stops
accepting, lets every connection finish its in-flight request and exits 0. With a
stats file (metrics enabled) every answered request is counted there
(:class:`~distgnn.server.metrics.WorkerStats`: one lock, a few additions).
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import itertools
import logging
import os
import re
import select
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from distgnn import log as dlog
from distgnn.errors import DistGNNError, ProtocolError, RequestTimeout, ServerUnavailable
from distgnn.log import kv
from distgnn.rpc.protocol import (
    FLAG_RESPONSE,
    Frame,
    Limits,
    MsgType,
    encode,
    error_meta,
    recv_frame,
    send_frame,
)
from distgnn.server.handlers import Handlers, Reply, Request
from distgnn.server.limits import ServerLimits
from distgnn.server.metrics import CLIENT_ERROR, OK, SERVER_ERROR, WorkerStats
from distgnn.server.state import GraphState
from distgnn.server.store import Quota, ShmStore

log = logging.getLogger("distgnn.server.worker")

POLL_S = 0.2
SNDBUF = 4 << 20
"""Send buffer of a connection (capped by net.core.wmem_max): a whole gather block fits."""
HELLO_LIMITS = Limits(max_meta=64 << 10, max_bufs=0, max_buf_bytes=0, max_total_bytes=0)
"""An unauthenticated peer can make the server allocate nothing beyond a small HELLO."""
ADVERTISED_LIMITS = ("max_ids", "max_reply_bytes", "max_request_bytes", "max_sample_edges")
"""Limits sent in the HELLO answer (``Connection.server_info["limits"]``)."""
MIN_SEND_RATE = 1 << 20
"""Bytes per second below which an answer is abandoned (after ``send_timeout`` of grace)."""
SESSION_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
KEEPALIVE = {"TCP_KEEPIDLE": 60, "TCP_KEEPINTVL": 10, "TCP_KEEPCNT": 6}
"""A peer that vanished (no FIN, no RST) is detected after about two minutes."""


def set_keepalive(sock: socket.socket) -> None:
    """TCP keepalive with the probes of :data:`KEEPALIVE` (where the platform has them)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in KEEPALIVE.items():
        opt = getattr(socket, name, None)
        if opt is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, opt, value)


def _token_ok(given: object, token: str) -> bool:
    """Constant-time comparison; any string (lone surrogates included) is comparable."""
    if not isinstance(given, str):
        return False
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass")
    )


@dataclass(frozen=True)
class WorkerConfig:
    shm_dir: str
    listen_fd: int
    ready_fd: int
    token: str
    insecure: bool = False
    drain_timeout: float = 30.0
    limits: ServerLimits = field(default_factory=ServerLimits)
    stats_file: str | None = None

    @property
    def frame_limits(self) -> Limits:
        """Codec limits of an authenticated connection's requests."""
        n = self.limits.max_request_bytes
        return Limits(max_buf_bytes=n, max_total_bytes=n)


class Worker:
    """Accept loop + per-connection threads over a shared listening socket."""

    def __init__(self, cfg: WorkerConfig) -> None:
        self.cfg = cfg
        lim = cfg.limits
        self.store = ShmStore(cfg.shm_dir, quota=Quota(lim.max_tensors, lim.max_tensor_bytes))
        self.graph = GraphState.attach(self.store)
        self.handlers = Handlers(self.store, self.graph, zero_copy=True, limits=lim)
        self.sessions = itertools.count(1)
        self.refused, self.refused_logged = 0, -1e9
        self.stop = threading.Event()
        self.threads: set[threading.Thread] = set()
        self.lock = threading.Lock()
        self.parent = os.getppid()
        self.stats = WorkerStats(cfg.stats_file) if cfg.stats_file else None

    def run(self) -> int:
        listener = socket.socket(fileno=self.cfg.listen_fd)
        listener.settimeout(POLL_S)
        os.write(self.cfg.ready_fd, b"R")
        os.close(self.cfg.ready_fd)
        log.info("worker ready", extra=kv(partition=self.graph.part_id, pid=os.getpid()))
        try:
            while not self.stop.is_set():
                if os.getppid() != self.parent:
                    log.warning("server parent is gone; worker exits")
                    break
                try:
                    conn, addr = listener.accept()
                except TimeoutError:
                    continue
                except OSError as e:
                    if self.stop.is_set():
                        break
                    log.warning("accept failed", extra=kv(error=str(e)))
                    time.sleep(POLL_S)
                    continue
                peer = f"{addr[0]}:{addr[1]}"
                with self.lock:
                    busy = len(self.threads) >= self.cfg.limits.max_connections
                if busy:
                    self._refuse(conn, peer)
                    continue
                t = threading.Thread(target=self._serve, args=(conn, peer), daemon=True)
                with self.lock:
                    self.threads.add(t)
                t.start()
        finally:
            listener.close()
        self._drain()
        self.store.close()
        if self.stats is not None:
            self.stats.close()
        return 0

    def _drain(self) -> None:
        deadline = time.monotonic() + self.cfg.drain_timeout
        with self.lock:
            threads = list(self.threads)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        log.info("worker drained", extra=kv(pid=os.getpid(), connections=len(threads)))

    def _refuse(self, conn: socket.socket, peer: str) -> None:
        """Over the connection cap: a short ERROR ``busy`` frame, then close (logged at
        most every 10 s, with the count, so a flood does not flood the log)."""
        self.refused += 1
        now = time.monotonic()
        if now - self.refused_logged >= 10.0:
            log.warning(
                "connections refused: too many connections",
                extra=kv(peer=peer, refused=self.refused),
            )
            self.refused, self.refused_logged = 0, now
        with contextlib.suppress(OSError):
            conn.settimeout(0.5)
            msg = (
                f"too many connections to this worker (limit "
                f"{self.cfg.limits.max_connections}, DISTGNN_SERVER_MAX_CONNECTIONS)"
            )
            send_frame(conn, encode(MsgType.ERROR, 0, error_meta("busy", msg), flags=FLAG_RESPONSE))
        conn.close()

    def _wait_readable(self, conn: socket.socket, peer: str) -> bool:
        """Wait for the next frame; False once the worker is stopping and nothing is pending,
        or after ``idle_timeout`` without a request."""
        poller = select.poll()
        poller.register(conn, select.POLLIN | select.POLLERR | select.POLLHUP)
        idle_until = time.monotonic() + self.cfg.limits.idle_timeout
        while True:
            if poller.poll(POLL_S * 1000):
                return True  # serve what was sent before a stop, too
            if self.stop.is_set():
                return False
            if time.monotonic() > idle_until:
                log.info("idle connection closed", extra=kv(peer=peer))
                return False

    def _reply(
        self, conn: socket.socket, mtype: MsgType, req_id: int, meta: dict, bufs: list
    ) -> None:
        # each blocking send may wait send_timeout (a client that stops reading is dropped),
        # and the whole answer must go out at MIN_SEND_RATE or better (a slow reader too)
        lim = self.cfg.limits
        chunks = encode(mtype, req_id, meta, bufs, flags=FLAG_RESPONSE)
        conn.settimeout(lim.send_timeout)
        size = sum(b.nbytes for b in bufs)
        send_frame(conn, chunks, time.monotonic() + lim.send_timeout + size / MIN_SEND_RATE)

    def handle(self, req: Request) -> Reply:
        """Answer one authenticated request (one place to hook per-request metrics)."""
        return self.handlers.dispatch(req)

    def _error(
        self, conn: socket.socket, req_id: int, code: str, msg: str, close: bool = False
    ) -> None:
        with contextlib.suppress(OSError):
            self._reply(conn, MsgType.ERROR, req_id, error_meta(code, msg), [])
            if close:  # lingering close: unread input would turn our FIN into a RST
                conn.shutdown(socket.SHUT_WR)
                conn.settimeout(1.0)
                for _ in range(64):
                    if not conn.recv(1 << 16):
                        break

    def _serve(self, conn: socket.socket, peer: str) -> None:
        stats = self.stats
        if stats is not None:
            stats.connection(1)
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
            set_keepalive(conn)
            session = self._login(conn, peer)
            while session is not None:
                if not self._wait_readable(conn, peer):
                    return
                try:
                    frame = recv_frame(
                        conn,
                        peer,
                        self.cfg.frame_limits,
                        time.monotonic() + self.cfg.limits.frame_timeout,
                    )
                except ProtocolError as e:
                    self._bad_frame(conn, peer, e)
                    return
                except (ServerUnavailable, RequestTimeout):
                    return
                self._answer(conn, peer, frame, session)
        except OSError as e:
            log.debug("connection ended", extra=kv(peer=peer, error=str(e)))
        except Exception as e:  # a bug: one line, an ERROR frame, never a dead worker
            log.error("connection failed", extra=kv(peer=peer, error=f"{type(e).__name__}: {e}"))
            self._error(conn, 0, "internal", f"{type(e).__name__}", close=True)
        finally:
            conn.close()
            if stats is not None:
                stats.connection(-1)
            with self.lock:
                self.threads.discard(threading.current_thread())

    def _login(self, conn: socket.socket, peer: str) -> str | None:
        """Read HELLO within ``auth_timeout``; the session name, or None (connection refused)."""
        deadline = time.monotonic() + self.cfg.limits.auth_timeout
        try:
            frame = recv_frame(conn, peer, HELLO_LIMITS, deadline)
        except ProtocolError as e:
            self._bad_frame(conn, peer, e)
            return None
        except (ServerUnavailable, RequestTimeout):
            return None
        if frame.type != MsgType.HELLO:
            self._error(conn, frame.req_id, "auth", "first frame must be HELLO", close=True)
            return None
        if not self.cfg.insecure and not _token_ok(frame.meta.get("token"), self.cfg.token):
            log.warning("token refused", extra=kv(peer=peer))
            if self.stats is not None:
                self.stats.refused(MsgType.HELLO)
            self._error(conn, frame.req_id, "auth", "wrong or missing token", close=True)
            return None
        session = frame.meta.get("session")
        if not isinstance(session, str) or not SESSION_RE.match(session):
            session = f"conn-{os.getpid()}-{next(self.sessions)}"
        g = self.graph
        info = {
            "part_id": g.part_id,
            "num_parts": g.manifest.num_parts,
            "graph_name": g.manifest.graph_name,
            "pid": os.getpid(),
            "session": session,
            # the store folder's name: lets a co-located trainer check it maps this server
            "store": os.path.basename(os.path.normpath(self.store.root)),
            # so clients can split big requests instead of being refused
            "limits": {k: getattr(self.cfg.limits, k) for k in ADVERTISED_LIMITS},
        }
        self._reply(conn, MsgType.HELLO, frame.req_id, info, [])
        return session

    def _bad_frame(self, conn: socket.socket, peer: str, e: ProtocolError) -> None:
        if self.stats is not None:
            self.stats.protocol_error()
        log.warning("bad frame; closing", extra=kv(peer=peer, error=str(e)[:200]))
        self._error(conn, 0, "protocol", str(e), close=True)

    def _answer(self, conn: socket.socket, peer: str, frame: Frame, session: str) -> None:
        if frame.type == MsgType.HELLO:
            self._error(conn, frame.req_id, "bad_request", "already authenticated")
            return
        stats = self.stats
        t0 = time.perf_counter()
        outcome = SERVER_ERROR
        meta: dict[str, Any] = {}
        bufs: list[Any] = []
        try:
            meta, bufs = self.handle(Request(frame.type, frame.meta, frame.bufs, session))
            outcome = OK
        except DistGNNError as e:
            outcome = CLIENT_ERROR
            self._error(conn, frame.req_id, "bad_request", str(e))
        except MemoryError:
            log.warning("request ran out of memory", extra=kv(peer=peer, type=frame.type.name))
            msg = f"{frame.type.name}: out of memory on the server"
            self._error(conn, frame.req_id, "resource", msg)
        except Exception as e:
            log.exception("request failed", extra=kv(peer=peer, type=frame.type.name))
            self._error(conn, frame.req_id, "internal", f"{type(e).__name__}: {e}")
        if outcome == OK:
            self._reply(conn, frame.type, frame.req_id, meta, bufs)
        if stats is not None:
            stats.observe(frame, bufs, outcome, t0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="distgnn-server-worker")
    p.add_argument("--shm-dir", required=True)
    p.add_argument("--listen-fd", type=int, required=True)
    p.add_argument("--ready-fd", type=int, required=True)
    p.add_argument("--insecure-no-token", action="store_true")
    p.add_argument("--drain-timeout", type=float, default=30.0)
    p.add_argument("--limits", default=None, help="ServerLimits as JSON (from the parent)")
    p.add_argument("--stats-file", default=None)
    a = p.parse_args(argv)
    dlog.setup()
    token = os.environ.pop("DISTGNN_WORKER_TOKEN", "")
    cfg = WorkerConfig(
        shm_dir=a.shm_dir,
        listen_fd=a.listen_fd,
        ready_fd=a.ready_fd,
        token=token,
        insecure=a.insecure_no_token,
        drain_timeout=a.drain_timeout,
        limits=ServerLimits.from_json(a.limits) if a.limits else ServerLimits(),
        stats_file=a.stats_file,
    )
    worker = Worker(cfg)

    def on_signal(signum: int, frame: object) -> None:
        worker.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
