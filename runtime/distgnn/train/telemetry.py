"""What a trainer tells the outside world while it trains: progress and metrics.

* **Progress** (rank 0, always on, cheap): an HTTP ``GET /progress`` answering one small
  JSON object (epoch of total, last loss, last validation metric, time per epoch), on
  ``DISTGNN_PROGRESS_PORT`` (default :data:`~distgnn.contract.TRAINER_PROGRESS_PORT`;
  ``off`` disables it). The operator polls it to fill ``status.progress`` and
  ``distgnn run`` polls it for its progress lines. Why a pull endpoint rather than the
  trainer writing its own status or pod annotations: trainer pods then need no
  Kubernetes API access at all (no service-account token, no extra RBAC), and the
  operator decides how often the API server is written to.
* **Metrics** (every rank, only when ``DISTGNN_METRICS_PORT`` is set, i.e.
  ``spec.monitoring.metrics``): Prometheus ``/metrics`` with the epoch, the step time
  split into sample / pull / compute, loss, samples per second and what was pulled from
  the graph servers (read from the connection pool's counters at scrape time).

Both bind ``DISTGNN_HTTP_BIND`` (default ``0.0.0.0``; local mode uses loopback).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from distgnn import contract
from distgnn.log import kv
from distgnn.metrics_http import MetricsEndpoint, serve
from distgnn.rpc.stats import ClientStats

if TYPE_CHECKING:  # the distributed package imports torch; the collector needs no import
    from distgnn.distributed.featcache import CacheStats
    from distgnn.distributed.localread import LocalStats
    from distgnn.distributed.localsample import SampleStats

log = logging.getLogger("distgnn.train")

STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
T = TypeVar("T")
R = TypeVar("R")


class ProgressServer:
    """``GET /progress``: the latest progress snapshot as JSON (a daemon thread)."""

    def __init__(self, bind: str, port: int) -> None:
        self.snapshot: dict[str, Any] = {"state": "starting"}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != contract.PROGRESS_PATH:
                    code, data = 404, b'{"error": "not found"}'
                else:
                    code, data = 200, json.dumps(outer.snapshot).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer((bind, port), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.2,), daemon=True)
        self.thread.start()

    def update(self, **fields: Any) -> None:
        self.snapshot = {**self.snapshot, **fields}  # one reference swap: readers see whole ones

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class _ClientCollector(Collector):
    """The connection pool's counters, and a co-located trainer's shared-memory reads and
    local sampling, as ``distgnn_trainer_*`` counters."""

    def __init__(self) -> None:
        self.stats: ClientStats | None = None
        self.local: LocalStats | None = None
        self.sampled: SampleStats | None = None
        self.cache: CacheStats | None = None

    def collect(self) -> Iterator[Any]:
        s = self.stats or ClientStats()
        loc, smp, c = self.local, self.sampled, self.cache
        for short, doc, value in (
            ("server_requests", "Requests answered by the graph servers.", s.requests),
            ("pull_requests", "PULL requests answered.", s.pull_requests),
            ("pulled_rows", "Feature rows pulled from the graph servers.", s.rows_pulled),
            ("pulled_bytes", "Feature bytes pulled from the graph servers.", s.bytes_pulled),
            ("local_rows", "Feature rows read from the co-located server's shared memory.",
             loc.rows if loc else 0),
            ("local_bytes", "Feature bytes read from the co-located server's shared memory.",
             loc.bytes if loc else 0),
            ("local_sample_requests", "Sampling requests of the co-located partition answered "
             "from its server's shared memory in this process.", smp.requests if smp else 0),
            ("cache_hits", "Feature rows answered from this process's feature cache.",
             c.hits if c else 0),
            ("cache_misses", "Feature rows of cached tensors pulled from the graph servers.",
             c.misses if c else 0),
            ("cache_invalidations", "Times a server's write dropped cached rows.",
             c.invalidations if c else 0),
            ("cache_refetched_rows", "Cached rows found stale at a read and pulled again.",
             c.refetched if c else 0),
            ("cache_saved_bytes", "Feature bytes not pulled thanks to cache hits.",
             c.bytes_saved if c else 0),
        ):  # fmt: skip
            yield CounterMetricFamily(f"distgnn_trainer_{short}", doc, value=float(value))


class TrainerMetrics:
    """The trainer's Prometheus registry (its own, never the process-wide default)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.epoch = Gauge("distgnn_trainer_epoch", "Epochs completed.", registry=r)
        self.epochs = Gauge("distgnn_trainer_epochs", "Epochs to run.", registry=r)
        self.loss = Gauge("distgnn_trainer_loss", "Training loss of the last epoch.", registry=r)
        self.validation = Gauge(
            "distgnn_trainer_validation_metric",
            "Last validation metric (rank 0).",
            ["metric"],
            registry=r,
        )
        self.step = Histogram(
            "distgnn_trainer_step_seconds",
            "Time of one training step's phases: sample (next sampled batch), pull (its "
            "features and labels), compute (forward, backward, optimizer).",
            ["phase"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.steps = Counter("distgnn_trainer_steps", "Training steps run.", registry=r)
        self.samples = Counter(
            "distgnn_trainer_samples", "Training seeds (nodes or edges) processed.", registry=r
        )
        self.samples_per_second = Gauge(
            "distgnn_trainer_samples_per_second",
            "Training seeds per second of the last epoch (this rank).",
            registry=r,
        )
        self.epoch_seconds = Gauge(
            "distgnn_trainer_epoch_seconds", "Wall time of the last epoch.", registry=r
        )
        self.finished = Gauge(
            "distgnn_trainer_finished", "1 once this trainer finished training.", registry=r
        )
        self.client = _ClientCollector()
        r.register(self.client)
        for phase in ("sample", "pull", "compute"):
            self.step.labels(phase)


class Telemetry:
    """The hooks the built-in apps call; each part may be absent (then it costs nothing)."""

    def __init__(
        self,
        rank: int = 0,
        progress: ProgressServer | None = None,
        metrics: TrainerMetrics | None = None,
        endpoint: MetricsEndpoint | None = None,
        linger: float = 0.0,
    ) -> None:
        self.rank = rank
        self.progress = progress
        self.metrics = metrics
        self.endpoint = endpoint
        self.linger = linger

    @classmethod
    def start(cls, rank: int, env: Mapping[str, str] | None = None) -> Telemetry:
        """Start what the environment asks for; a port that cannot be bound is logged,
        never fatal (training matters more than its telemetry)."""
        e = os.environ if env is None else env
        bind = e.get(contract.ENV_HTTP_BIND) or "0.0.0.0"
        tel = cls(rank)
        try:
            pport = contract.optional_port(
                contract.ENV_PROGRESS_PORT, e, contract.TRAINER_PROGRESS_PORT
            )
            mport = contract.optional_port(contract.ENV_METRICS_PORT, e)
            tel.linger = float(e.get(contract.ENV_METRICS_LINGER) or 0)
        except ValueError as err:
            from distgnn.errors import ConfigError

            raise ConfigError(str(err)) from None
        if rank == 0 and pport is not None:
            try:
                tel.progress = ProgressServer(bind, pport)
            except OSError as err:
                log.warning("progress endpoint not started", extra=kv(port=pport, error=str(err)))
        if mport is not None:
            tel.metrics = TrainerMetrics()
            try:
                tel.endpoint = serve(tel.metrics.registry, mport, bind)
            except OSError as err:
                log.warning("metrics endpoint not started", extra=kv(port=mport, error=str(err)))
        log.info(
            "trainer endpoints",
            extra=kv(
                progress_port=tel.progress.port if tel.progress else None,
                metrics_port=tel.endpoint.port if tel.endpoint else None,
            ),
        )
        return tel

    def attach(
        self,
        stats: ClientStats | None,
        local: LocalStats | None = None,
        sampled: SampleStats | None = None,
        cache: CacheStats | None = None,
    ) -> None:
        """Report this pool's counters (the graph-server connections) as pulled rows/bytes,
        a co-located trainer's shared-memory reads (``local``) as local rows/bytes and its
        local sampling (``sampled``) as local sample requests, and its feature cache's
        counters (``cache``)."""
        if self.metrics is not None:
            self.metrics.client.stats = stats
            self.metrics.client.local = local
            self.metrics.client.sampled = sampled
            self.metrics.client.cache = cache

    def begin(self, epochs: int, start_epoch: int) -> None:
        if self.progress is not None:
            self.progress.update(state="training", completedEpochs=start_epoch, totalEpochs=epochs)
        if self.metrics is not None:
            self.metrics.epochs.set(epochs)
            self.metrics.epoch.set(start_epoch)

    # --- step timing (wrappers are only added when metrics are on) ----------------------
    def sampled(self, it: Iterator[T]) -> Iterator[T]:
        """``it`` with the time of each ``next`` observed as the sample phase."""
        if self.metrics is None:
            return it
        return self._timed_iter(it, self.metrics.step.labels("sample"))

    @staticmethod
    def _timed_iter(it: Iterator[T], h: Any) -> Iterator[T]:
        while True:
            t0 = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            h.observe(time.perf_counter() - t0)
            yield item

    def pulled(self, load: Callable[[T], R]) -> Callable[[T], R]:
        """``load`` with its time observed as the pull phase."""
        if self.metrics is None:
            return load
        h = self.metrics.step.labels("pull")

        def timed(item: T) -> R:
            t0 = time.perf_counter()
            out = load(item)
            h.observe(time.perf_counter() - t0)
            return out

        return timed

    def computed(self, batches: Iterator[T]) -> Iterator[T]:
        """``batches`` with the consumer's time per item (the step) observed as compute."""
        if self.metrics is None:
            return batches
        return self._compute(batches, self.metrics)

    @staticmethod
    def _compute(batches: Iterator[T], m: TrainerMetrics) -> Iterator[T]:
        h = m.step.labels("compute")
        for item in batches:
            t0 = time.perf_counter()
            yield item
            h.observe(time.perf_counter() - t0)
            m.steps.inc()

    # --- epochs -----------------------------------------------------------------------
    def epoch_end(
        self,
        epoch: int,
        epochs: int,
        loss: float,
        seconds: float,
        samples: float | None = None,
        total_samples: float | None = None,
        validation: tuple[str, float] | None = None,
    ) -> None:
        """After epoch ``epoch`` (0-based): ``samples`` of this rank, ``total_samples`` of
        all ranks, ``validation`` as (camelCase name, value) when evaluated."""
        if self.metrics is not None:
            m = self.metrics
            m.epoch.set(epoch + 1)
            m.loss.set(loss)
            m.epoch_seconds.set(seconds)
            if samples is not None:
                m.samples.inc(samples)
                m.samples_per_second.set(samples / seconds if seconds > 0 else 0.0)
            if validation is not None:
                m.validation.labels(validation[0]).set(validation[1])
        if self.progress is not None:
            fields: dict[str, Any] = {
                "state": "training",
                "completedEpochs": epoch + 1,
                "totalEpochs": epochs,
                "loss": round(loss, 6),
                "epochSeconds": round(seconds, 3),
            }
            if total_samples is not None and seconds > 0:
                fields["samplesPerSecond"] = round(total_samples / seconds, 1)
            if validation is not None:
                fields["validationMetric"], fields["validationValue"] = (
                    validation[0],
                    round(validation[1], 6),
                )
            self.progress.update(**fields)

    def finish(self) -> None:
        """Training is over: report it, then keep /metrics up ``linger`` seconds."""
        if self.progress is not None:
            self.progress.update(state="finished")
        if self.metrics is not None:
            self.metrics.finished.set(1)
            if self.endpoint is not None and self.linger > 0:
                log.info("keeping /metrics up after training", extra=kv(seconds=self.linger))
                time.sleep(self.linger)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
        if self.endpoint is not None:
            self.endpoint.close()
