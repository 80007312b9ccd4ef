"""Hybrid search: vectors + BM25 + entities, fused per candidate.

For each query, three candidate lists are gathered inside the caller's scope and filters
(expired memories excluded unless asked for, inside the query):
- semantic: kNN over ``embedding`` (the filter inside the kNN clause, num_candidates well above k);
- bm25: the lemmatized query over ``text_lemmatized`` plus the raw query over ``text`` and
  over ``speaker`` (who said the memory);
- entity: entities found in the query → the scope's entity index (exact name, or an embedding
  at least as similar as the merge threshold) → their linked memories, damped for hub entities.
The union of the three is scored on every signal (cosine from the stored vectors, read as
bytes with the BM25 list's hits; BM25 read with the kNN list's hits, by a rescore that changes
nothing), so a keyword-only or entity-only hit competes on equal terms. Signals are
normalized to [0, 1] and fused with the weights of ``SearchConfig``, joined by two signals a
query may ask for: ``time`` (its ``observed_at`` near a period the query names) and ``dated``
(its text carries a time, for a "when" question). The fused score is then mixed with
``feedback`` (terms the best hits share) and ``hop`` (said by a person the query names, with
a second retrieval of what they said: ``pipeline.serving.multihop``), optionally reranked; the reply
to the best hit, when it is a conversation's turn, is placed second (``pipeline.serving.replies``),
and ``threshold`` applies to the final score. Several queries are served by one msearch per round
trip: one for every candidate list with what ranking needs of it, read from columns (doc
values, ``pipeline.store.columns``) instead of sources; only when a query needs it, one for
the fields, vector and BM25 of a candidate only the entities found; and a last, small one for
what is shown once ranked (the sources of the best, the reply to the best hit, the
newer-first rule's vectors).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pipeline.adapters.embedding.versioned import refresh_embedder
from pipeline.adapters.nlp.feedback import expansion_of, share_of
from pipeline.adapters.nlp.stopwords import without_stopwords
from pipeline.adapters.nlp.timeexpr import asks_when, periods
from pipeline.config import SearchConfig
from pipeline.domain.models import utcnow
from pipeline.domain.protocols import Embedder, Entity, EntityExtractor, Lemmatizer
from pipeline.errors import EmbedderChangedError, InvalidInputError
from pipeline.ingestion.phases.link import normalize_entity
from pipeline.serving.currency import (
    Rivalry,
    asks_about_present,
    may_have_rivals,
    newer_first,
    past_asked_since,
)
from pipeline.serving.fusion import (
    Candidates,
    Scored,
    Timing,
    add_feedback,
    cosines,
    on_similarity_scale,
    with_ranks,
)
from pipeline.serving.multihop import HopPlan, mixed, named_score, plan_hop, read_hop, said_by
from pipeline.serving.replies import Replies, Turn, followed_by_reply, reply_key
from pipeline.serving.rounds import Key, Round
from pipeline.serving.search_models import (
    Explain,
    SearchHit,
    SearchOptions,
    SearchQuery,
    SearchResult,
    Shards,
)
from pipeline.store.columns import terms_of
from pipeline.store.elastic import cosine_from_score, scope_filter
from pipeline.store.filters import translate_filters
from pipeline.store.protocol import ServingStore
from pipeline.store.queries import (
    RANKED_FIELDS,
    also_scored_by,
    docs_body,
    entities_named_body,
    hits_of,
    knn_body,
    nearest_entity_body,
    not_expired,
    ranked_doc,
    read_hits,
    replies_body,
    reply_body,
    still_valid,
    validity,
    vector_of,
    vectors_body,
    without_possessives,
)

Docs = dict[str, dict[str, Any]]  # a query's candidates' fields (and vectors read), by id

BM25_NAME = "bm25"
"""The name of the question's BM25 query scoring the kNN list's hits in round 1."""


def entity_of(hit: Mapping[str, Any]) -> tuple[str, list[str]]:
    """An entity hit's id and the memories it is linked to."""
    return hit["_id"], list(hit["_source"].get("linked_memory_ids", []))


__all__ = [
    "Explain",
    "Reranker",
    "SearchHit",
    "SearchOptions",
    "SearchQuery",
    "Searcher",
]


@dataclass(frozen=True)
class Batch:
    """The searches of one call: the queries, each one's filter clauses, and what each
    one's shards said so far (updated as the round trips answer)."""

    queries: Sequence[SearchQuery]
    filters: list[list[dict[str, Any]]]
    shards: list[Shards]
    questions: list[dict[str, Any]]  # each query's BM25 query (see ``Searcher._question``)


@dataclass(frozen=True)
class Ranking:
    """One query's candidates ranked, best first: ``best``, as many as the search may show
    (whose sources are read to make them hits), and ``scored``, every candidate still in the
    ranking by id, to make a hit of one found lower when it moves up (a reply to the best
    hit). A reranked search has only ``best``."""

    best: list[Scored]
    scored: Mapping[str, Scored]

    def including(
        self, hits: list[SearchHit], memory_id: str, source: dict[str, Any]
    ) -> list[SearchHit]:
        """``hits``, with the candidate ``memory_id`` made a hit at the end (from its
        ``source``) when it is one further down."""
        found = self.scored.get(memory_id)
        if found is None or any(h.id == memory_id for h in hits):
            return hits
        return [*hits, found.hit(source)]


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
        which callers pass on instead of hiding. A search that meets an index of another
        vector size (the indices moved to another embedder a moment ago) is made again with
        the embedder the index names now."""
        for query in queries:
            self._check(query)
        try:
            return self._search_many(queries)
        except EmbedderChangedError:
            refresh_embedder(self.embedder)
            return self._search_many(queries)

    def _search_many(self, queries: Sequence[SearchQuery]) -> list[SearchResult]:
        vectors = self.embedder.embed([q.query for q in queries])
        batch = Batch(
            queries,
            [self._filter(q) for q in queries],
            [Shards() for _ in queries],
            [self._question(q.query) for q in queries],
        )
        named = self.entities.extract([q.query for q in queries])
        hops = [
            self._hop_plan(q, question, [e.text for e in n])
            for q, question, n in zip(queries, batch.questions, named, strict=True)
        ]
        found, docs, bm25 = self._first_round(batch, vectors, named, hops)
        self._second_round(batch, found, docs, bm25, hops)
        rankings = [
            self._rank(q, v, c, d, b)
            for q, v, c, d, b in zip(queries, vectors, found, docs, bm25, strict=True)
        ]
        replies = self._shown_round(batch, rankings, found, docs)
        hits = [self._hits(q, r, d) for q, r, d in zip(queries, rankings, docs, strict=True)]
        ranked = self._with_replies(batch, rankings, hits, docs, replies)
        ranked = self._newer_first(queries, ranked, found, docs)
        return [
            SearchResult(self._cut(q, hits), s)
            for q, hits, s in zip(queries, ranked, batch.shards, strict=True)
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
        batch: Batch,
        vectors: list[list[float]],
        named: list[list[Entity]],
        hops: Sequence[HopPlan | None],
    ) -> tuple[list[Candidates], list[Docs], list[dict[str, float]]]:
        """One round trip for every query's candidates with what ranking needs of them, read
        from columns (``pipeline.store.columns``), not from their sources:
        - the kNN list, each hit with its columns and its BM25 score (a rescore that changes
          nothing, read back by name);
        - the BM25 list, each hit with its columns and its vector (as bytes);
        - the scope's entities the query names, with their links;
        - the hop, when the query names people (``pipeline.serving.multihop``).
        A name no entity has is looked for by its vector, in one more round trip, only then.
        Returns each query's candidates, their columns (with the vectors read) and the BM25
        score of each candidate read so far; a memory without columns is left unread."""
        names = [list(dict.fromkeys(normalize_entity(e.text) for e in n)) for n in named]
        first = Round()
        queries, shards = batch.queries, batch.shards
        for i, (query, vector, clauses) in enumerate(
            zip(queries, vectors, batch.filters, strict=True)
        ):
            size = self._fetch(query)
            question = batch.questions[i]
            knn = also_scored_by(knn_body(vector, clauses, size, True), question, BM25_NAME)
            first.add((i, "knn"), "memories", query.scope, knn)
            bm25 = self._bm25_body(question, clauses, size, fields=True)
            first.add((i, "bm25"), "memories", query.scope, bm25)
            if names[i]:
                body = entities_named_body(names[i], scope_filter(query.scope))
                first.add((i, "entities"), "entities", query.scope, body)
            hop = hops[i]
            if hop is not None:
                first.add((i, "hop"), "memories", query.scope, hop.search(clauses))
        answered = first.run(self.store, "hybrid search", named=True)
        links = self._entity_links(queries, names, answered)
        found, docs, scores = [], [], []
        for i in range(len(queries)):
            knn, bm25 = answered[(i, "knn")], answered[(i, "bm25")]
            shards[i] = shards[i].worst(Shards.of(knn)).worst(Shards.of(bm25))
            candidates = Candidates()
            read_hits(knn, candidates.semantic, candidates.rank_semantic, cosine_from_score)
            read_hits(bm25, candidates.bm25, candidates.rank_bm25, float)
            self._entity_candidates(candidates, links[i])
            read: Docs = {}
            for response in (knn, bm25):
                for hit in hits_of(response):
                    doc = ranked_doc(hit)
                    if doc is not None:  # else it is read in round 2, as an unread candidate
                        read.setdefault(hit["_id"], {}).update(doc)
            known = {h["_id"]: named_score(h, BM25_NAME) for h in hits_of(knn)}
            known.update(candidates.bm25)
            if hops[i] is not None:
                response = answered[(i, "hop")]
                shards[i] = shards[i].worst(Shards.of(response))
                self._hopped_to(candidates, read, known, response)
            found.append(candidates)
            docs.append(read)
            scores.append(known)
        return found, docs, scores

    @staticmethod
    def _hopped_to(
        candidates: Candidates, read: Docs, known: dict[str, float], response: dict[str, Any]
    ) -> None:
        """The hop's answer added to one query's reads (``read``) and BM25 scores (``known``);
        a memory it reached without columns becomes a candidate to read in round 2."""
        reached = read_hop(hits_of(response))
        for memory, doc in reached.docs.items():
            read.setdefault(memory, {}).update(doc)
        for memory in reached.bm25.keys() - reached.docs.keys():
            candidates.hop.setdefault(memory, 0.0)
        known.update(reached.bm25)

    def _question(self, text: str) -> dict[str, Any]:
        """The question's BM25 query (a ``bool``'s body, no filter): over the raw and the
        lemmatized text and over the speaker's name, function words left out of the query
        (unless nothing else is left)."""
        raw = without_stopwords(text) or text
        lemmatized = self.lemmatizer.lemmatize(text)
        lemmas = without_stopwords(lemmatized) or lemmatized
        should: list[dict[str, Any]] = [
            {"match": {"text": {"query": raw}}},
            {"match": {"speaker": {"query": without_possessives(raw)}}},
        ]
        if lemmas:
            should.append({"match": {"text_lemmatized": {"query": lemmas}}})
        return {"should": should, "minimum_should_match": 1}

    @staticmethod
    def _bm25_body(
        question: dict[str, Any], clauses: list[dict[str, Any]], size: int, fields: bool = False
    ) -> dict[str, Any]:
        """The ``size`` best memories within ``clauses`` by the question's BM25 query; with
        ``fields``, each with what ranking reads of it (``RANKED_FIELDS``: its columns and its
        vector), not its source."""
        return {
            "size": size,
            "_source": False,
            **({"docvalue_fields": RANKED_FIELDS} if fields else {}),
            "query": {"bool": {**question, "filter": clauses}},
        }

    def _entity_candidates(self, candidates: Candidates, links: list[list[str]]) -> None:
        """Memories linked to the query's entities (``links``: one list per entity), weighted
        1/log2(2 + links): an entity linked to everything (the user's own name, say) says
        little about any one memory. A hub (more links than ``entity_links_per_entity``) only
        boosts what kNN or BM25 found: its links in stored order are not a ranking, so they
        would be arbitrary extra candidates."""
        pool = candidates.semantic.keys() | candidates.bm25.keys()
        for linked in links:
            weight = 1.0 / math.log2(2 + len(linked))
            hub = len(linked) > self.config.entity_links_per_entity
            boosted = dict.fromkeys(m for m in linked if m in pool) if hub else linked
            for memory in boosted:  # in the links' stored order: ties rank the same each time
                candidates.entity[memory] = candidates.entity.get(memory, 0.0) + weight
        ordered = sorted(candidates.entity, key=lambda m: -candidates.entity[m])
        candidates.rank_entity.update({m: i + 1 for i, m in enumerate(ordered)})
        top = max(candidates.entity.values(), default=0.0)
        for memory in candidates.entity:
            candidates.entity[memory] /= max(top, 1.0)

    def _entity_links(
        self,
        queries: Sequence[SearchQuery],
        names: list[list[str]],
        answered: Mapping[Key, dict[str, Any]],
    ) -> list[list[list[str]]]:
        """Per query, the linked memories of each scope entity its names match: by name
        (answered in round 1), else the nearest entity at least ``entity_similarity`` alike
        (every query's missing names embedded in one call, looked for in one round trip)."""
        matched: list[dict[str, tuple[str, list[str]]]] = []  # name -> (entity, its links)
        for i, wanted in enumerate(names):
            hits = hits_of(answered[(i, "entities")]) if wanted else []
            matched.append({h["_source"]["normalized"]: entity_of(h) for h in hits})
        missing = [(i, n) for i, wanted in enumerate(names) for n in wanted if n not in matched[i]]
        if missing:
            near = Round()
            vectors = self.embedder.embed([name for _, name in missing])
            for k, ((i, _), vector) in enumerate(zip(missing, vectors, strict=True)):
                clauses = scope_filter(queries[i].scope)
                body = nearest_entity_body(vector, clauses, links=True)
                near.add((k, "near"), "entities", queries[i].scope, body)
            nearest = near.run(self.store, "search similar entities")
            for k, (i, name) in enumerate(missing):
                hits = hits_of(nearest[(k, "near")])
                if hits and cosine_from_score(hits[0]["_score"]) >= self.entity_similarity:
                    matched[i][name] = entity_of(hits[0])
        return [list(dict(m.values()).values()) for m in matched]

    # -- round 2: what ranking needs that the first did not say --------------------------------

    def _second_round(
        self,
        batch: Batch,
        found: list[Candidates],
        docs: list[Docs],
        bm25: list[dict[str, float]],
        hops: Sequence[HopPlan | None],
    ) -> None:
        """One round trip, only when some query needs it, for what round 1 did not say of a
        candidate that ranking needs: the fields of those only the entities found or without
        columns (filters re-applied); the vectors of those neither the kNN list scored nor a
        read brought; the BM25 score of those without one (an ids-restricted query gives the
        same scores as the full one). Fills ``docs`` and ``bm25``."""
        second, queries = Round(), batch.queries
        for i, (query, candidates, clauses) in enumerate(
            zip(queries, found, batch.filters, strict=True)
        ):
            for kind, body in self._scoring(
                candidates, docs[i], bm25[i], clauses, question=batch.questions[i]
            ):
                second.add((i, kind), "memories", query.scope, body)
        answered = second.run(self.store, "hybrid search (scoring)")
        self._read_answers(batch, answered, docs, bm25)
        for candidates, read_docs, hop in zip(found, docs, hops, strict=True):
            if hop is not None:
                self._mark_hop(candidates, read_docs, hop)

    def _read_answers(
        self,
        batch: Batch,
        answered: Mapping[Key, dict[str, Any]],
        docs: list[Docs],
        bm25: list[dict[str, float]] | None = None,
    ) -> list[dict[str, dict[str, Any]]]:
        """Each query's answers of a round trip after the first, by kind: the fields read
        (``docs``) and vectors (``vectors``) go into ``docs``, the BM25 scores (``bm25``) into
        ``bm25``; the shards' word is kept."""
        out: list[dict[str, dict[str, Any]]] = []
        for i in range(len(batch.queries)):
            got = {kind: response for (at, kind), response in answered.items() if at == i}
            for response in got.values():
                batch.shards[i] = batch.shards[i].worst(Shards.of(response))
            hits = {kind: hits_of(response) for kind, response in got.items()}
            for h in hits.get("docs", []):
                docs[i].setdefault(h["_id"], {}).update(h["_source"])
            for h in hits.get("vectors", []):
                if h["_id"] in docs[i]:
                    docs[i][h["_id"]]["embedding"] = vector_of(h)
            if bm25 is not None:
                bm25[i].update({h["_id"]: float(h["_score"]) for h in hits.get("bm25", [])})
            out.append(got)
        return out

    def _scoring(
        self,
        candidates: Candidates,
        docs: Docs,
        bm25: Mapping[str, float],
        clauses: list[dict[str, Any]],
        *,
        question: dict[str, Any],
    ) -> list[tuple[str, dict[str, Any]]]:
        """The searches of round 2 for one query (see ``_second_round``), by kind; a kind with
        nothing to ask is left out."""
        ids = candidates.ids()
        unread = [i for i in ids if i not in docs]
        unscored = [
            i for i in ids if i not in candidates.semantic and "embedding" not in docs.get(i, {})
        ]
        no_bm25 = [i for i in ids if i not in bm25]
        searches: list[tuple[str, dict[str, Any]]] = []
        if unread:
            searches.append(("docs", docs_body(unread, clauses)))
        if unscored:
            searches.append(("vectors", vectors_body(unscored, clauses)))
        if no_bm25:
            restricted = [*clauses, {"ids": {"values": no_bm25}}]
            searches.append(("bm25", self._bm25_body(question, restricted, len(no_bm25))))
        return searches

    # -- the last round: what is shown ------------------------------------------------------------

    def _shown_round(
        self,
        batch: Batch,
        rankings: list[Ranking],
        found: list[Candidates],
        docs: list[Docs],
    ) -> list[Replies | None]:
        """One round trip for what each query shows, once ranked: the fields of its best
        (their sources: ranking read columns), the reply to its best hit (unless a reranker
        may change which is best; ``_with_replies`` then reads it), and, for a question about
        the present, the vectors the newer-first rule compares (``_newer_first``). Fills
        ``docs``; returns the replies read."""
        shown, queries = Round(), batch.queries
        turns: list[list[Turn]] = []
        for i, (query, ranking, clauses) in enumerate(
            zip(queries, rankings, batch.filters, strict=True)
        ):
            unread = [c.id for c in ranking.best if "text" not in docs[i][c.id]]
            if unread:
                shown.add((i, "docs"), "memories", query.scope, docs_body(unread, clauses))
            rivals = [
                m
                for m in self._rival_vectors(query, found[i])
                if "embedding" not in docs[i].get(m, {})
            ]
            if rivals:
                shown.add((i, "vectors"), "memories", query.scope, vectors_body(rivals, clauses))
            key = (
                reply_key(docs[i][ranking.best[0].id])
                if ranking.best and self._wants_reply(query) and not query.rerank
                else None
            )
            turns.append([key] if key is not None else [])
            if key is not None:
                body = replies_body([key], clauses, size=2)
                shown.add((i, "replies"), "memories", query.scope, body)
        answered = self._read_answers(batch, shown.run(self.store, "hybrid search (shown)"), docs)
        return [
            Replies.read(got["replies"], asked) if "replies" in got else None
            for got, asked in zip(answered, turns, strict=True)
        ]

    @staticmethod
    def _mark_hop(candidates: Candidates, docs: Docs, hop: HopPlan) -> None:
        """The hop signal of every candidate read: whether a person the query names said it."""
        candidates.hop.update(
            {m: float(said_by(d.get("actor_id"), hop.people)) for m, d in docs.items()}
        )

    def _hop_plan(
        self, query: SearchQuery, question: dict[str, Any], entities: list[str]
    ) -> HopPlan | None:
        """The query's second hop (pipeline.serving.multihop), or None when it is off."""
        if not query.hop or self.config.weight_hop <= 0:
            return None
        return plan_hop(
            entities,
            question,
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
    ) -> Ranking:
        """Fuse the signals of every candidate still visible (filters re-applied in round 2),
        and rank them. Only the best ``_pool`` will be hits (all the search can show, and what
        the newer-first rule and the reranker see)."""
        ids = [i for i in candidates.ids() if i in docs]
        if not ids:
            return Ranking([], {})
        unscored = [i for i in ids if i not in candidates.semantic]
        computed = dict(
            zip(
                unscored, cosines(vector, [docs[i].get("embedding") for i in unscored]), strict=True
            )
        )
        semantic = [
            max(0.0, candidates.semantic[i]) if i in candidates.semantic else computed[i]
            for i in ids
        ]
        top_bm25 = max(bm25.values(), default=0.0)
        timing = self._timing(query)
        scored = [
            self._scored(
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
        self._fed_back(query, scored, docs)
        self._hopped(scored, candidates.hop)
        scored.sort(key=lambda c: -c.score)
        best = scored[: self._pool(query)]
        if query.rerank:  # what the reranker does not see is out
            return Ranking(best, {})
        return Ranking(best, {c.id: c for c in scored})

    def _hits(self, query: SearchQuery, ranking: Ranking, docs: Docs) -> list[SearchHit]:
        """The best of ``ranking`` made hits, from the sources the last round read (one that
        was deleted in between is left out), reranked when asked."""
        hits = [c.hit(docs[c.id]) for c in ranking.best if "text" in docs[c.id]]
        if query.rerank:  # a reranker is configured: ``_check`` made sure
            hits = self._reranked(query, hits)
            hits.sort(key=lambda h: -h.score)
        return hits

    def _cut(self, query: SearchQuery, hits: list[SearchHit]) -> list[SearchHit]:
        """The best ``top_k`` ranked hits, scored on the similarity scale (``SearchHit``;
        reranked ones keep the reranker's score, in [0, 1] too), those below ``threshold``
        left out (scores never rise down the list: the best ones stay), explained if asked."""
        hits = hits[: query.top_k]
        if query.rerank:
            with_ranks(hits)
        else:
            on_similarity_scale(hits)
        if query.threshold is not None:
            hits = [h for h in hits if h.score >= query.threshold]
        return hits if query.explain else [h.model_copy(update={"explain": None}) for h in hits]

    # -- the newer statement first --------------------------------------------------------------

    def _newer_first(
        self,
        queries: Sequence[SearchQuery],
        ranked: list[list[SearchHit]],
        found: list[Candidates],
        docs: list[Docs],
    ) -> list[list[SearchHit]]:
        """For each question about the present, its best hits with the older of two rivals
        below the newer (``pipeline.serving.currency``), compared by their vectors: those of
        the kNN list's best ``_pool`` (read in round 2 while ranking) and of every candidate
        outside the kNN list (read to score it). A hit lower in the kNN list has no rival, even
        when another list read its vector: reading all of the kNN list's would cost every
        search more, and the rule stays the same whichever list happened to read a vector."""
        rivalry = self._rivalry()
        out = list(ranked)
        for i, query in enumerate(queries):
            pool = self._pool(query)
            if self._present(query) and may_have_rivals(out[i][:pool], docs[i], rivalry):
                ranks = found[i].rank_semantic
                vectors = {
                    m: d["embedding"]
                    for m, d in docs[i].items()
                    if "embedding" in d and ranks.get(m, 0) <= pool
                }
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

    def _wants_reply(self, query: SearchQuery) -> bool:
        # top_k 1 keeps only the best hit: the reply would be fetched to be cut off
        return query.reply and self.config.reply and query.top_k > 1

    def _with_replies(
        self,
        batch: Batch,
        rankings: list[Ranking],
        hits: list[list[SearchHit]],
        docs: list[Docs],
        replies: Sequence[Replies | None],
    ) -> list[list[SearchHit]]:
        """Each query's best hit followed by its reply (``pipeline.serving.replies``), when the
        best hit is a verbatim message and the reply is on: read in the last round with the
        sources of the best, or, after a reranker chose the best hit, in one more round trip."""
        ranked = list(hits)
        late = Round()
        for i, (query, shown) in enumerate(zip(batch.queries, ranked, strict=True)):
            if not (self._wants_reply(query) and shown):
                continue
            key = reply_key(docs[i].get(shown[0].id, {}))
            known = replies[i]
            if key is not None and known is not None and known.answers(key):
                reply = known.found.get(key)
                if reply is not None:
                    ranked[i] = self._replied(rankings[i], shown, *reply)
            elif key is not None:
                late.add((i, "reply"), "memories", query.scope, reply_body(key, batch.filters[i]))
        for (i, _), response in late.run(self.store, "hybrid search (reply)").items():
            batch.shards[i] = batch.shards[i].worst(Shards.of(response))
            found = hits_of(response)
            if found:
                ranked[i] = self._replied(
                    rankings[i], ranked[i], found[0]["_id"], found[0]["_source"]
                )
        return ranked

    @staticmethod
    def _replied(
        ranking: Ranking, hits: list[SearchHit], reply: str, source: dict[str, Any]
    ) -> list[SearchHit]:
        """``hits`` with ``reply`` (its ``source`` read) second: a candidate further down
        comes up with its signals, another memory with none."""
        placed = ranking.including(hits, reply, source)
        return followed_by_reply(placed, reply, source, explain=True)

    def _scored(
        self,
        memory: str,
        source: dict[str, Any],
        *,
        semantic: float,
        bm25_raw: float,
        top_bm25: float,
        candidates: Candidates,
        timing: Timing,
    ) -> Scored:
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
        return Scored(
            id=memory,
            score=round(fused, 6),
            semantic=round(semantic, 6),
            bm25=round(bm25, 6),
            bm25_raw=round(bm25_raw, 6),
            entity=round(entity, 6),
            time=None if time is None else round(time, 6),
            dated=None if dated is None else round(dated, 6),
            rank_semantic=candidates.rank_semantic.get(memory),
            rank_bm25=candidates.rank_bm25.get(memory),
            rank_entity=candidates.rank_entity.get(memory),
        )

    def _fed_back(
        self, query: SearchQuery, scored: list[Scored], docs: dict[str, dict[str, Any]]
    ) -> None:
        """Every candidate's score mixed with its ``feedback``, in place: how many of the terms
        shared by the best candidates it mentions (see ``pipeline.adapters.nlp.feedback``). Off
        at weight 0, and when there are no more candidates than seeds (nothing to lift)."""
        weight, seeds = self.config.weight_feedback, self.config.feedback_seeds
        if weight <= 0 or len(scored) <= seeds:
            return
        terms = {c.id: terms_of(docs[c.id]) for c in scored}
        best = sorted(scored, key=lambda c: -c.score)[:seeds]
        expansion = expansion_of(
            [terms[c.id] for c in best],
            self.lemmatizer.lemmatize(query.query),
            self.config.feedback_terms,
        )
        for candidate in scored:
            signal = share_of(frozenset(terms[candidate.id]), expansion)
            add_feedback(candidate, signal, weight)

    def _hopped(self, scored: list[Scored], signal: Mapping[str, float]) -> None:
        """Every candidate's score mixed with its ``hop`` signal (pipeline.serving.multihop)
        when the query had a hop; in place, as feedback."""
        if not signal:
            return
        for candidate in scored:
            value = signal.get(candidate.id, 0.0)
            candidate.score = round(mixed(candidate.score, value, self.config.weight_hop), 6)
            candidate.hop = round(value, 6)

    def _timing(self, query: SearchQuery) -> Timing:
        reference = query.reference_time or self.clock()
        return Timing(
            periods=periods(query.query, reference) if self.config.weight_time > 0 else [],
            when=asks_when(query.query) and self.config.weight_dated > 0,
        )

    def _reranked(self, query: SearchQuery, hits: list[SearchHit]) -> list[SearchHit]:
        """The best ``_pool`` hits (``hits``, best first) scored by the reranker."""
        assert self.reranker is not None
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
