"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from api.deps import AdminDep, ResourcesDep
from api.metrics import render_metrics
from api.schemas import Health, Readiness
from pipeline.errors import MemqError

log = logging.getLogger("memq.api")
router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> Health:
    """The process is up and serving."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Elasticsearch or Redis is down"}},
)
def readyz(resources: ResourcesDep) -> JSONResponse:
    """Elasticsearch and Redis both reachable: 200; otherwise 503 naming which is down. It
    needs no key, so it says only up or down: no counts, no error text (those are logged,
    and ``/metrics`` carries the figures, for an admin key)."""
    elasticsearch = redis = "up"
    try:
        resources.services.store.health()
    except MemqError as exc:
        log.warning("readiness: Elasticsearch is down: %s", exc.reason)
        elasticsearch = "down"
    try:
        resources.redis.ping()
    except Exception as exc:  # any redis failure means not ready
        log.warning("readiness: Redis is down: %s", exc.__class__.__name__)
        redis = "down"
    ready = "down" not in (elasticsearch, redis)
    answer = Readiness(ready=ready, elasticsearch=elasticsearch, redis=redis)
    return JSONResponse(status_code=200 if ready else 503, content=answer.model_dump())


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
)
def metrics(resources: ResourcesDep, request: Request, _admin: AdminDep) -> Response:
    """Prometheus text format: requests, enqueue latency, jobs by status, queue depths. The
    figures span every tenant, so they need an admin key (a scraper's bearer token)."""
    body, content_type = render_metrics(resources, request.app.state.metrics)
    return Response(content=body, media_type=content_type)
