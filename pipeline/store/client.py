"""Elasticsearch client construction and the one place its errors become memq's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport import ConnectionTimeout, TransportError
from elasticsearch import ApiError, Elasticsearch
from elasticsearch.serializer import NdjsonSerializer, OrjsonSerializer

from pipeline.config import ElasticsearchConfig
from pipeline.errors import (
    ConfigurationError,
    EmbedderChangedError,
    PermanentError,
    TransientError,
)

_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class OrjsonNdjsonSerializer(NdjsonSerializer):
    """NDJSON bodies (msearch, bulk) written and read with orjson, like the client's JSON ones
    (``OrjsonSerializer``): each line of a search carries a query vector, each answer of a
    search round its hits' columns, which the standard library's json formats and parses
    several times slower."""

    def json_dumps(self, data: Any) -> bytes:
        return orjson.dumps(data, default=self.default, option=orjson.OPT_SERIALIZE_NUMPY)

    def json_loads(self, data: bytes) -> Any:
        return orjson.loads(data)


def make_client(config: ElasticsearchConfig) -> Elasticsearch:
    """A client over every node of ``config.urls``: a call goes to one live node of the pool,
    and moves on to the next when that node cannot be reached.

    Retries across nodes are on for connection errors only: a refused or reset connection
    means the request never ran, so sending it to another node within the same call is safe
    and is what makes a dead node invisible to callers. ``max_retries`` is one less than the
    number of nodes, so each node is tried at most once per call (a single node: no retry, as
    before). Everything else stays off here, because memq retries at one layer of its own
    (``pipeline.errors`` → tenacity or Celery): no status is retried (``retry_on_status=()``,
    the client's default would retry 429/502/503/504 under memq's own backoff), a 4xx is never
    retried, and a timeout is not (the request may have run; a second node would only double
    the wait before memq's own retry).

    Bodies are written and read with orjson (``OrjsonSerializer``, the client's own, and its
    NDJSON twin): the same JSON, formatted and parsed in a fraction of the time.
    """
    if config.urls[:1] != (config.url,):  # a copy that changed one without the other
        raise ConfigurationError(f"url {config.url} is not the first of urls {config.urls}")
    auth: tuple[str, str] | None = None
    if config.username is not None and config.password is not None:
        auth = (config.username, config.password.get_secret_value())
    return Elasticsearch(
        list(config.urls),
        basic_auth=auth,
        request_timeout=config.timeout_s,
        max_retries=len(config.urls) - 1,
        retry_on_status=(),
        retry_on_timeout=False,
        # the order given is the order tried (then round robin): a dead first node costs
        # one refused connection per call until the pool marks it dead
        randomize_nodes_in_pool=False,
        serializers={
            OrjsonSerializer.mimetype: OrjsonSerializer(),
            OrjsonNdjsonSerializer.mimetype: OrjsonNdjsonSerializer(),
        },
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
    if other_dims(error):
        return EmbedderChangedError(reason)
    permanent = status is not None and status < 500 and status not in _RETRYABLE_STATUS
    return PermanentError(reason) if permanent else TransientError(reason)


def translate(action: str, exc: Exception) -> TransientError | PermanentError:
    """Classify an exception raised by the Elasticsearch client."""
    if isinstance(exc, TransportConnectionError | ConnectionTimeout):
        return TransientError(f"{action}: Elasticsearch unreachable ({exc.__class__.__name__})")
    if isinstance(exc, ApiError):
        status = exc.meta.status
        reason = f"{action}: HTTP {status} {error_reason(exc.body)}"
        if other_dims(exc.body):
            return EmbedderChangedError(reason)
        if status in _RETRYABLE_STATUS or _blocked(exc.body):
            return TransientError(reason)
        return PermanentError(reason)
    if isinstance(exc, TransportError):
        return TransientError(f"{action}: {exc}")
    return PermanentError(f"{action}: {exc}")


def _blocked(body: Any) -> bool:
    """An index block (writes paused while ``memq reindex`` catches up) lifts by itself: a
    write it refused is retried, not failed."""
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and error.get("type") == "cluster_block_exception"


def other_dims(body: Any) -> bool:
    """A vector written or searched with another size than the index's (the index moved to
    another embedder meanwhile): Elasticsearch says "different number of dimensions"."""
    return "different number of dimensions" in str(body)


@contextmanager
def es_errors(action: str) -> Iterator[None]:
    """Run a block of Elasticsearch calls, re-raising its failures as memq errors."""
    try:
        yield
    except (ApiError, TransportError) as exc:
        raise translate(action, exc) from exc
