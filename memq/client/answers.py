"""How answers are read, for both clients: the JSON of a 2xx (``decode``, ``answer``), then
the pydantic model of ``memq.types`` it must be (``parse``); an answer of another shape is an
``invalid_response`` error, never a pydantic exception."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter
from pydantic import ValidationError as _SchemaError

from memq.client.errors import MemqAPIError, MemqTimeoutError, error_from
from memq.client.retries import Outcome
from memq.types import Job, JobAccepted, SearchHit, SearchHits, Shards

M = TypeVar("M", bound=BaseModel)


def answer(outcome: Outcome) -> Any:
    """The JSON of the last try's 2xx answer; else its ``MemqAPIError``."""
    if isinstance(outcome, Exception):
        raise error_from(outcome) from outcome
    return decode(outcome)


def parse(model: type[M], value: Any) -> M:
    """``value`` (decoded JSON) as ``model``; an answer of another shape is an
    ``invalid_response`` error, never a pydantic exception."""
    try:
        return model.model_validate(value)
    except _SchemaError as exc:
        raise _invalid(model.__name__, value, exc) from exc


def parse_list(model: type[M], value: Any) -> list[M]:
    """``value`` as a list of ``model``, with the same error contract as ``parse``."""
    try:
        return TypeAdapter(list[model]).validate_python(value)  # type: ignore[valid-type]
    except _SchemaError as exc:
        raise _invalid(f"list of {model.__name__}", value, exc) from exc


def _invalid(what: str, value: Any, exc: _SchemaError) -> MemqAPIError:
    problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
    return MemqAPIError(
        None, "invalid_response", f"expected {what}, got {value!r:.200} ({problems})"
    )


def _results(value: Any) -> Any:
    """The ``results`` member of an answer object (search, batch search)."""
    if not isinstance(value, dict) or "results" not in value:
        raise MemqAPIError(None, "invalid_response", f"expected results, got {value!r:.200}")
    return value["results"]


def search_hits(value: Any) -> SearchHits:
    """A search's answer: its hits, with the partial flag and the shard counts."""
    hits = parse_list(SearchHit, _results(value))
    shards = value.get("shards")
    return SearchHits(
        hits,
        partial=value.get("partial") is True,
        shards=None if shards is None else parse(Shards, shards),
    )


def search_many_hits(value: Any) -> list[SearchHits]:
    """A batch search's answer: one ``SearchHits`` per query, in order, each flagged from
    its own shard counts."""
    answers = _results(value)
    if not isinstance(answers, list):
        raise MemqAPIError(None, "invalid_response", f"expected lists, got {answers!r:.200}")
    counts = parse_list(Shards, value.get("shards") or [])
    if counts and len(counts) != len(answers):
        raise MemqAPIError(
            None, "invalid_response", f"{len(counts)} shard counts for {len(answers)} queries"
        )
    found = []
    for i, hits in enumerate(answers):
        shards = counts[i] if counts else None
        partial = shards.partial if shards else value.get("partial") is True
        found.append(SearchHits(parse_list(SearchHit, hits), partial=partial, shards=shards))
    return found


def accepted_or_job(value: Any) -> JobAccepted | Job:
    """An add's answer: the finished job when the server waited for it, else the acceptance."""
    if isinstance(value, dict) and "created" not in value and "attempts" in value:
        return parse(Job, value)
    return parse(JobAccepted, value)


def decode(response: httpx.Response) -> Any:
    """The JSON of a 2xx answer; anything else raises the matching ``MemqAPIError``."""
    if not response.is_success:
        raise error_from(response)
    try:
        return response.json()
    except ValueError as exc:
        raise error_from(response) from exc


def timed_out(job_id: str, timeout_s: float, job: Job | None) -> MemqTimeoutError:
    status = job.status if job else "unknown"
    return MemqTimeoutError(f"job {job_id} still {status} after {timeout_s:g}s", job)
