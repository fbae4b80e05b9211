"""Client connections to graph servers.

:class:`Connection` is one authenticated TCP connection with a per-request deadline
and connect retries while the server starts (or while it answers ``busy``).
:class:`ServerPool` holds one connection per partition and keeps requests to several
servers in flight at once (send all, then receive all). A connection whose request
failed half-way is closed and re-opened on its next use, so a client never reads a
stale answer; one the server closed while idle is noticed before the next request.

A server worker that dies is replaced by its parent: a read-only request (PULL,
SAMPLE_NEIGHBORS, DEGREES, FIND_EDGES, GET_META, PING, LIST_TENSORS) that lost its
connection is sent again on a fresh one until the request timeout; a write is never
resent and raises :class:`~distgnn.errors.WriteFailed` saying whether it was applied.
Every connection of a pool sends the pool's ``session`` in HELLO: the servers record
it as the creator or holder of named tensors.
"""

from __future__ import annotations

import itertools
import logging
import os
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distgnn import contract
from distgnn.errors import (
    AuthError,
    ConfigError,
    DistGNNError,
    ProtocolError,
    RequestTimeout,
    ServerError,
    ServerUnavailable,
    WriteFailed,
)
from distgnn.log import kv
from distgnn.rpc.protocol import (
    FLAG_RESPONSE,
    Frame,
    Into,
    Limits,
    MsgType,
    encode,
    recv_frame,
    send_frame,
)
from distgnn.rpc.stats import ClientStats

log = logging.getLogger("distgnn.rpc")

IDEMPOTENT = frozenset(
    {
        MsgType.PULL,
        MsgType.SAMPLE_NEIGHBORS,
        MsgType.DEGREES,
        MsgType.FIND_EDGES,
        MsgType.GET_META,
        MsgType.PING,
        MsgType.LIST_TENSORS,
    }
)
"""Requests that change nothing on the server: sent again after a lost connection."""
RETRIES = 3
"""Fresh connections tried for one idempotent request (all within its timeout)."""


def new_session() -> str:
    """A random session name (what a server records as a tensor's creator or holder)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Timeouts:
    """Client timeouts in seconds (``DISTGNN_REQUEST_TIMEOUT``, ``DISTGNN_CONNECT_TIMEOUT``)."""

    request: float = 60.0
    connect: float = 120.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Timeouts:
        e = os.environ if env is None else env
        try:
            return cls(
                request=float(e.get(contract.ENV_REQUEST_TIMEOUT, "60")),
                connect=float(e.get(contract.ENV_CONNECT_TIMEOUT, "120")),
            )
        except ValueError as err:
            raise ConfigError(
                f"{contract.ENV_REQUEST_TIMEOUT}/{contract.ENV_CONNECT_TIMEOUT}: {err}"
            ) from err


class Connection:
    """One authenticated connection to a graph server."""

    def __init__(
        self,
        host: str,
        port: int,
        token: str | None,
        timeouts: Timeouts | None = None,
        limits: Limits | None = None,
        session: str | None = None,
    ) -> None:
        self.host, self.port, self.token = host, port, token
        self.timeouts = timeouts or Timeouts()
        self.limits = limits or Limits()
        self.session = session or new_session()
        self.peer = f"{host}:{port}"
        self.sock: socket.socket | None = None
        self.server_info: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._inflight = 0  # requests sent whose answer was not read yet

    def connect(self) -> None:
        """Connect (retrying refused or ``busy`` connections until the connect timeout) and
        authenticate."""
        deadline = time.monotonic() + self.timeouts.connect
        delay = 0.05
        while True:
            try:
                self._connect_once(deadline)
                return
            except (AuthError, ProtocolError, RequestTimeout):
                raise  # OSError subclasses that a retry cannot fix
            except ServerError as e:
                if e.code != "busy" or time.monotonic() + delay >= deadline:
                    raise
            except OSError as e:
                if time.monotonic() + delay >= deadline:
                    raise ServerUnavailable(
                        f"graph server {self.peer} unreachable for {self.timeouts.connect:.0f}s "
                        f"({e}); is it running? (timeout: {contract.ENV_CONNECT_TIMEOUT})"
                    ) from e
            time.sleep(delay)
            delay = min(1.0, delay * 2)

    def _connect_once(self, deadline: float) -> None:
        sock = socket.create_connection(
            (self.host, self.port), timeout=max(0.1, min(5.0, deadline - time.monotonic()))
        )
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        # socket buffers are left to the kernel's autotuning (fixed sizes disable it)
        self.sock = sock
        hello = {"token": self.token or "", "pid": os.getpid(), "session": self.session}
        try:
            reply = self._roundtrip(MsgType.HELLO, hello)
        except ServerError as e:
            self.close()
            if e.code == "auth":
                raise AuthError(f"graph server {self.peer} refused the token: {e}") from e
            raise
        except DistGNNError:
            self.close()
            raise
        self.server_info = reply.meta
        log.debug("connected", extra=kv(peer=self.peer, part=reply.meta.get("part_id")))

    def _drop_if_closed(self) -> None:
        """Close a connection the server ended while it was idle (EOF or an unsolicited
        frame is readable), so the next request opens a fresh one."""
        if self.sock is None:
            return
        p = select.poll()
        p.register(self.sock, select.POLLIN | select.POLLERR | select.POLLHUP)
        if p.poll(0):
            log.debug("server closed an idle connection", extra=kv(peer=self.peer))
            self.close()

    def close(self) -> None:
        self._inflight = 0
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def send(self, mtype: MsgType, meta: dict[str, Any], bufs: Sequence[np.ndarray] = ()) -> int:
        """Send one request; returns its id. Connects first if needed."""
        if not self._inflight:  # with answers pending, readable data is theirs
            self._drop_if_closed()
        if self.sock is None:
            self.connect()
        assert self.sock is not None
        req_id = next(self._ids)
        chunks = encode(mtype, req_id, meta, bufs, limits=self.limits)
        self.sock.settimeout(self.timeouts.request)
        try:
            send_frame(self.sock, chunks)
        except TimeoutError as e:
            self.close()
            raise RequestTimeout(f"{self.peer}: could not send a {mtype.name} request") from e
        except OSError as e:
            self.close()
            msg = f"graph server {self.peer} is gone ({e})"
            if mtype not in IDEMPOTENT:  # a truncated frame is never applied
                raise WriteFailed(f"{msg}; the {mtype.name} was not applied", False) from e
            raise ServerUnavailable(msg) from e
        self._inflight += 1
        return req_id

    def recv(self, req_id: int, mtype: MsgType, into: Into | None = None) -> Frame:
        """Receive the answer to ``req_id``; server errors raise :class:`ServerError`."""
        if self.sock is None:
            raise ServerUnavailable(f"graph server {self.peer}: connection was closed")
        deadline = time.monotonic() + self.timeouts.request
        self._inflight = max(0, self._inflight - 1)
        try:
            frame = recv_frame(self.sock, self.peer, self.limits, deadline, into)
        except RequestTimeout as e:
            self.close()
            raise RequestTimeout(
                f"graph server {self.peer} did not answer {mtype.name} within "
                f"{self.timeouts.request:g}s ({contract.ENV_REQUEST_TIMEOUT})"
            ) from e
        except ServerUnavailable as e:
            self.close()
            msg = f"graph server {self.peer} went away during a {mtype.name} request ({e})"
            if mtype not in IDEMPOTENT and mtype != MsgType.HELLO:
                raise WriteFailed(f"{msg}; it may or may not have been applied", None) from e
            raise ServerUnavailable(msg) from e
        except ProtocolError:
            self.close()
            raise
        if frame.type == MsgType.ERROR:
            if frame.req_id == 0:
                self.close()
            code, msg = str(frame.meta.get("code", "error")), frame.meta.get("message", "")
            raise ServerError(
                f"graph server {self.peer}: {mtype.name} failed ({code}): {msg}", code
            )
        if frame.req_id != req_id or frame.type != mtype or not frame.flags & FLAG_RESPONSE:
            self.close()
            raise ProtocolError(f"{self.peer}: answer does not match request {req_id}")
        return frame

    def _roundtrip(
        self, mtype: MsgType, meta: dict[str, Any], bufs: Sequence[np.ndarray] = ()
    ) -> Frame:
        assert self.sock is not None
        req_id = next(self._ids)
        self.sock.settimeout(self.timeouts.request)
        try:
            send_frame(self.sock, encode(mtype, req_id, meta, bufs, limits=self.limits))
        except OSError as e:
            raise ServerUnavailable(f"graph server {self.peer} is gone ({e})") from e
        return self.recv(req_id, mtype)

    def request(
        self,
        mtype: MsgType,
        meta: dict[str, Any],
        bufs: Sequence[np.ndarray] = (),
        into: Into | None = None,
    ) -> Frame:
        """Send one request and wait for its answer (read-only requests are sent again on
        a fresh connection if theirs is lost, within the request timeout)."""
        deadline = time.monotonic() + self.timeouts.request
        try:
            return self.recv(self.send(mtype, meta, bufs), mtype, into)
        except ServerUnavailable as e:
            if mtype not in IDEMPOTENT:
                raise
            return self.retry(mtype, meta, bufs, into, deadline, e)

    def retry(
        self,
        mtype: MsgType,
        meta: dict[str, Any],
        bufs: Sequence[np.ndarray],
        into: Into | None,
        deadline: float,
        first: ServerUnavailable,
    ) -> Frame:
        """Send a read-only request again on fresh connections until ``deadline``."""
        err: DistGNNError = first
        for attempt in range(1, RETRIES + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            log.info(
                "retrying on a fresh connection",
                extra=kv(peer=self.peer, type=mtype.name, attempt=attempt, error=str(err)[:200]),
            )
            self.close()
            saved = self.timeouts
            self.timeouts = Timeouts(request=left, connect=min(saved.connect, left))
            try:
                return self.recv(self.send(mtype, meta, bufs), mtype, into)
            except ServerUnavailable as e:
                err = e
            finally:
                self.timeouts = saved
        raise err


@dataclass
class Call:
    """One request of a :meth:`ServerPool.call_many` batch."""

    mtype: MsgType
    meta: dict[str, Any]
    bufs: Sequence[np.ndarray] = ()
    into: Into | None = None


class ServerPool:
    """One connection per partition server, with several requests in flight at once."""

    def __init__(
        self,
        addrs: Sequence[tuple[str, int]],
        token: str | None,
        timeouts: Timeouts | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.addrs = list(addrs)
        self.session = new_session()
        self.conns = [
            Connection(h, p, token, timeouts, limits, self.session) for h, p in self.addrs
        ]
        self._lock = threading.Lock()
        self.stats = ClientStats()

    def __len__(self) -> int:
        return len(self.conns)

    def connect_all(self) -> None:
        for c in self.conns:
            if c.sock is None:
                c.connect()

    def call(self, part: int, call: Call) -> Frame:
        return self.call_many({part: call})[part]

    def call_many(
        self, calls: Mapping[int, Call], between: Callable[[], None] | None = None
    ) -> dict[int, Frame]:
        """Send every call first, then collect every answer (requests overlap on the servers).

        ``between`` runs once every request is sent and before any answer is read (work of
        this process that overlaps with the servers'; a co-located trainer samples its own
        partition there). If it raises, the connections still owing an answer are closed."""
        with self._lock:
            sent: dict[int, int] = {}
            out: dict[int, Frame] = {}
            lost: dict[int, ServerUnavailable] = {}
            first_error: DistGNNError | None = None
            start = time.monotonic()
            for part, c in calls.items():
                try:
                    sent[part] = self.conns[part].send(c.mtype, c.meta, c.bufs)
                except ServerUnavailable as e:
                    lost[part] = e
                except DistGNNError as e:
                    first_error = e
                    break
            if between is not None:
                try:
                    between()
                except BaseException:
                    for part in sent:
                        self.conns[part].close()  # never read a stale answer later
                    raise
            for part, req_id in sent.items():
                c = calls[part]
                try:
                    out[part] = self.conns[part].recv(req_id, c.mtype, c.into)
                    self.stats.record(c.mtype, c.bufs, out[part])
                except ServerUnavailable as e:
                    lost[part] = e
                except DistGNNError as e:
                    first_error = first_error or e
            for part, why in lost.items():
                c, conn = calls[part], self.conns[part]
                if first_error is not None or c.mtype not in IDEMPOTENT:
                    first_error = first_error or why
                    continue
                deadline = start + conn.timeouts.request
                try:
                    out[part] = conn.retry(c.mtype, c.meta, c.bufs, c.into, deadline, why)
                    self.stats.record(c.mtype, c.bufs, out[part])
                except DistGNNError as err:
                    first_error = err
            if first_error is not None:
                raise first_error
            return out

    def close(self) -> None:
        for c in self.conns:
            c.close()
