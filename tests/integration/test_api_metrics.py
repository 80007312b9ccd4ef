"""The API's request metrics name every route, mounted apps included (``/mcp``, static files),
and time each route in a histogram; only a path no route serves is ``unmatched``."""

from __future__ import annotations

import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_api import admin_key

pytestmark = pytest.mark.integration


def scrape(base_url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Each sample of the API's metrics: name -> labels -> value."""
    response = httpx.get(
        f"{base_url}/metrics", headers={"authorization": f"Bearer {admin_key()}"}, timeout=10
    )
    assert response.status_code == 200
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def requests_of(samples: dict[str, dict[tuple[tuple[str, str], ...], float]], route: str) -> float:
    counted = samples.get("memq_http_requests_total", {})
    return sum(v for labels, v in counted.items() if ("route", route) in labels)


def timed(samples: dict[str, dict[tuple[tuple[str, str], ...], float]], route: str) -> float:
    counts = samples.get("memq_http_request_duration_seconds_count", {})
    return sum(v for labels, v in counts.items() if ("route", route) in labels)


def test_mounted_apps_are_named_and_every_route_is_timed(api_url: str) -> None:
    before = scrape(api_url)
    with httpx.Client(base_url=api_url, timeout=10) as http:
        assert http.post("/mcp", json={}).status_code == 401  # the MCP app's key gate
        assert http.get("/ui/static/memq.css").status_code == 200
        assert http.get(f"/no-such-path-{uuid.uuid4().hex}").status_code == 404
        assert http.get("/healthz").status_code == 200
    after = scrape(api_url)
    for route in ("/mcp", "/ui/static", "/healthz", "unmatched"):
        assert requests_of(after, route) >= requests_of(before, route) + 1, route
        assert timed(after, route) >= timed(before, route) + 1, route
    buckets = after["memq_http_request_duration_seconds_bucket"]
    mcp = {dict(labels)["le"]: v for labels, v in buckets.items() if ("route", "/mcp") in labels}
    assert mcp["+Inf"] >= 1
    assert list(mcp.values()) == sorted(mcp.values())  # cumulative buckets
