"""Prometheus metrics of the API process: its own registry (never the global one), request and
enqueue figures recorded as they happen, job, queue and per-tenant usage figures read at scrape
time."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.routing import Match, Mount, Route

from pipeline.errors import MemqError
from pipeline.features.usage import UsageLedger, capped, month_of, utc_day

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
    return generate_latest(metrics.registry) + usage_metrics(resources), CONTENT_TYPE_LATEST


def job_counts(resources: Resources) -> dict[str, int]:
    """Jobs per status; none while the store cannot be reached (the gauges keep their last
    values)."""
    try:
        return resources.services.store.job_counts()
    except MemqError:
        return {}


class UsageMetrics(Collector):
    """Each tenant's usage and budget (``pipeline.features.usage``), read from the ledger at scrape
    time: ``memq_tenant_usage_total{tenant,kind}`` (a counter per ``Usage`` field since usage
    was first counted) for at most ``limit`` tenants (the rest as ``tenant="_other"``), and
    ``memq_tenant_token_budget`` / ``memq_tenant_month_tokens`` for tenants with a budget."""

    def __init__(self, ledger: UsageLedger, limit: int, now: datetime) -> None:
        self.ledger = ledger
        self.limit = limit
        self.now = now

    def collect(self) -> Iterator[Metric]:
        usage = CounterMetricFamily(
            "memq_tenant_usage",
            "Usage per tenant since it was first counted",
            labels=["tenant", "kind"],
        )
        for tenant, figures in capped(self.ledger.totals(), self.limit).items():
            for kind, count in figures.fields().items():
                usage.add_metric([tenant, kind], count)
        yield usage
        budget = GaugeMetricFamily(
            "memq_tenant_token_budget", "Monthly LLM token budget", labels=["tenant"]
        )
        month_tokens = GaugeMetricFamily(
            "memq_tenant_month_tokens",
            "LLM tokens this UTC month, of tenants with a budget",
            labels=["tenant"],
        )
        month = month_of(utc_day(self.now))
        for tenant, tokens in sorted(self.ledger.budgets().items()):
            budget.add_metric([tenant], tokens)
            month_tokens.add_metric([tenant], self.ledger.budget_state(tenant, month).month_tokens)
        yield budget
        yield month_tokens


def usage_metrics(resources: Resources) -> bytes:
    """The per-tenant usage families (none while Redis cannot be reached)."""
    registry = CollectorRegistry()
    limit = resources.settings.api.usage_metrics_tenants
    registry.register(UsageMetrics(resources.usage, limit, resources.services.clock()))
    try:
        return generate_latest(registry)
    except MemqError:
        return b""
