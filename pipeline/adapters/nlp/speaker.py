"""Who said a memory, as words that search can match.

A memory's ``text`` stays what was said; the speaker travels beside it. Questions name people
("What did Maria say about…"), and a first-person turn ("I went to the support group") names
nobody, so the speaker's name is indexed for BM25 in its own field, linked as an entity of the
memory, and put in front of the text that is embedded.
"""

from __future__ import annotations

import re

from pipeline.domain.models import Fact, Scope

_SEPARATORS = re.compile(r"[_.\-]+")


def speaker_name(actor_id: str | None) -> str | None:
    """An actor id as the name it stands for: ``"maria_lopez"`` → ``"maria lopez"``; None for
    no actor."""
    if actor_id is None:
        return None
    name = _SEPARATORS.sub(" ", actor_id).strip()
    return name or None


def speaker_of(fact: Fact, scope: Scope) -> str | None:
    """Who said ``fact``: its actor (the message's ``name``, else the request's ``actor_id``);
    for the assistant's words without one, the scope's agent."""
    if fact.actor_id is not None:
        return speaker_name(fact.actor_id)
    if fact.role == "assistant" and scope.agent_id is not None:
        return speaker_name(scope.agent_id)
    return None


def embedding_text(text: str, speaker: str | None) -> str:
    """What is embedded for a memory: ``"Speaker: text"``, as a chat log reads, or the text
    alone when nobody is known."""
    return f"{speaker}: {text}" if speaker else text
