"""What a search asks and what it answers: the request models and the hit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline.domain.models import AwareDatetime, MemoryView, Scope

AS_OF = (
    "what was true at this time: memories observed by then and not yet replaced then "
    "(default: what is true now)"
)
INCLUDE_REPLACED = "also memories a newer one replaced, each with its valid_until and replaced_by"


class SearchOptions(BaseModel):
    """What a search asks, whoever's memories it searches."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query: str = Field(min_length=1, max_length=4000)
    filters: dict[str, Any] | None = None
    top_k: int = Field(default=20, ge=1, le=1000)
    threshold: float | None = Field(default=None, ge=0, le=1)
    rerank: bool = False
    explain: bool = False
    show_expired: bool = False
    as_of: AwareDatetime | None = Field(default=None, description=AS_OF)
    include_replaced: bool = Field(default=False, description=INCLUDE_REPLACED)
    reference_time: AwareDatetime | None = Field(
        default=None,
        description="the moment relative times in the query are read against (default: now)",
    )
    hop: bool = Field(
        default=True,
        description="a second hop to what the people the query names said (when configured)",
    )
    reply: bool = Field(
        default=True,
        description="the reply to the best hit (the next turn of its conversation) follows it",
    )

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query is empty")
        return value


class SearchQuery(SearchOptions):
    """One search. ``scope`` names whose memories; ``filters`` narrows them further."""

    scope: Scope


class Explain(BaseModel):
    semantic: float
    bm25: float
    bm25_raw: float
    entity: float
    time: float | None = None
    dated: float | None = None
    feedback: float | None = None
    hop: float | None = None
    fused: float
    rerank: float | None = None
    rank_semantic: int | None = None
    rank_bm25: int | None = None
    rank_entity: int | None = None
    reply_to: str | None = None  # placed after this hit as its reply (pipeline.serving.replies)
    below: str | None = None  # placed below this newer statement (pipeline.serving.currency)
    rank: int | None = None  # the hit's place in the search's ranking, 1 first (by ``fused``)


class SearchHit(MemoryView):
    """A memory found by a search, with its ``score`` (and, when asked, its ``explain``).

    ``score`` is on the scale of cosine similarity, in [0, 1], so that a threshold means
    what it means in mem0: the hit's similarity to the query (a reply: the higher of its own
    and that of the hit it answers), raised to the best similarity of the hits ranked below
    it, so that scores never rise down the list. The hits are ranked by ``explain.fused``, the
    fused score (``explain.rank``: the place by it)."""

    score: float
    explain: Explain | None = None


class Shards(BaseModel):
    """How much of the index a search heard from: the shards it asked, those that answered
    and those that failed, and whether it ran out of time. A search is ``partial`` when any
    shard failed or it timed out: its hits are then the best of what answered, which may
    miss memories held by the shards that did not."""

    total: int = 0
    successful: int = 0
    failed: int = 0
    timed_out: bool = False

    @property
    def partial(self) -> bool:
        return self.failed > 0 or self.timed_out

    @classmethod
    def of(cls, response: Mapping[str, Any]) -> Shards:
        """The shard counts of one Elasticsearch search response."""
        shards = response.get("_shards", {})
        return cls(
            total=int(shards.get("total", 0)),
            successful=int(shards.get("successful", 0)),
            failed=int(shards.get("failed", 0)),
            timed_out=bool(response.get("timed_out", False)),
        )

    def worst(self, other: Shards) -> Shards:
        """Of two reports on one search's requests, the one that heard from less (a report
        of no request yet, ``total`` 0, gives way to any)."""
        if self.total == 0:
            return other
        mine = (self.failed, self.timed_out, -self.successful)
        theirs = (other.failed, other.timed_out, -other.successful)
        worse = other if theirs > mine else self
        return worse.model_copy(update={"timed_out": self.timed_out or other.timed_out})


@dataclass(frozen=True)
class SearchResult:
    """One search's hits and what the shards said (``shards.partial``: some did not answer)."""

    hits: list[SearchHit]
    shards: Shards = field(default_factory=Shards)

    @property
    def partial(self) -> bool:
        return self.shards.partial

    def mem0_answer(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        """``results`` (these hits in mem0's shape) as mem0 answers a search: ``{"results"}``
        alone when whole, as mem0 does; with ``partial`` and the shard counts when not."""
        if not self.partial:
            return {"results": results}
        return {"results": results, "partial": True, "shards": self.shards.model_dump()}
