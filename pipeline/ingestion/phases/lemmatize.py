"""Phase 4: lemmatized text for BM25, and the normalized-text hash used for dedup."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.adapters.nlp.lemmatize import normalize_for_hash
from pipeline.domain.models import md5_hex
from pipeline.domain.state import JobState
from pipeline.ingestion.batch import shared, single
from pipeline.ingestion.deps import Deps


def lemmatize_facts_of(states: Sequence[JobState], deps: Deps) -> list[JobState]:
    """Fill ``lemmas`` and ``hashes`` (aligned with facts) of each job. CPU-bound."""
    return [
        state.with_(
            lemmas=[deps.lemmatizer.lemmatize(fact.text) for fact in state.facts],
            hashes=[md5_hex(normalize_for_hash(fact.text)) for fact in state.facts],
        )
        for state in states
    ]


lemmatize_facts_batch = shared(lemmatize_facts_of)
lemmatize_facts = single(lemmatize_facts_batch)
