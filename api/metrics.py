"""Prometheus metrics of the API process: its own registry (never the global one), request and
enqueue figures recorded as they happen, job and queue figures read at scrape time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.requests import Request
from starlette.routing import Match, Mount, Route

from pipeline.errors import MemqError

if TYPE_CHECKING:
    from api.resources import Resources


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "memq_http_requests",
            "HTTP requests",
            ["method", "route", "status"],
            registry=self.registry,
        )
        # time to the response's start (a streamed body, such as an export, runs on after it)
        self.request_seconds = Histogram(
            "memq_http_request_duration_seconds",
            "Time to answer an HTTP request, by route",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.enqueue_seconds = Histogram(
            "memq_enqueue_seconds",
            "Time to accept a job",
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )
        self.jobs = Gauge("memq_jobs", "Jobs by status", ["status"], registry=self.registry)
        self.queue_depth = Gauge(
            "memq_queue_depth", "Messages waiting per queue", ["queue"], registry=self.registry
        )


def route_label(request: Request, matched: Mapping[str, Any]) -> str:
    """The route a request reached, as its path template: FastAPI's own routes name
    themselves in the scope; a mounted app (``/mcp``, static files) is found by matching
    ``matched``, the request's scope before routing changed it. ``unmatched`` for no route at
    all (a path per request would let any caller grow the metrics without bound)."""
    route = request.scope.get("route")
    if route is not None:
        return str(route.path)
    for candidate in request.app.router.routes:
        if (
            isinstance(candidate, Route | Mount)
            and candidate.matches(dict(matched))[0] is Match.FULL
        ):
            return candidate.path
    return "unmatched"


def render_metrics(resources: Resources, metrics: Metrics) -> tuple[bytes, str]:
    for status, count in job_counts(resources).items():
        metrics.jobs.labels(status=status).set(count)
    queues = resources.settings.queues
    for queue in (queues.io, queues.cpu, queues.backfill):
        try:
            metrics.queue_depth.labels(queue=queue).set(int(resources.redis.llen(queue)))
        except Exception:  # Redis down: the gauge keeps its last value
            continue
    return generate_latest(metrics.registry), CONTENT_TYPE_LATEST


def job_counts(resources: Resources) -> dict[str, int]:
    """Jobs per status; none while the store cannot be reached (the gauges keep their last
    values)."""
    try:
        return resources.services.store.job_counts()
    except MemqError:
        return {}
