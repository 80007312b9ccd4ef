"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from api.deps import ResourcesDep
from api.metrics import render_metrics
from api.schemas import Health, Readiness
from pipeline.errors import MemqError

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
    """Elasticsearch and Redis both reachable: 200; otherwise 503 naming what is not. (The
    store is reached inside the check, not as a dependency: a node that is down is this
    answer's content, not an error.)"""
    checks: dict[str, str] = {}
    try:
        checks["elasticsearch"] = resources.services.store.health()["status"]
    except MemqError as exc:
        checks["elasticsearch"] = f"down: {exc.reason}"
    try:
        resources.redis.ping()
        checks["redis"] = "ok"
    except Exception as exc:  # any redis failure means not ready
        checks["redis"] = f"down: {exc.__class__.__name__}"
    ready = not any(value.startswith("down") for value in checks.values())
    return JSONResponse(status_code=200 if ready else 503, content={"ready": ready, **checks})


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
)
def metrics(resources: ResourcesDep, request: Request) -> Response:
    """Prometheus text format: requests, enqueue latency, jobs by status, queue depths."""
    body, content_type = render_metrics(resources, request.app.state.metrics)
    return Response(content=body, media_type=content_type)
