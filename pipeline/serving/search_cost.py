"""What a search costs beyond a plain one, in units of costly search work.

A plain search (a query in a scope, a few equality or range conditions, the default top_k) is
bounded by the searches-per-second limit alone. Some searches ask for more work from the
resources every tenant shares (the API process, Elasticsearch's search threads, the
reranker): substring conditions, long in/nin lists, a reranker pass, many hits. A tenant's
units per second are bounded by their own budget (``MEMQ_API_SEARCH_COST_PER_S``,
``api/limits.py``), so its costly searches per second are bounded whatever else it sends.

Units:
- 1 per substring condition on a keyword or metadata field, 1 per whole 512 in/nin
  values (``pipeline.store.filters.filter_cost``): the costliest filter allowed costs 8;
- 1 for ``rerank`` (a call to the reranker over its candidates);
- 1 per 100 fused hits the search builds beyond the first 100 (``top_k``, or the reranker's
  candidates): a top_k of 1,000 costs 9.

A plain search costs 0.
"""

from __future__ import annotations

from pipeline.serving.search_models import SearchOptions
from pipeline.store.filters import filter_cost

HITS_PER_UNIT = 100
"""Fused hits a search may build at no cost; each further ``HITS_PER_UNIT`` costs one unit."""


def search_cost(query: SearchOptions, rerank_candidates: int) -> int:
    """The units of costly search work ``query`` takes (0 for a plain search);
    ``rerank_candidates`` is how many fused hits a reranked search builds at least."""
    hits = max(query.top_k, rerank_candidates) if query.rerank else query.top_k
    return (
        filter_cost(query.filters) + (1 if query.rerank else 0) + max(0, hits - 1) // HITS_PER_UNIT
    )
