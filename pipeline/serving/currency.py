"""The newer statement first: ranking raw turns for a question about the present.

Verbatim memories (``infer=false``) have no extraction to say that one replaced another, so
search orders them at rank time instead. Glossary:
- *present question*: one that names no period ending before its reference time ("Where does
  Maria live now?", "...these days", or no time at all) and does not ask for a time. A question
  naming a past period ("in 2023") or asking when ("When did Maria move?") is about the past and
  is ranked as it is.
- *rivals*: two hits among a search's best ones, said by the same speaker at different times,
  whose texts are alike (cosine of their stored vectors at least ``pair_similarity``) and that
  both answer the question (the lower score at least ``score_ratio`` of the higher).
For a present question, the newer of two rivals that stands below the older is moved to just
above it (its score raised to just above the older's), the hits in between keep their places,
a reply moves with the hit it answers, and hits beyond the best ``pool`` are never touched: the
set of hits a search returns is the same, only their order changes. No
word lists: speaker, observation time, the statements' similarity and the question's scores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from pipeline.adapters.nlp.timeexpr import asks_when, periods
from pipeline.serving.fusion import observed_at
from pipeline.serving.search_models import SearchHit

_STEP = 1e-6  # how far above the next hit a hit's score is raised to keep the order


@dataclass(frozen=True)
class Rivalry:
    """When two hits are rivals (see the module docstring)."""

    pair_similarity: float
    score_ratio: float


def asks_about_present(query: str, reference: datetime) -> bool:
    """True unless ``query`` names a period that ended by ``reference`` or asks for a time
    ("When did…", "How long ago…": the answer is a moment of the past, not a state)."""
    if asks_when(query):
        return False
    return all(period.end > reference for period in periods(query, reference))


def past_asked_since(query: str, reference: datetime) -> datetime | None:
    """For a question about the past (every period it names ended by ``reference``), the start
    of the earliest one: what was true since then may answer it. None for any other question."""
    named = periods(query, reference)
    if not named or any(period.end > reference for period in named):
        return None
    return min(period.start for period in named)


def speaker_key(source: Mapping[str, Any]) -> str | None:
    """Who said a memory: its actor, else its speaker's name; None when unknown."""
    who = source.get("actor_id") or source.get("speaker")
    return str(who).strip().lower() if who else None


def may_have_rivals(
    hits: Sequence[SearchHit], docs: Mapping[str, Mapping[str, Any]], rivalry: Rivalry
) -> bool:
    """Whether two of ``hits`` share a speaker and an order of time and are near in score (the
    cheap half of the test: worth reading their vectors for)."""
    return any(True for _ in _candidate_pairs(hits, docs, rivalry))


def newer_first(
    hits: list[SearchHit],
    docs: Mapping[str, Mapping[str, Any]],
    vectors: Mapping[str, npt.ArrayLike],
    rivalry: Rivalry,
) -> list[SearchHit]:
    """``hits`` (best first) with the newer of each pair of rivals placed just above the
    older; ``vectors`` are the stored vectors of the hits (a hit without one has no rival)."""
    rivals = [
        (older, newer)
        for older, newer in _candidate_pairs(hits, docs, rivalry)
        if _cosine(vectors.get(older), vectors.get(newer)) >= rivalry.pair_similarity
    ]
    if not rivals:
        return hits
    replies = _replies(hits)
    order = [h.id for h in hits]
    for _ in range(len(order) ** 2):  # each move undoes one older-above-newer pair: it ends
        if not _move_one(order, rivals, replies):
            break
    by_id = {h.id: h for h in hits}
    placed = [by_id[i] for i in order]
    _scores_in_order(placed)
    for older, newer in rivals:
        explain = by_id[older].explain
        if explain is not None and order.index(newer) < order.index(older):
            explain.below = newer
    return placed


def _scores_in_order(placed: list[SearchHit]) -> None:
    """Raise each score that is below the next one's to just above it, bottom up (in place:
    the hits are this search's own), so scores read in the order the hits now stand."""
    for i in range(len(placed) - 2, -1, -1):
        hit, below = placed[i], placed[i + 1]
        if hit.score <= below.score:
            hit.score = round(below.score + _STEP, 6)
            if hit.explain is not None:
                hit.explain.fused = hit.score


def _reply_to(hit: SearchHit) -> str | None:
    """The hit this one was placed after as its reply (``pipeline.serving.replies``), if any."""
    return hit.explain.reply_to if hit.explain is not None else None


def _replies(hits: Sequence[SearchHit]) -> dict[str, list[str]]:
    """Hit id -> the replies placed after it: they move with it."""
    out: dict[str, list[str]] = {}
    for hit in hits:
        answered = _reply_to(hit)
        if answered is not None:
            out.setdefault(answered, []).append(hit.id)
    return out


def _candidate_pairs(
    hits: Sequence[SearchHit], docs: Mapping[str, Mapping[str, Any]], rivalry: Rivalry
) -> list[tuple[str, str]]:
    """(older, newer) id pairs of one speaker, observed at different times, near in score."""
    pairs: list[tuple[str, str]] = []
    said = [h for h in hits if _reply_to(h) is None]  # a reply moves with its hit, not alone
    for i, a in enumerate(said):
        for b in said[i + 1 :]:
            pair = _ordered(a, b, docs)
            low, high = sorted((a.score, b.score))
            if pair is not None and high > 0 and low >= rivalry.score_ratio * high:
                pairs.append(pair)
    return pairs


def _ordered(
    a: SearchHit, b: SearchHit, docs: Mapping[str, Mapping[str, Any]]
) -> tuple[str, str] | None:
    """(older, newer) when ``a`` and ``b`` have one speaker and two observation times."""
    source_a, source_b = docs.get(a.id, {}), docs.get(b.id, {})
    who = speaker_key(source_a)
    if who is None or who != speaker_key(source_b):
        return None
    at_a, at_b = observed_at(source_a), observed_at(source_b)
    if at_a is None or at_b is None or at_a == at_b:
        return None
    return (a.id, b.id) if at_a < at_b else (b.id, a.id)


def _move_one(
    order: list[str], rivals: Sequence[tuple[str, str]], replies: Mapping[str, list[str]]
) -> bool:
    """Move one newer rival that stands below its older one, with its replies, to just above
    the older (the hits in between keep their places); False when there is none."""
    for older, newer in rivals:
        if order.index(older) < order.index(newer):
            block = [newer, *replies.get(newer, [])]
            for memory in block:
                order.remove(memory)
            at = order.index(older)
            order[at:at] = block
            return True
    return False


def _cosine(a: npt.ArrayLike | None, b: npt.ArrayLike | None) -> float:
    if a is None or b is None or not np.size(a) or not np.size(b):
        return 0.0
    x, y = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    norm = float(np.linalg.norm(x) * np.linalg.norm(y))
    return float(x @ y) / norm if norm > 0 else 0.0
