"""Elasticsearch client construction and the one place its errors become memq's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TransportError
from elasticsearch import ApiError, Elasticsearch

from pipeline.config import ElasticsearchConfig
from pipeline.errors import PermanentError, TransientError

_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def make_client(config: ElasticsearchConfig) -> Elasticsearch:
    """A client for ``config.url``. Retries stay off here: memq retries at one layer of its own."""
    auth: tuple[str, str] | None = None
    if config.username is not None and config.password is not None:
        auth = (config.username, config.password.get_secret_value())
    return Elasticsearch(
        config.url,
        basic_auth=auth,
        request_timeout=config.timeout_s,
        max_retries=0,
        retry_on_timeout=False,
    )


def error_reason(body: Any) -> str:
    """The human part of an Elasticsearch error body (``error.reason`` and its root cause)."""
    if not isinstance(body, dict):
        return str(body)[:500]
    error = body.get("error", body)
    if not isinstance(error, dict):
        return str(error)[:500]
    reason = f"{error.get('type', 'error')}: {error.get('reason', '')}"
    causes = error.get("root_cause") or []
    if causes and isinstance(causes[0], dict) and causes[0].get("reason") != error.get("reason"):
        reason += f" ({causes[0].get('reason')})"
    return reason[:1000]


def item_error(action: str, status: int | None, error: Any) -> TransientError | PermanentError:
    """Classify one failed item of a multi-request (msearch) by its own status: a refusal
    that will not pass (a closed or missing index, a bad query) is permanent."""
    reason = f"{action}: {error_reason(error)}"
    permanent = status is not None and status < 500 and status not in _RETRYABLE_STATUS
    return PermanentError(reason) if permanent else TransientError(reason)


def translate(action: str, exc: Exception) -> TransientError | PermanentError:
    """Classify an exception raised by the Elasticsearch client."""
    if isinstance(exc, TransportConnectionError | ConnectionTimeout):
        return TransientError(f"{action}: Elasticsearch unreachable ({exc.__class__.__name__})")
    if isinstance(exc, ApiError):
        status = exc.meta.status
        reason = f"{action}: HTTP {status} {error_reason(exc.body)}"
        return TransientError(reason) if status in _RETRYABLE_STATUS else PermanentError(reason)
    if isinstance(exc, TransportError):
        return TransientError(f"{action}: {exc}")
    return PermanentError(f"{action}: {exc}")


@contextmanager
def es_errors(action: str) -> Iterator[None]:
    """Run a block of Elasticsearch calls, re-raising its failures as memq errors."""
    try:
        yield
    except (ApiError, TransportError) as exc:
        raise translate(action, exc) from exc
