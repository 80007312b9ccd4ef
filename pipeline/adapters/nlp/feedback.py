"""Pseudo-relevance feedback: the best hits of a search say what else the answer may mention.

A question about several things ("What does Maria do to relax?") is answered by memories that
share little with the question itself but something with each other. The terms that the best
first-round hits (the seeds) share, beyond the question's own, describe the topic the question
is about; a candidate that mentions them gets the ``feedback`` signal. It is the classic
query-expansion idea (Rocchio, RM3), applied to the candidates already gathered, so it costs
no extra round trip to Elasticsearch: it reads the content terms stored with each memory
(``pipeline.store.columns``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pipeline.adapters.nlp.stopwords import without_stopwords


def content_terms(lemmatized: str) -> list[str]:
    """The content words of a lemmatized text, lower-cased, once each, in order."""
    return list(dict.fromkeys(without_stopwords(lemmatized).casefold().split()))


def expansion_of(seeds: Sequence[Sequence[str]], query: str, count: int) -> list[str]:
    """Up to ``count`` terms of the ``seeds`` (each its ``content_terms``) that are not in the
    lemmatized ``query``: the ones most seeds share first, ties in order of first appearance
    (so the answer never depends on hashing)."""
    asked = set(content_terms(query))
    counts: Counter[str] = Counter()
    for seed in seeds:
        counts.update(t for t in seed if t not in asked)
    return [term for term, _ in counts.most_common(count)]


def share_of(mentioned: frozenset[str], terms: Sequence[str]) -> float:
    """The share of ``terms`` among a text's ``mentioned`` content terms, in [0, 1] (0 without
    terms)."""
    if not terms:
        return 0.0
    return len(mentioned.intersection(terms)) / len(terms)
