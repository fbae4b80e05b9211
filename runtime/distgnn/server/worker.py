"""One server worker process: accepts connections and answers requests.

Workers share the parent's listening socket (inherited file descriptor) and all
call ``accept()`` on it; the kernel hands each new connection to one of them.
This pre-fork model was chosen over ``SO_REUSEPORT`` (each worker binding its own
socket) because the port is bound once by the parent (``--port 0`` works, and a
worker restart never drops connections queued in a closed listener's backlog), and
over the parent passing accepted sockets because no extra hop or fd-passing
protocol is needed. Data lives in the shared :class:`~distgnn.server.store.ShmStore`.

Each connection gets a thread (NumPy and socket I/O release the GIL). The first
frame must be HELLO with the token (``hmac.compare_digest``). A malformed frame
gets an ERROR frame and closes that connection only. On SIGTERM the worker stops
accepting, lets every connection finish its in-flight request and exits 0. With a
stats file (metrics enabled) every answered request is counted there
(:class:`~distgnn.server.metrics.WorkerStats`: one lock, a few additions).
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

from distgnn import log as dlog
from distgnn.errors import DistGNNError, ProtocolError, RequestTimeout, ServerUnavailable
from distgnn.log import kv
from distgnn.rpc.protocol import (
    FLAG_RESPONSE,
    Limits,
    MsgType,
    encode,
    error_meta,
    recv_frame,
    send_frame,
)
from distgnn.server.handlers import Handlers
from distgnn.server.metrics import CLIENT_ERROR, OK, SERVER_ERROR, WorkerStats
from distgnn.server.state import GraphState
from distgnn.server.store import ShmStore

log = logging.getLogger("distgnn.server.worker")

POLL_S = 0.2
SNDBUF = 4 << 20
"""Send buffer of a connection (capped by net.core.wmem_max): a whole gather block fits."""
HELLO_LIMITS = Limits(max_meta=64 << 10, max_bufs=0, max_buf_bytes=0, max_total_bytes=0)
"""An unauthenticated peer can make the server allocate nothing beyond a small HELLO."""


@dataclass(frozen=True)
class WorkerConfig:
    shm_dir: str
    listen_fd: int
    ready_fd: int
    token: str
    insecure: bool = False
    auth_timeout: float = 10.0
    frame_timeout: float = 60.0
    drain_timeout: float = 30.0
    limits: Limits = field(default_factory=Limits)
    stats_file: str | None = None


class Worker:
    """Accept loop + per-connection threads over a shared listening socket."""

    def __init__(self, cfg: WorkerConfig) -> None:
        self.cfg = cfg
        self.store = ShmStore(cfg.shm_dir)
        self.graph = GraphState.attach(self.store)
        self.handlers = Handlers(self.store, self.graph, zero_copy=True)
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
        log.info("worker ready", extra=kv(part=self.graph.part_id, pid=os.getpid()))
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
                t = threading.Thread(
                    target=self._serve, args=(conn, f"{addr[0]}:{addr[1]}"), daemon=True
                )
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

    def _wait_readable(self, conn: socket.socket) -> bool:
        """Wait for the next frame; False once the worker is stopping and nothing is pending."""
        poller = select.poll()
        poller.register(conn, select.POLLIN | select.POLLERR | select.POLLHUP)
        while True:
            if poller.poll(POLL_S * 1000):
                return True  # serve what was sent before a stop, too
            if self.stop.is_set():
                return False

    def _reply(
        self, conn: socket.socket, mtype: MsgType, req_id: int, meta: dict, bufs: list
    ) -> None:
        conn.settimeout(self.cfg.frame_timeout)
        send_frame(conn, encode(mtype, req_id, meta, bufs, flags=FLAG_RESPONSE))

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
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        authed = False
        stats = self.stats
        if stats is not None:
            stats.connection(1)
        try:
            while True:
                if authed and not self._wait_readable(conn):
                    return
                timeout = self.cfg.frame_timeout if authed else self.cfg.auth_timeout
                limits = self.cfg.limits if authed else HELLO_LIMITS
                try:
                    frame = recv_frame(conn, peer, limits, time.monotonic() + timeout)
                except ProtocolError as e:
                    if stats is not None:
                        stats.protocol_error()
                    log.warning("bad frame; closing", extra=kv(peer=peer, error=str(e)))
                    self._error(conn, 0, "protocol", str(e), close=True)
                    return
                except (ServerUnavailable, RequestTimeout):
                    return
                if not authed:
                    if frame.type != MsgType.HELLO:
                        self._error(
                            conn, frame.req_id, "auth", "first frame must be HELLO", close=True
                        )
                        return
                    tok = frame.meta.get("token")
                    if not self.cfg.insecure and not (
                        isinstance(tok, str)
                        and hmac.compare_digest(tok.encode(), self.cfg.token.encode())
                    ):
                        log.warning("token refused", extra=kv(peer=peer))
                        if stats is not None:
                            stats.refused(MsgType.HELLO)
                        self._error(
                            conn, frame.req_id, "auth", "wrong or missing token", close=True
                        )
                        return
                    authed = True
                    g = self.graph
                    info = {
                        "part_id": g.part_id,
                        "num_parts": g.manifest.num_parts,
                        "graph_name": g.manifest.graph_name,
                        "pid": os.getpid(),
                    }
                    self._reply(conn, MsgType.HELLO, frame.req_id, info, [])
                    continue
                t0 = time.perf_counter()
                try:
                    meta, bufs = self.handlers.handle(frame.type, frame.meta, frame.bufs)
                except DistGNNError as e:
                    self._error(conn, frame.req_id, "bad_request", str(e))
                    if stats is not None:
                        stats.observe(frame, (), CLIENT_ERROR, t0)
                    continue
                except Exception as e:
                    log.exception("request failed", extra=kv(peer=peer, type=frame.type.name))
                    self._error(conn, frame.req_id, "internal", f"{type(e).__name__}: {e}")
                    if stats is not None:
                        stats.observe(frame, (), SERVER_ERROR, t0)
                    continue
                self._reply(conn, frame.type, frame.req_id, meta, bufs)
                if stats is not None:
                    stats.observe(frame, bufs, OK, t0)
        except OSError as e:
            log.debug("connection ended", extra=kv(peer=peer, error=str(e)))
        finally:
            conn.close()
            if stats is not None:
                stats.connection(-1)
            with self.lock:
                self.threads.discard(threading.current_thread())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="distgnn-server-worker")
    p.add_argument("--shm-dir", required=True)
    p.add_argument("--listen-fd", type=int, required=True)
    p.add_argument("--ready-fd", type=int, required=True)
    p.add_argument("--insecure-no-token", action="store_true")
    p.add_argument("--drain-timeout", type=float, default=30.0)
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
