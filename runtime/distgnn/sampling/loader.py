"""Data loaders: mini-batches sampled in the trainer or in sampler processes.

:class:`BatchLoader` iterates one epoch per ``iter()``. With
``num_samplers=0`` it samples in the calling process; otherwise it starts that
many sampler processes (``spawn``), each opening its own graph source (its own
server connections) and sampling batches ``w, w+N, w+2N, ...`` ahead of the
trainer. Batches come back over pipes as pickle-free array messages; a batch
depends only on ``(seed, epoch, index)``, so results are the same whichever
process builds them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing as mp
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Generator, Iterable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

import numpy as np

from distgnn.errors import ConfigError, DistGNNError, RequestTimeout
from distgnn.log import kv
from distgnn.sampling import wire
from distgnn.sampling.batches import Batcher, batcher_from_spec
from distgnn.sampling.source import GraphSource, open_source

log = logging.getLogger("distgnn.sampling")

T = TypeVar("T")
R = TypeVar("R")

_END = b"E"
_ERR = b"X"
_BATCH = b"B"


class SamplerError(DistGNNError, RuntimeError):
    """A sampler process failed or died; the message carries its root cause."""


def _sampler_main(
    source_spec: str,
    batch_spec: str,
    seeds: bytes,
    extra: bytes,
    worker: int,
    workers: int,
    conn: Connection,
) -> None:
    """Entry point of a sampler process: wait for an epoch number, sample its share, repeat."""
    import torch

    torch.set_num_threads(1)
    src: GraphSource | None = None
    try:
        src = open_source(json.loads(source_spec))
        batcher = batcher_from_spec(
            json.loads(batch_spec), np.frombuffer(seeds, dtype=np.int64), extra
        )
        while True:
            try:
                cmd = json.loads(conn.recv_bytes())
            except EOFError:
                return
            if cmd.get("stop"):
                return
            epoch = int(cmd["epoch"])
            for b in range(worker, len(batcher), workers):
                conn.send_bytes(_BATCH + wire.encode(batcher.make(src, epoch, b)))
            conn.send_bytes(_END)
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        return
    except Exception as e:
        msg = f"sampler {worker}: {type(e).__name__}: {e}\n{traceback.format_exc()}"
        with contextlib.suppress(OSError):
            conn.send_bytes(_ERR + msg.encode())
    finally:
        if src is not None:
            src.close()
        conn.close()


class BatchLoader:
    """Iterate mini-batches of ``batcher`` over ``source``; one epoch per ``iter()``."""

    def __init__(
        self,
        source: GraphSource,
        batcher: Batcher,
        num_samplers: int = 0,
        timeout: float = 300.0,
    ) -> None:
        if num_samplers < 0:
            raise ConfigError(f"num_samplers: {num_samplers} must be >= 0")
        self.source, self.batcher = source, batcher
        self.num_samplers, self.timeout = num_samplers, timeout
        self.epoch = 0
        self._procs: list[BaseProcess] = []
        self._conns: list[Connection] = []
        self._pending: list[bool] = []  # worker still owes an end marker
        if num_samplers:
            spec = source.spec()
            if spec is None:
                raise ConfigError(
                    "num_samplers: this graph cannot be re-opened by a sampler process "
                    "(load it from a file or the servers, or use num_samplers=0)"
                )
            self._start(spec)

    def __len__(self) -> int:
        return len(self.batcher)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next ``iter()`` samples (for resuming)."""
        self.epoch = epoch

    def _start(self, spec: dict[str, Any]) -> None:
        ctx = mp.get_context("spawn")
        seeds = self.batcher.seeds.tobytes()
        for w in range(self.num_samplers):
            parent, child = ctx.Pipe(duplex=True)
            p = ctx.Process(
                target=_sampler_main,
                args=(
                    json.dumps(spec),
                    json.dumps(self.batcher.spec()),
                    seeds,
                    self.batcher.extra(),
                    w,
                    self.num_samplers,
                    child,
                ),
                name=f"distgnn-sampler-{w}",
                daemon=True,
            )
            p.start()
            child.close()
            self._procs.append(p)
            self._conns.append(parent)
            self._pending.append(False)
        log.info("sampler processes started", extra=kv(num_samplers=self.num_samplers))

    def _died(self, w: int, what: str) -> SamplerError:
        """The error for sampler ``w`` gone: its index, pid and exit cause."""
        proc = self._procs[w]
        proc.join(timeout=2)  # collect the exit status of a process that just died
        code = proc.exitcode
        if code is None:
            cause = "still running"
        elif code < 0:
            try:
                cause = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                cause = f"killed by signal {-code}"
        else:
            cause = f"exited with code {code}"
        return SamplerError(f"sampler {w} (pid {proc.pid}) {what}: {cause}")

    def _send(self, w: int, data: bytes) -> None:
        try:
            self._conns[w].send_bytes(data)
        except OSError as e:  # BrokenPipeError, ConnectionResetError: the sampler is gone
            raise self._died(w, "is gone") from e

    def _recv(self, w: int) -> bytes:
        conn, proc = self._conns[w], self._procs[w]
        deadline = time.monotonic() + self.timeout
        while not conn.poll(0.5):
            if not proc.is_alive() and not conn.poll(0):
                raise self._died(w, "died")
            if time.monotonic() > deadline:
                raise RequestTimeout(f"sampler {w}: no batch within {self.timeout:.0f}s")
        try:
            msg = conn.recv_bytes()
        except (EOFError, OSError) as e:
            raise self._died(w, "closed its pipe") from e
        if msg[:1] == _ERR:
            raise SamplerError(msg[1:].decode(errors="replace"))
        return msg

    def _drain(self) -> None:
        for w in range(len(self._pending)):
            while self._pending[w]:
                self._pending[w] = self._recv(w)[:1] != _END

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        epoch = self.epoch
        self.epoch += 1
        n = len(self.batcher)
        if not self.num_samplers:
            for b in range(n):
                yield self.batcher.decode(self.batcher.make(self.source, epoch, b))
            return
        self._drain()
        for w in range(len(self._conns)):
            self._send(w, json.dumps({"epoch": epoch}).encode())
            self._pending[w] = True
        for b in range(n):
            msg = self._recv(b % self.num_samplers)
            yield self.batcher.decode(wire.decode(msg[1:]))
        for w in range(self.num_samplers):
            if self._recv(w)[:1] != _END:
                raise SamplerError(f"sampler {w}: more batches than expected")
            self._pending[w] = False

    def close(self) -> None:
        """Stop the sampler processes (idempotent)."""
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send_bytes(b'{"stop": true}')
            conn.close()
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            p.close()
        self._procs, self._conns, self._pending = [], [], []

    def __enter__(self) -> BatchLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_procs", None):
            self.close()


def prefetch(
    items: Iterable[T], load: Callable[[T], R], depth: int = 1
) -> Generator[R, None, None]:
    """``load(item)`` for every item, computed by a background thread ``depth`` items
    ahead of the consumer (as DGL's DistDataLoader prefetches features): the next
    batch is sampled and its input features pulled while the current one trains.

    Sampling, feature pulls (socket I/O, NumPy) and torch kernels release the GIL,
    so the thread overlaps with the trainer's compute. An exception in the thread is
    raised in the consumer; closing the generator stops the thread.
    """
    if depth < 1:
        raise ConfigError(f"prefetch depth: {depth} must be >= 1")
    q: queue.Queue[tuple[int, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(kind: int, value: Any) -> bool:
        while not stop.is_set():
            try:
                q.put((kind, value), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put(0, load(item)):
                    return
            put(1, None)
        except BaseException as e:  # handed to the consumer
            put(2, e)

    t = threading.Thread(target=work, name="distgnn-prefetch", daemon=True)
    t.start()
    try:
        while True:
            kind, value = q.get()
            if kind == 1:
                return
            if kind == 2:
                raise value
            yield value
    finally:
        stop.set()
        t.join(timeout=60)
