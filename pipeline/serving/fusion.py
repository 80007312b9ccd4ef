"""The maths of fusing search signals: candidate bookkeeping, time signals, cosines and
the feedback mix. Pure functions over values: no store, no model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from pipeline.adapters.nlp.timeexpr import Period, closeness
from pipeline.domain.validity import as_time
from pipeline.errors import EmbedderChangedError
from pipeline.serving.search_models import Explain, SearchHit
from pipeline.store.columns import time_mentioned


@dataclass
class Candidates:
    """What the first round found for one query: ranks per signal, raw scores, entity weights."""

    semantic: dict[str, float] = field(default_factory=dict)
    bm25: dict[str, float] = field(default_factory=dict)
    entity: dict[str, float] = field(default_factory=dict)
    rank_semantic: dict[str, int] = field(default_factory=dict)
    rank_bm25: dict[str, int] = field(default_factory=dict)
    rank_entity: dict[str, int] = field(default_factory=dict)
    hop: dict[str, float] = field(default_factory=dict)

    def ids(self) -> list[str]:
        return list(dict.fromkeys([*self.semantic, *self.bm25, *self.entity, *self.hop]))


@dataclass(frozen=True)
class Timing:
    """What a query says about time: the periods it names, and whether it asks "when"."""

    periods: list[Period]
    when: bool

    def signals(self, source: Mapping[str, Any]) -> tuple[float | None, float | None]:
        """(time, dated) of a memory: how near its ``observed_at`` is to the query's periods,
        and whether its text carries a time; None for a signal the query does not ask for."""
        time = None
        if self.periods:
            time = closeness(observed_at(source), self.periods)
        dated = float(time_mentioned(source)) if self.when else None
        return time, dated


def observed_at(source: Mapping[str, Any]) -> datetime | None:
    """A memory's ``observed_at`` as an aware datetime (UTC when stored without a zone)."""
    return as_time(source.get("observed_at"))


@dataclass(slots=True)
class Scored:
    """A candidate while it is ranked: its signals (rounded as ``Explain`` shows them) and its
    score. Only the candidates a search may show are made ``SearchHit`` models (``hit``): a
    search ranks about a hundred to show ten, and a model validates every field it is given."""

    id: str
    score: float
    semantic: float
    bm25: float
    bm25_raw: float
    entity: float
    time: float | None = None
    dated: float | None = None
    feedback: float | None = None
    hop: float | None = None
    rank_semantic: int | None = None
    rank_bm25: int | None = None
    rank_entity: int | None = None

    def hit(self, source: dict[str, Any]) -> SearchHit:
        """The candidate as a hit, its memory's fields from ``source``, its signals in its
        ``explain`` (``fused``: the score it is ranked by)."""
        explain = Explain(
            semantic=self.semantic,
            bm25=self.bm25,
            bm25_raw=self.bm25_raw,
            entity=self.entity,
            time=self.time,
            dated=self.dated,
            feedback=self.feedback,
            hop=self.hop,
            fused=self.score,
            rank_semantic=self.rank_semantic,
            rank_bm25=self.rank_bm25,
            rank_entity=self.rank_entity,
        )
        return SearchHit.from_source(self.id, source, score=self.score, explain=explain)


def add_feedback(scored: Scored, signal: float, weight: float) -> None:
    """Mix a candidate's score with the feedback ``signal`` (the score weighs 1), in place."""
    scored.score = round((scored.score + weight * signal) / (1 + weight), 6)
    scored.feedback = round(signal, 6)


def cosines(vector: Sequence[float], others: Sequence[npt.ArrayLike | None]) -> list[float]:
    """Cosine of ``vector`` with each of ``others`` (0 where a vector is missing), clipped at 0,
    in one matrix product. A vector of another size was read across a switch of embedder
    (``memq reprocess``): ``EmbedderChangedError``, which the searcher meets by searching
    again."""
    query = np.asarray(vector, dtype=np.float32)
    present = [n for n, other in enumerate(others) if other is not None and np.size(other)]
    result = [0.0] * len(others)
    if not present:
        return result
    rows = [np.asarray(others[n], dtype=np.float32) for n in present]
    if any(row.shape != query.shape for row in rows):
        raise EmbedderChangedError(f"vectors of {len(query)} dims compared with another size")
    matrix = np.stack(rows)
    norms = np.maximum(np.linalg.norm(matrix, axis=1), 1e-12)
    similar = matrix @ (query / max(float(np.linalg.norm(query)), 1e-12)) / norms
    for n, value in zip(present, similar.tolist(), strict=True):
        result[n] = max(0.0, value)
    return result


def on_similarity_scale(hits: Sequence[SearchHit]) -> None:
    """Give ranked ``hits`` (best first, each with its ``explain``) their public score, in
    place: ``explain.fused`` keeps the score they are ranked by, and ``score`` becomes the
    cosine-like scale ``SearchHit`` documents (the hit's similarity, a reply's at least that
    of the hit it answers, raised to the best of those below it). ``with_ranks`` too."""
    similarity = {h.id: h.explain.semantic if h.explain else 0.0 for h in hits}
    floor = 0.0
    for hit in reversed(hits):
        own = similarity[hit.id]
        if hit.explain is not None:
            own = max(own, similarity.get(hit.explain.reply_to or "", 0.0))
            hit.explain.fused = hit.score
        floor = max(floor, min(max(own, 0.0), 1.0))
        hit.score = round(floor, 6)
    with_ranks(hits)


def with_ranks(hits: Sequence[SearchHit]) -> None:
    """Each ranked hit's place (1 first) in its ``explain.rank``, in place."""
    for rank, hit in enumerate(hits, start=1):
        if hit.explain is not None:
            hit.explain.rank = rank
