"""Phase 4: lemmatized text for BM25, and the normalized-text hash used for dedup."""

from __future__ import annotations

from pipeline.deps import Deps
from pipeline.models import md5_hex
from pipeline.nlp.lemmatize import normalize_for_hash
from pipeline.state import JobState


def lemmatize_facts(state: JobState, deps: Deps) -> JobState:
    """Fill ``state.lemmas`` and ``state.hashes`` (aligned with facts). CPU-bound."""
    lemmas = [deps.lemmatizer.lemmatize(fact.text) for fact in state.facts]
    hashes = [md5_hex(normalize_for_hash(fact.text)) for fact in state.facts]
    return state.with_(lemmas=lemmas, hashes=hashes)
