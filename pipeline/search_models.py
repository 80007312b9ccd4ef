"""What a search asks and what it answers: the request models and the hit."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline.models import AwareDatetime, MemoryView, Scope


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
    reply_to: str | None = None  # placed after this hit as its reply (pipeline.replies)


class SearchHit(MemoryView):
    """A memory found by a search, with its fused ``score`` (and, when asked, its ``explain``)."""

    score: float
    explain: Explain | None = None
