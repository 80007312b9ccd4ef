"""Job webhooks: one POST of the job's outcome to the caller's URL."""

from __future__ import annotations

from typing import Any

import httpx


def post_webhook(url: str, payload: dict[str, Any], timeout_s: float) -> str | None:
    """POST ``payload`` as JSON; returns None on a 2xx answer, else the reason it failed.
    Delivery is at least once: a replayed job may call the webhook again."""
    try:
        response = httpx.post(url, json=payload, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return f"webhook {url}: {exc.__class__.__name__}: {exc}"
    if response.is_success:
        return None
    return f"webhook {url}: HTTP {response.status_code}"
