"""Pseudo-relevance feedback: the best hits of a search say what else the answer may mention.

A question about several things ("What does Maria do to relax?") is answered by memories that
share little with the question itself but something with each other. The terms that the best
first-round hits (the seeds) share, beyond the question's own, describe the topic the question
is about; a candidate that mentions them gets the ``feedback`` signal. It is the classic
query-expansion idea (Rocchio, RM3), applied to the candidates already gathered, so it costs
no extra round trip to Elasticsearch: it reads the lemmatized text stored with each memory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from pipeline.adapters.nlp.stopwords import without_stopwords


def content_terms(lemmatized: str) -> list[str]:
    """The content words of a lemmatized text, lower-cased, once each, in order."""
    return list(dict.fromkeys(without_stopwords(lemmatized).casefold().split()))


@lru_cache(maxsize=8192)
def _term_set(lemmatized: str) -> frozenset[str]:
    """``content_terms`` as a set, kept per process: a scope's memories come back search
    after search, and each search reads the terms of every candidate."""
    return frozenset(content_terms(lemmatized))


def expansion_terms(seeds: Sequence[str], query: str, count: int) -> list[str]:
    """Up to ``count`` terms of the lemmatized ``seeds`` that are not in the lemmatized
    ``query``: the ones most seeds share first, ties in order of first appearance (so the
    answer never depends on hashing)."""
    asked = set(content_terms(query))
    counts: Counter[str] = Counter()
    for seed in seeds:
        counts.update(t for t in content_terms(seed) if t not in asked)
    return [term for term, _ in counts.most_common(count)]


def feedback(lemmatized: str, terms: Sequence[str]) -> float:
    """The share of ``terms`` that the lemmatized text mentions, in [0, 1] (0 without terms)."""
    if not terms:
        return 0.0
    return len(_term_set(lemmatized).intersection(terms)) / len(terms)
