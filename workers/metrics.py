"""Prometheus metrics of the workers: phase durations, jobs by outcome, LLM latency and
tokens, queue depths.

A worker is several processes (a prefork pool's children, or one process of threads), and a
Prometheus scrape reaches one address. Each child records into prometheus_client's
multiprocess files (``PROMETHEUS_MULTIPROC_DIR``: one file per process, fork-aware), and the
worker's main process serves the sum of those files on ``MEMQ_WORKER_METRICS_PORT``. One port
per worker instance, whatever its pool size, and counts survive a child being replaced
(``max_tasks_per_child``, a crash). A port per child would need a port per pool slot, change
with every respawn, and lose a dead child's counts.

The directory must be in the environment before prometheus_client is imported (the library
picks its value class at import time), so ``memq worker`` creates it before importing this
module (``memq.cli.prepare_metrics_dir``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from time import perf_counter
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    import redis

    from pipeline.adapters.llm.openai_llm import LLMCall

log = logging.getLogger("memq.worker")

_PHASE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)


class WorkerMetrics:
    """The figures one worker process records. Its own registry (never the global one), so
    several apps in one process (tests) do not collide; what a scrape sees comes from the
    multiprocess files when the worker runs with a metrics port."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.phase_seconds = Histogram(
            "memq_worker_phase_seconds",
            "Wall time of one phase task over its batch of jobs",
            ["phase"],
            registry=self.registry,
            buckets=_PHASE_BUCKETS,
        )
        self.jobs = Counter(
            "memq_worker_jobs",
            "Jobs ended by the workers, by outcome (succeeded, failed, dead)",
            ["outcome"],
            registry=self.registry,
        )
        self.llm_seconds = Histogram(
            "memq_llm_request_seconds",
            "Latency of one LLM request, by outcome (ok, error)",
            ["outcome"],
            registry=self.registry,
            buckets=_LLM_BUCKETS,
        )
        self.llm_tokens = Counter(
            "memq_llm_tokens",
            "LLM tokens reported by the model server, by kind (prompt, completion)",
            ["kind"],
            registry=self.registry,
        )

    @contextmanager
    def phase(self, phase: str) -> Iterator[None]:
        """Time the block as one run of ``phase`` (failed runs too: they cost time as well)."""
        started = perf_counter()
        try:
            yield
        finally:
            self.phase_seconds.labels(phase=phase).observe(perf_counter() - started)

    def jobs_ended(self, outcome: str, count: int = 1) -> None:
        if count:
            self.jobs.labels(outcome=outcome).inc(count)

    def llm_call(self, call: LLMCall) -> None:
        """The LLM adapter's observer: latency, and the tokens the server reported."""
        self.llm_seconds.labels(outcome=call.outcome).observe(call.seconds)
        if call.prompt_tokens:
            self.llm_tokens.labels(kind="prompt").inc(call.prompt_tokens)
        if call.completion_tokens:
            self.llm_tokens.labels(kind="completion").inc(call.completion_tokens)


class QueueDepth(Collector):
    """``memq_queue_depth{queue}``, read from the broker at scrape time (messages waiting in
    each queue the worker consumes; the same figure the API reports)."""

    def __init__(self, client: redis.Redis, queues: Sequence[str]) -> None:
        self._redis = client
        self._queues = list(queues)

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily(
            "memq_queue_depth", "Messages waiting per queue", labels=["queue"]
        )
        for queue in self._queues:
            try:
                gauge.add_metric([queue], float(self._redis.llen(queue)))
            except Exception as exc:  # Redis away: the scrape still answers, without it
                log.debug("queue depth of %s unavailable: %s", queue, exc)
        yield gauge


def scrape_registry(path: str, client: redis.Redis, queues: Sequence[str]) -> CollectorRegistry:
    """What the worker's metrics port serves: the sum of every process's files, and the
    depths of its queues."""
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    registry.register(QueueDepth(client, queues))
    return registry


def serve_metrics(host: str, port: int, registry: CollectorRegistry) -> Any:
    """Serve ``registry`` on ``host:port`` from a daemon thread; returns the server."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=host, registry=registry)
    log.info("worker metrics on http://%s:%d/metrics", host, port)
    return server
