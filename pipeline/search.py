"""Hybrid search: vectors + BM25 + entities, fused per candidate.

For each query, three candidate lists are gathered inside the caller's scope and filters
(expired memories excluded unless asked for, inside the query):
- semantic: kNN over ``embedding`` (the filter inside the kNN clause, num_candidates well above k);
- bm25: the lemmatized query over ``text_lemmatized`` plus the raw query over ``text`` and
  over ``speaker`` (who said the memory);
- entity: entities found in the query → the scope's entity index (exact name, or an embedding
  at least as similar as the merge threshold) → their linked memories, damped for hub entities.
The union of the three is scored on every signal (cosine from the stored vectors, BM25 by an
ids-restricted query), so a keyword-only or entity-only hit competes on equal terms. Signals are
normalized to [0, 1] and fused with the weights of ``SearchConfig``, joined by two signals a
query may ask for: ``time`` (its ``observed_at`` near a period the query names) and ``dated``
(its text carries a time, for a "when" question). The fused score is then mixed with
``feedback`` (terms the best hits share) and ``hop`` (said by a person the query names, with
a second retrieval of what they said: ``pipeline.multihop``), optionally reranked; the reply
to the best hit, when it is a conversation's turn, is placed second (``pipeline.replies``), and
``threshold`` applies to the final score. Several queries are served by one msearch per round
trip.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pipeline.config import SearchConfig
from pipeline.currency import (
    Rivalry,
    asks_about_present,
    may_have_rivals,
    newer_first,
    past_asked_since,
)
from pipeline.errors import InvalidInputError
from pipeline.filters import translate_filters
from pipeline.fusion import Candidates, Timing, add_feedback, cosines
from pipeline.models import Scope, utcnow
from pipeline.multihop import HopPlan, mixed, plan_hop, read_hop, said_by
from pipeline.nlp.feedback import expansion_terms, feedback
from pipeline.nlp.stopwords import without_stopwords
from pipeline.nlp.timeexpr import asks_when, periods
from pipeline.phases.link import normalize_entity
from pipeline.protocols import Embedder, EntityExtractor, Lemmatizer
from pipeline.replies import followed_by_reply, reply_key
from pipeline.search_models import (
    Explain,
    SearchHit,
    SearchOptions,
    SearchQuery,
    SearchResult,
    Shards,
)
from pipeline.store.elastic import cosine_from_score, scope_filter
from pipeline.store.protocol import ServingStore
from pipeline.store.queries import (
    docs_body,
    hits_of,
    knn_body,
    not_expired,
    read_hits,
    reply_body,
    still_valid,
    validity,
    vectors_body,
    without_possessives,
)

Docs = dict[str, dict[str, Any]]  # a query's candidates' fields (and vectors read), by id

__all__ = [
    "Explain",
    "Reranker",
    "SearchHit",
    "SearchOptions",
    "SearchQuery",
    "Searcher",
]


class Reranker(Protocol):
    """Scores ``texts`` against ``query`` in [0, 1], one score per text, in order."""

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]: ...


@dataclass(frozen=True)
class Searcher:
    """Runs hybrid searches over a ``ServingStore`` with the given models."""

    store: ServingStore
    embedder: Embedder
    lemmatizer: Lemmatizer
    entities: EntityExtractor
    config: SearchConfig
    entity_similarity: float = 0.95
    reranker: Reranker | None = None
    clock: Callable[[], datetime] = utcnow

    def search(self, query: SearchQuery) -> list[SearchHit]:
        return self.search_many([query])[0]

    def search_many(self, queries: Sequence[SearchQuery]) -> list[list[SearchHit]]:
        """Several searches, batched: one msearch per round trip for all of them."""
        return [result.hits for result in self.search_many_reported(queries)]

    def search_reported(self, query: SearchQuery) -> SearchResult:
        return self.search_many_reported([query])[0]

    def search_many_reported(self, queries: Sequence[SearchQuery]) -> list[SearchResult]:
        """``search_many``, each with what the shards said: a shard that failed or a search
        that timed out makes its result ``partial`` (its hits are the best of what answered),
        which callers pass on instead of hiding."""
        for query in queries:
            self._check(query)
        vectors = self.embedder.embed([q.query for q in queries])
        filters = [self._filter(q) for q in queries]
        shards = [Shards() for _ in queries]
        found = self._first_round(queries, vectors, filters, shards)
        hops = [self._hop_plan(q, c) for q, c in zip(queries, found, strict=True)]
        docs, bm25 = self._second_round(queries, found, filters, hops, shards)
        ranked = [
            self._rank(q, v, c, d, b)
            for q, v, c, d, b in zip(queries, vectors, found, docs, bm25, strict=True)
        ]
        ranked = self._with_replies(queries, ranked, docs, filters, shards)
        ranked = self._newer_first(queries, ranked, docs)
        return [
            SearchResult(self._cut(q, hits), s)
            for q, hits, s in zip(queries, ranked, shards, strict=True)
        ]

    # -- validation and filters -------------------------------------------------------------

    def _check(self, query: SearchQuery) -> None:
        if query.top_k > self.config.max_top_k:
            raise InvalidInputError(f"top_k is at most {self.config.max_top_k}", field="top_k")
        if query.rerank and self.reranker is None:
            raise InvalidInputError(
                "rerank was asked for but no reranker is configured", field="rerank"
            )

    def _filter(self, query: SearchQuery) -> list[dict[str, Any]]:
        clauses = [*scope_filter(query.scope), *translate_filters(query.filters)]
        if not query.show_expired:
            clauses.append(not_expired())
        return clauses + self._validity(query)

    def _validity(self, query: SearchQuery) -> list[dict[str, Any]]:
        """Which memories by validity: ``as_of`` and ``include_replaced`` as asked; by default
        those true now, and for a question about a past period ("in 2022") those still true
        at its start or later, so what was replaced since can answer it."""
        if query.as_of is None and not query.include_replaced:
            since = past_asked_since(query.query, query.reference_time or self.clock())
            if since is not None:
                return [still_valid(since)]
        return validity(query.as_of, query.include_replaced)

    def _fetch(self, query: SearchQuery) -> int:
        return max(self._pool(query), self.config.candidates_per_signal)

    def _pool(self, query: SearchQuery) -> int:
        """How many fused hits the query needs: top_k, or the reranker's candidates."""
        return max(query.top_k, self.config.rerank_candidates) if query.rerank else query.top_k

    # -- round 1: the three candidate lists ---------------------------------------------------

    def _first_round(
        self,
        queries: Sequence[SearchQuery],
        vectors: list[list[float]],
        filters: list[list[dict[str, Any]]],
        shards: list[Shards],
    ) -> list[Candidates]:
        searches: list[dict[str, Any]] = []
        for query, vector, clauses in zip(queries, vectors, filters, strict=True):
            size = self._fetch(query)
            searches += [
                knn_body(vector, clauses, size),
                self._bm25_body(query.query, clauses, size),
            ]
        scopes = [q.scope for q in queries for _ in range(2)]
        responses = self.store.search_memories(searches, "hybrid search", scopes=scopes)
        found = []
        for i, query in enumerate(queries):
            for response in responses[2 * i : 2 * i + 2]:
                shards[i] = shards[i].worst(Shards.of(response))
            candidates = Candidates()
            read_hits(
                responses[2 * i], candidates.semantic, candidates.rank_semantic, cosine_from_score
            )
            read_hits(responses[2 * i + 1], candidates.bm25, candidates.rank_bm25, float)
            self._entity_candidates(query, candidates)
            found.append(candidates)
        return found

    def _bm25_body(self, text: str, clauses: list[dict[str, Any]], size: int) -> dict[str, Any]:
        """BM25 over the raw and the lemmatized text and over the speaker's name, function
        words left out of the query (unless nothing else is left)."""
        raw = without_stopwords(text) or text
        lemmas = without_stopwords(self.lemmatizer.lemmatize(text)) or self.lemmatizer.lemmatize(
            text
        )
        should: list[dict[str, Any]] = [
            {"match": {"text": {"query": raw}}},
            {"match": {"speaker": {"query": without_possessives(raw)}}},
        ]
        if lemmas:
            should.append({"match": {"text_lemmatized": {"query": lemmas}}})
        return {
            "size": size,
            "_source": False,
            "query": {"bool": {"should": should, "minimum_should_match": 1, "filter": clauses}},
        }

    def _entity_candidates(self, query: SearchQuery, candidates: Candidates) -> None:
        """Memories linked to the query's entities, weighted 1/log2(2 + links): an entity linked
        to everything (the user's own name, say) says little about any one memory. A hub (more
        links than ``entity_links_per_entity``) only boosts what kNN or BM25 found: its links
        in stored order are not a ranking, so they would be arbitrary extra candidates."""
        found = self.entities.extract([query.query])[0]
        names = list(dict.fromkeys(normalize_entity(e.text) for e in found))
        if not names:
            return
        pool = candidates.semantic.keys() | candidates.bm25.keys()
        for links in self._entity_links(query.scope, names):
            weight = 1.0 / math.log2(2 + len(links))
            hub = len(links) > self.config.entity_links_per_entity
            for memory in pool.intersection(links) if hub else links:
                candidates.entity[memory] = candidates.entity.get(memory, 0.0) + weight
        ordered = sorted(candidates.entity, key=lambda m: -candidates.entity[m])
        candidates.rank_entity.update({m: i + 1 for i, m in enumerate(ordered)})
        top = max(candidates.entity.values(), default=0.0)
        for memory in candidates.entity:
            candidates.entity[memory] /= max(top, 1.0)

    def _entity_links(self, scope: Scope, names: list[str]) -> list[list[str]]:
        """For each query entity: the linked memories of the scope's matching entity, if any."""
        by_name = self.store.entities_by_name(scope, names)
        missing = [n for n in names if n not in by_name]
        if missing:
            vectors = self.embedder.embed(missing)
            for name, near in zip(
                missing, self.store.nearest_entities(scope, vectors), strict=True
            ):
                if near is not None and near[1] >= self.entity_similarity:
                    by_name[name] = near[0]
        ids = list(set(by_name.values()))
        return [links for links in self.store.entity_links(scope, ids).values()]

    # -- round 2: every candidate scored on every signal --------------------------------------

    def _second_round(
        self,
        queries: Sequence[SearchQuery],
        found: list[Candidates],
        filters: list[list[dict[str, Any]]],
        hops: Sequence[HopPlan | None],
        shards: list[Shards],
    ) -> tuple[list[dict[str, dict[str, Any]]], list[dict[str, float]]]:
        """Per query, three searches: every candidate's fields (filters re-applied); the
        vectors of the candidates the kNN list did not score (and, for a question about the
        present, of the kNN list's best: see ``_newer_first``); the BM25 score of those the BM25
        list did not score (an ids-restricted query gives the same scores as the full one).
        A query's hop adds its search after all of these (see ``pipeline.multihop``)."""
        searches: list[dict[str, Any]] = []
        for query, candidates, clauses in zip(queries, found, filters, strict=True):
            ids = candidates.ids()
            unscored = [i for i in ids if i not in candidates.semantic]
            unscored += self._rival_vectors(query, candidates)
            no_bm25 = [i for i in ids if i not in candidates.bm25]
            bm25 = self._bm25_body(
                query.query, [*clauses, {"ids": {"values": no_bm25}}], len(no_bm25) or 1
            )
            searches += [docs_body(ids, clauses), vectors_body(unscored, clauses), bm25]
        for hop, clauses in zip(hops, filters, strict=True):
            searches += [hop.search(clauses)] if hop else []
        named = any(hops)  # a hop reads the question's BM25 score of its matches
        scopes = [q.scope for q in queries for _ in range(3)]
        scopes += [q.scope for q, hop in zip(queries, hops, strict=True) if hop]
        responses = self.store.search_memories(
            searches, "hybrid search (scoring)", named=named, scopes=scopes
        )
        hop_responses = iter(responses[3 * len(found) :])
        docs, bm25_scores = [], []
        for i, (candidates, hop) in enumerate(zip(found, hops, strict=True)):
            for response in responses[3 * i : 3 * i + 3]:
                shards[i] = shards[i].worst(Shards.of(response))
            fields, vectors, scored = (hits_of(responses[3 * i + k]) for k in range(3))
            embeddings = {h["_id"]: h["_source"].get("embedding") for h in vectors}
            docs.append(
                {h["_id"]: {**h["_source"], "embedding": embeddings.get(h["_id"])} for h in fields}
            )
            bm25_scores.append(
                {**candidates.bm25, **{h["_id"]: float(h["_score"]) for h in scored}}
            )
            if hop:
                hop_response = next(hop_responses)
                shards[i] = shards[i].worst(Shards.of(hop_response))
                reached = read_hop(hits_of(hop_response))
                docs[-1].update(reached.docs)
                bm25_scores[-1].update(reached.bm25)
                candidates.hop.update(
                    {m: float(said_by(d.get("actor_id"), hop.people)) for m, d in docs[-1].items()}
                )
        return docs, bm25_scores

    def _hop_plan(self, query: SearchQuery, candidates: Candidates) -> HopPlan | None:
        """The query's second hop (pipeline.multihop), or None when it is off."""
        if not query.hop or self.config.weight_hop <= 0:
            return None
        return plan_hop(
            [e.text for e in self.entities.extract([query.query])[0]],
            self._bm25_body(query.query, [], 1)["query"]["bool"],
            candidates.ids(),
            people=self.config.hop_people,
            size=self.config.hop_candidates,
        )

    # -- fusion ---------------------------------------------------------------------------------

    def _rank(
        self,
        query: SearchQuery,
        vector: list[float],
        candidates: Candidates,
        docs: dict[str, dict[str, Any]],
        bm25: dict[str, float],
    ) -> list[SearchHit]:
        """Fuse the signals of every candidate still visible (filters re-applied in round 2)."""
        ids = [i for i in candidates.ids() if i in docs]
        if not ids:
            return []
        computed = cosines(vector, [docs[i].get("embedding") for i in ids])
        semantic = [
            max(0.0, candidates.semantic[i]) if i in candidates.semantic else computed[n]
            for n, i in enumerate(ids)
        ]
        top_bm25 = max(bm25.values(), default=0.0)
        timing = self._timing(query)
        hits = [
            self._hit(
                i,
                docs[i],
                semantic=semantic[n],
                bm25_raw=bm25.get(i, 0.0),
                top_bm25=top_bm25,
                candidates=candidates,
                timing=timing,
            )
            for n, i in enumerate(ids)
        ]
        hits = self._fed_back(query, hits, docs)
        hits = self._hopped(hits, candidates.hop)
        hits = self._reranked(query, hits)
        hits.sort(key=lambda h: -h.score)
        return hits

    def _cut(self, query: SearchQuery, hits: list[SearchHit]) -> list[SearchHit]:
        """The ranked hits at or above ``threshold``, at most ``top_k``, explained if asked."""
        if query.threshold is not None:
            hits = [h for h in hits if h.score >= query.threshold]
        hits = hits[: query.top_k]
        return hits if query.explain else [h.model_copy(update={"explain": None}) for h in hits]

    # -- the newer statement first --------------------------------------------------------------

    def _newer_first(
        self, queries: Sequence[SearchQuery], ranked: list[list[SearchHit]], docs: list[Docs]
    ) -> list[list[SearchHit]]:
        """For each question about the present, its best hits with the older of two rivals
        below the newer (``pipeline.currency``), by the vectors round 2 read: those of every
        candidate outside the kNN list's best, and of its best ``_pool`` (a best hit whose
        vector is not read has no rival; reading them all would cost every search more)."""
        rivalry = self._rivalry()
        out = list(ranked)
        for i, query in enumerate(queries):
            pool = self._pool(query)
            if self._present(query) and may_have_rivals(out[i][:pool], docs[i], rivalry):
                vectors = {m: d["embedding"] for m, d in docs[i].items() if d.get("embedding")}
                out[i] = newer_first(out[i][:pool], docs[i], vectors, rivalry) + out[i][pool:]
        return out

    def _rivalry(self) -> Rivalry:
        return Rivalry(self.config.rival_similarity, self.config.rival_score_ratio)

    def _present(self, query: SearchQuery) -> bool:
        """The newer-first rule is on and ``query`` is about the present (as of ``as_of``)."""
        reference = query.as_of or query.reference_time or self.clock()
        return self.config.rival_score_ratio < 1 and asks_about_present(query.query, reference)

    def _rival_vectors(self, query: SearchQuery, candidates: Candidates) -> list[str]:
        """The kNN list's best, whose vectors the newer-first rule compares (none when it will
        not run for ``query``)."""
        if not self._present(query):
            return []
        pool = self._pool(query)
        return [m for m, rank in candidates.rank_semantic.items() if rank <= pool]

    # -- the reply to the best hit --------------------------------------------------------------

    def _with_replies(
        self,
        queries: Sequence[SearchQuery],
        ranked: list[list[SearchHit]],
        docs: list[dict[str, dict[str, Any]]],
        filters: list[list[dict[str, Any]]],
        shards: list[Shards],
    ) -> list[list[SearchHit]]:
        """Each query's best hit followed by its reply (``pipeline.replies``): one more round
        trip, for the queries whose best hit is a verbatim message, when the reply is on."""
        asked: list[tuple[int, dict[str, Any]]] = []
        for i, (query, hits) in enumerate(zip(queries, ranked, strict=True)):
            # top_k 1 keeps only the best hit: the reply would be fetched to be cut off
            if not (query.reply and self.config.reply and hits and query.top_k > 1):
                continue
            key = reply_key(docs[i].get(hits[0].id, {}))
            if key is not None:
                asked.append((i, reply_body(key, filters[i])))
        if not asked:
            return ranked
        responses = self.store.search_memories(
            [body for _, body in asked],
            "hybrid search (reply)",
            scopes=[queries[i].scope for i, _ in asked],
        )
        ranked = list(ranked)
        for (i, _), response in zip(asked, responses, strict=True):
            shards[i] = shards[i].worst(Shards.of(response))
            found = hits_of(response)
            if found:
                ranked[i] = followed_by_reply(
                    ranked[i], found[0]["_id"], found[0]["_source"], queries[i].explain
                )
        return ranked

    def _hit(
        self,
        memory: str,
        source: dict[str, Any],
        *,
        semantic: float,
        bm25_raw: float,
        top_bm25: float,
        candidates: Candidates,
        timing: Timing,
    ) -> SearchHit:
        weights = self.config
        bm25 = bm25_raw / top_bm25 if top_bm25 > 0 else 0.0
        entity = candidates.entity.get(memory, 0.0)
        signals = [
            (weights.weight_semantic, semantic),
            (weights.weight_bm25, bm25),
            (weights.weight_entity, entity),
        ]
        time, dated = timing.signals(source)
        if time is not None:
            signals.append((weights.weight_time, time))
        if dated is not None:
            signals.append((weights.weight_dated, dated))
        total = sum(weight for weight, _ in signals)
        fused = sum(weight * value for weight, value in signals) / total if total > 0 else 0.0
        explain = Explain(
            semantic=round(semantic, 6),
            bm25=round(bm25, 6),
            bm25_raw=round(bm25_raw, 6),
            entity=round(entity, 6),
            time=None if time is None else round(time, 6),
            dated=None if dated is None else round(dated, 6),
            fused=round(fused, 6),
            rank_semantic=candidates.rank_semantic.get(memory),
            rank_bm25=candidates.rank_bm25.get(memory),
            rank_entity=candidates.rank_entity.get(memory),
        )
        return SearchHit.from_source(memory, source, score=round(fused, 6), explain=explain)

    def _fed_back(
        self, query: SearchQuery, hits: list[SearchHit], docs: dict[str, dict[str, Any]]
    ) -> list[SearchHit]:
        """Every hit's score mixed with its ``feedback``: how many of the terms shared by the
        best hits it mentions (see ``pipeline.nlp.feedback``). Off at weight 0, and when there
        are no more hits than seeds (nothing to lift)."""
        weight, seeds = self.config.weight_feedback, self.config.feedback_seeds
        if weight <= 0 or len(hits) <= seeds:
            return hits
        lemmas = {h.id: str(docs[h.id].get("text_lemmatized", "")) for h in hits}
        best = sorted(hits, key=lambda h: -h.score)[:seeds]
        terms = expansion_terms(
            [lemmas[h.id] for h in best],
            self.lemmatizer.lemmatize(query.query),
            self.config.feedback_terms,
        )
        for hit in hits:  # built by this search and shared with nobody: updated in place
            add_feedback(hit, feedback(lemmas[hit.id], terms), weight)
        return hits

    def _hopped(self, hits: list[SearchHit], signal: Mapping[str, float]) -> list[SearchHit]:
        """Every hit's score mixed with its ``hop`` signal (pipeline.multihop) when the query
        had a hop; in place, as feedback."""
        if not signal:
            return hits
        for hit in hits:
            value = signal.get(hit.id, 0.0)
            hit.score = round(mixed(hit.score, value, self.config.weight_hop), 6)
            if hit.explain is not None:
                hit.explain.hop = round(value, 6)
                hit.explain.fused = hit.score
        return hits

    def _timing(self, query: SearchQuery) -> Timing:
        reference = query.reference_time or self.clock()
        return Timing(
            periods=periods(query.query, reference) if self.config.weight_time > 0 else [],
            when=asks_when(query.query) and self.config.weight_dated > 0,
        )

    def _reranked(self, query: SearchQuery, hits: list[SearchHit]) -> list[SearchHit]:
        if not query.rerank or self.reranker is None:
            return hits
        hits = sorted(hits, key=lambda h: -h.score)[: self._pool(query)]
        scores = self.reranker.rerank(query.query, [h.memory for h in hits])
        return [
            h.model_copy(
                update={
                    "score": round(s, 6),
                    "explain": h.explain.model_copy(update={"rerank": round(s, 6)})
                    if h.explain
                    else None,
                }
            )
            for h, s in zip(hits, scores, strict=True)
        ]
