"""The reply to the best hit: in a conversation, what answers a turn is the next turn.

A question is often answered by the turn that replies to the one it matches best: "How long
have you been married?" is what the question's words find; "5 years already!", said next, is
the answer, and shares no word with the question. So when a search's best hit is a verbatim
memory (``infer=false`` keeps each message with its ``turn``, its place among the job's
messages), the memory of the job's next turn, if it is in the caller's scope and filters, is
placed right after the best hit. It takes the score of the hit it now precedes (the list stays
ordered), and its ``explain.reply_to`` names the hit it answers; a reply that was not among the
candidates was not scored on the signals, and its explain says 0 for each.

Extracted memories (``infer=true``) carry no turn: a fact is not a message, and has no reply.
Pure functions over values; the searches it needs are ``pipeline.store.queries.replies_body``
(the replies to every candidate, read beside the scoring) and ``reply_body`` (one reply).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.serving.search_models import Explain, SearchHit


def reply_key(best: Mapping[str, Any]) -> tuple[str, int] | None:
    """(job id, turn) of the reply to the memory whose source is ``best``, or None when it
    has no place in a conversation."""
    turn, job_id = best.get("turn"), best.get("job_id")
    if not isinstance(turn, int) or isinstance(turn, bool) or not isinstance(job_id, str):
        return None
    return job_id, turn + 1


def followed_by_reply(
    hits: list[SearchHit], memory_id: str, source: dict[str, Any], explain: bool
) -> list[SearchHit]:
    """``hits`` (best first) with the reply ``memory_id`` second; a new list, and ``hits``
    itself when the reply is the best hit or already second."""
    if not hits or hits[0].id == memory_id or (len(hits) > 1 and hits[1].id == memory_id):
        return hits
    best, rest = hits[0], [h for h in hits[1:] if h.id != memory_id]
    score = rest[0].score if rest else best.score
    known = next((h for h in hits if h.id == memory_id), None)
    if known is not None:
        note = known.explain.model_copy(update={"reply_to": best.id}) if known.explain else None
        reply = known.model_copy(update={"score": score, "explain": note})
    else:
        note = (
            Explain(semantic=0, bm25=0, bm25_raw=0, entity=0, fused=score, reply_to=best.id)
            if explain
            else None
        )
        reply = SearchHit.from_source(memory_id, source, score=score, explain=note)
    return [best, reply, *rest]


Turn = tuple[str, int]  # (job id, turn)


@dataclass(frozen=True)
class Replies:
    """The replies read for several turns in one search: the memory (id, fields) of each
    turn ``asked`` that has one, and whether the answer is ``whole`` (no memory cut off by
    the search's size, which is one more than the turns asked)."""

    asked: frozenset[Turn]
    found: dict[Turn, tuple[str, dict[str, Any]]]
    whole: bool

    @classmethod
    def read(cls, response: Mapping[str, Any], asked: Sequence[Turn]) -> Replies:
        """From the response of ``replies_body(asked, ..., size=len(asked) + 1)``."""
        hits = response["hits"]["hits"]
        found: dict[Turn, tuple[str, dict[str, Any]]] = {}
        for hit in hits:
            job_id, turn = hit["_source"].get("job_id"), hit["_source"].get("turn")
            if isinstance(job_id, str) and isinstance(turn, int):
                found.setdefault((job_id, turn), (hit["_id"], hit["_source"]))
        return cls(frozenset(asked), found, len(hits) <= len(asked))

    def answers(self, turn: Turn) -> bool:
        """Whether this says for sure what the reply of ``turn`` is (found, or none)."""
        return self.whole and turn in self.asked
