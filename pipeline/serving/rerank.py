"""Rerankers behind the ``Reranker`` protocol (``pipeline.serving.search``).

``HttpReranker`` calls an OpenAI-style ``POST /rerank`` endpoint, the shape served by Hugging
Face TEI, vLLM and Jina (and Cohere's API). It sends the query and the candidates' texts and
reads back one relevance score per text by index, in either answer shape:
- ``{"results": [{"index": 0, "relevance_score": 0.93}, ...]}`` (vLLM, Jina, Cohere);
- ``[{"index": 0, "score": 0.93}, ...]`` (TEI).
Scores already in [0, 1] are kept; raw logits are squashed by the logistic function, so the
protocol's [0, 1] contract holds whatever the server returns.

Every failure (connection, timeout, an error status, an answer of the wrong shape) is a
``TransientError`` naming the endpoint: the search fails with 503, and a caller can retry or
search without ``rerank``. No retries here: a search is interactive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import httpx

from pipeline.config import RerankConfig
from pipeline.errors import ConfigurationError, TransientError


class HttpReranker:
    """Scores texts against a query through a ``/rerank`` endpoint (see the module doc)."""

    def __init__(self, config: RerankConfig, transport: httpx.BaseTransport | None = None) -> None:
        if config.url is None:
            raise ConfigurationError("the reranker needs MEMQ_RERANK_URL")
        self.config = config
        self.url = config.url
        key = config.api_key
        self._http = httpx.Client(
            headers={"Authorization": f"Bearer {key.get_secret_value()}"} if key else {},
            timeout=config.timeout_s,
            transport=transport,
        )

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        """One score in [0, 1] per text, in the order given. Raises ``TransientError``."""
        if not texts:
            return []
        try:
            response = self._http.post(self.url, json=self._body(query, texts))
            response.raise_for_status()
            answer = response.json()
        except httpx.HTTPStatusError as exc:
            detail = exc.response.text[:300]
            raise TransientError(
                f"reranker {self.url} answered {exc.response.status_code}: {detail}"
            ) from exc
        except (httpx.HTTPError, ValueError) as exc:
            raise TransientError(f"reranker {self.url} failed: {exc}") from exc
        return scores_from(answer, len(texts), self.url)

    def _body(self, query: str, texts: Sequence[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"query": query, self.config.format: list(texts)}
        if self.config.format == "documents":
            body["top_n"] = len(texts)
        if self.config.model:
            body["model"] = self.config.model
        return body

    def close(self) -> None:
        self._http.close()


def scores_from(answer: Any, count: int, url: str) -> list[float]:
    """The scores of an answer (either shape), by index; ``TransientError`` when an index is
    missing, repeated or out of range, or a score is not a number."""
    items = answer.get("results") if isinstance(answer, dict) else answer
    if not isinstance(items, list):
        raise TransientError(f"reranker {url}: unexpected answer {str(answer)[:300]}")
    scores: dict[int, float] = {}
    for item in items:
        index, score = _index_and_score(item)
        if index is None or score is None or not 0 <= index < count or index in scores:
            raise TransientError(f"reranker {url}: unusable result {str(item)[:300]}")
        scores[index] = score
    if len(scores) != count:
        raise TransientError(f"reranker {url}: {len(scores)} scores for {count} texts")
    return [unit_score(scores[i]) for i in range(count)]


def _index_and_score(item: Any) -> tuple[int | None, float | None]:
    if not isinstance(item, dict):
        return None, None
    index = item.get("index")
    score = item.get("relevance_score", item.get("score"))
    valid_index = isinstance(index, int) and not isinstance(index, bool)
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        return (index if valid_index else None), None
    return (index if valid_index else None), float(score)


def unit_score(score: float) -> float:
    """A score in [0, 1]: kept when it is one already, else the logistic of a raw logit."""
    return score if 0.0 <= score <= 1.0 else 1.0 / (1.0 + math.exp(-score))
