"""A second hop for questions about a person: from the name to what that person said.

"What activities does Melanie take part in?" is answered by several of Melanie's own memories
from different sessions ("I just signed up for a pottery class", "I'm off to go swimming with
the kids"). None of them says "Melanie": people do not name themselves. The memories that do
are the other speaker's replies ("Glad it helped ya, Melanie!"), short texts where the name
weighs a lot for BM25 and for the vectors, so the first round's best hits for a name are the
replies to that person, and the evidence sits lower or outside the candidates altogether.

The hop follows the link the store already has: a name in the question, the speaker of a
memory (``actor_id``, also indexed as ``speaker``). For each person the question names (by the
entity extractor, at most ``hop_people``):
- a second retrieval: the question's best ``hop_candidates`` by BM25 among the memories that
  person said. It rides in the first round's msearch beside the kNN and BM25 lists (no round
  trip of its own, so it cannot leave their hits out: a memory it shares with them is read
  twice, the same) and brings back the fields, the vector and the question's BM25 score the
  fusion needs;
- the ``hop`` signal: 1 for a candidate said by a person the question names, 0 otherwise,
  mixed into the fused score as feedback is (the fused score weighs 1, the hop ``weight_hop``).
A name that is nobody's speaker (a place, a person only talked about) finds nothing and lifts
nothing; a scope where one person said everything lifts every candidate alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.adapters.nlp.speaker import speaker_name
from pipeline.store.queries import RANKED_FIELDS, ranked_doc

QUERY_NAME = "query"
"""The name of the question's BM25 clause inside the hop search: its score for a new
candidate is the BM25 signal the fusion needs."""

_WORD = re.compile(r"\w+")
_POSSESSIVE = re.compile(r"['\u2019]s$", re.IGNORECASE)


def name_words(text: str) -> frozenset[str]:
    """A name as case-folded words, a possessive dropped: "Maria's" → {"maria"}."""
    return frozenset(_WORD.findall(_POSSESSIVE.sub("", text.strip()).casefold()))


def people_named(entities: Sequence[str], limit: int) -> list[frozenset[str]]:
    """The names among a query's ``entities`` (capitalised words, at most ``limit``, once
    each, in order): those whose words are letters (a date or a number is nobody)."""
    names: list[frozenset[str]] = []
    for entity in entities:
        words = name_words(entity)
        if words and all(w.isalpha() for w in words) and words not in names:
            names.append(words)
    return names[:limit]


def said_by(actor_id: str | None, names: Sequence[frozenset[str]]) -> bool:
    """Whether a memory's speaker is one of ``names``: every word of the name is a word of
    the speaker's ("Maria" said by "maria_lopez"), or the other way round."""
    speaker = speaker_name(actor_id)
    if not speaker:
        return False
    words = name_words(speaker)
    return any(name <= words or words <= name for name in names)


def speaker_clause(name: frozenset[str]) -> dict[str, Any]:
    """Memories whose speaker has every word of ``name``."""
    return {"match": {"speaker": {"query": " ".join(sorted(name)), "operator": "and"}}}


@dataclass(frozen=True)
class HopPlan:
    """One query's hop: the people it names, the question's BM25 query and how many memories
    to get."""

    people: list[frozenset[str]]
    question: dict[str, Any]
    size: int

    def search(self, clauses: list[dict[str, Any]]) -> dict[str, Any]:
        """The body of one search over the memories: the question's best matches among what
        the named people said, with their fields, vector and named BM25 score."""
        question = {k: v for k, v in self.question.items() if k != "filter"}
        return {
            "size": self.size,
            "_source": False,
            "docvalue_fields": RANKED_FIELDS,
            "query": {
                "bool": {
                    "must": [{"bool": {**question, "_name": QUERY_NAME}}],
                    "filter": [
                        *clauses,
                        {
                            "bool": {
                                "should": [speaker_clause(p) for p in self.people],
                                "minimum_should_match": 1,
                            }
                        },
                    ],
                }
            },
        }


@dataclass
class HopResult:
    """New candidates from the hop: their fields (with the vector) and the question's BM25
    score of each."""

    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    bm25: dict[str, float] = field(default_factory=dict)


def named_score(hit: Mapping[str, Any], name: str) -> float:
    """A hit's score for the named clause ``name`` (0 if it did not match it)."""
    matched = hit.get("matched_queries") or {}
    return float(matched.get(name, 0.0)) if isinstance(matched, dict) else 0.0


def read_hop(hits: Sequence[Mapping[str, Any]]) -> HopResult:
    """Each hit's BM25 score, and its columns and vector (a memory without columns is left
    out of ``docs``: its source is read with the other unread candidates)."""
    result = HopResult()
    for hit in hits:
        doc = ranked_doc(hit)
        if doc is not None:
            result.docs[hit["_id"]] = doc
        result.bm25[hit["_id"]] = named_score(hit, QUERY_NAME)
    return result


def plan_hop(
    entities: Sequence[str], question: dict[str, Any], *, people: int, size: int
) -> HopPlan | None:
    """The hop of one query (None when it names nobody)."""
    named = people_named(entities, people)
    if not named:
        return None
    return HopPlan(named, question, size)


def mixed(score: float, signal: float, weight: float) -> float:
    """A fused score mixed with the hop signal (the score weighs 1), as feedback is mixed."""
    return (score + weight * signal) / (1 + weight)
