"""Search latency at a scope's size: one pool of synthetic memories written as memq's and mem0's
documents, the questions, and the searches timed against them."""

from __future__ import annotations

import argparse
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from elasticsearch import Elasticsearch
from elasticsearch.helpers import bulk

from benchlib import mem0
from benchlib.mem0 import Endpoints, mem0_config, serve
from pipeline.adapters.embedding.local import MiniLMEmbedder
from pipeline.adapters.embedding.versioned import IndexEmbedder
from pipeline.adapters.nlp.entities import extract_entities
from pipeline.adapters.nlp.lemmatize import SimplemmaLemmatizer, normalize_for_hash
from pipeline.config import Settings
from pipeline.domain.models import Scope, entity_id, md5_hex, memory_id
from pipeline.domain.protocols import Embedder
from pipeline.ingestion.phases.link import normalize_entity
from pipeline.serving.search import Searcher, SearchQuery
from pipeline.store.client import make_client
from pipeline.store.elastic import scope_filter
from pipeline.store.indices import IndexNames, drop_indices, ensure_indices
from pipeline.store.protocol import EntityDoc, MemoryDoc
from pipeline.store.routing import scope_routing
from workers.runtime import Runtime

MEMQ_PREFIX = "memqbench-latency"


MEM0_INDEX = "mem0bench_latency"


SCOPE = Scope(tenant="bench", user_id="latency-user")


TOP_K = 10


WARM_UP = 10


PER_NAME = 75  # pool sentences per person: 40 people x 75 = 3,000


SEED = 7


TURNS = 10  # memories per synthetic conversation (each its own job, turns 0..9)


PEOPLE = {
    "Caroline": "her", "Melanie": "her", "Jon": "his", "Gina": "her", "John": "his",
    "Maria": "her", "Nate": "his", "Joanna": "her", "Tim": "his", "Audrey": "her",
    "Andrew": "his", "James": "his", "Deborah": "her", "Evan": "his", "Sam": "his",
    "Calvin": "his", "Dave": "his", "Priya": "her", "Kenji": "his", "Lucia": "her",
    "Omar": "his", "Fatima": "her", "Liam": "his", "Sofia": "her", "Noah": "his",
    "Emma": "her", "Mateo": "his", "Aisha": "her", "Lars": "his", "Ingrid": "her",
    "Diego": "his", "Hana": "her", "Ravi": "his", "Chloe": "her", "Marcus": "his",
    "Elena": "her", "Tomas": "his", "Yara": "her", "Felix": "his", "Nadia": "her",
}  # fmt: skip


ACTIVITIES = [  # (what the memory says, the question's verb phrase)
    ("went hiking in {place}", "go hiking"),
    ("ran a half marathon in {place}", "run a half marathon"),
    ("took a pottery class in {place}", "take a pottery class"),
    ("went camping near {place}", "go camping"),
    ("went to a support group meeting in {place}", "go to a support group meeting"),
    ("adopted a puppy from a shelter in {place}", "adopt a puppy"),
    ("started a new job at a bakery in {place}", "start a new job"),
    ("played guitar at a small concert in {place}", "play guitar at a concert"),
    ("learned to surf in {place}", "learn to surf"),
    ("celebrated a birthday dinner in {place}", "celebrate a birthday"),
    ("volunteered at a food bank in {place}", "volunteer at a food bank"),
    ("went to a jazz festival in {place}", "go to a jazz festival"),
    ("painted a sunset over the harbour in {place}", "paint a sunset"),
    ("moved into a new apartment in {place}", "move into a new apartment"),
    ("took the kids to the beach in {place}", "take the kids to the beach"),
    ("gave a talk at a conference in {place}", "give a talk at a conference"),
    ("signed up for a cooking workshop in {place}", "sign up for a cooking workshop"),
    ("went skiing in {place}", "go skiing"),
    ("visited an old friend in {place}", "visit an old friend"),
    ("went birdwatching in {place}", "go birdwatching"),
]


PLACES = [
    "the Alps", "Lisbon", "Kyoto", "Yosemite", "Barcelona", "Cape Town", "Vancouver",
    "the Lake District", "Reykjavik", "Marrakech", "Boston", "Seattle", "Berlin", "Oaxaca",
    "Sydney", "Hanoi", "Edinburgh", "Santorini", "Patagonia", "Montreal", "Nairobi", "Prague",
    "Austin", "Bali", "the Scottish Highlands", "Tuscany", "Copenhagen", "Banff", "Istanbul",
    "Lima",
]  # fmt: skip


COMPANIONS = [
    "with {pron} sister", "with {pron} best friend", "with coworkers", "alone",
    "with {pron} partner", "with the kids", "with a friend from college", "with {pron} parents",
    "with {pron} running club", "with {pron} neighbours",
]  # fmt: skip


MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]  # fmt: skip


YEARS = range(2019, 2025)


QUESTION_FORMS = [
    "Where did {name} {verb}?",
    "When did {name} {verb}?",
    "Who did {name} {verb} with?",
]


def sentence(rng: random.Random, name: str) -> str:
    past, _ = rng.choice(ACTIVITIES)
    companion = rng.choice(COMPANIONS).format(pron=PEOPLE[name])
    date = f"{rng.choice(MONTHS)} {rng.choice(list(YEARS))}"
    return f"{name} {past.format(place=rng.choice(PLACES))} {companion} in {date}."


def sentence_pool(rng: random.Random) -> list[str]:
    """PER_NAME distinct sentences per person, grouped by person."""
    pool: list[str] = []
    for name in PEOPLE:
        mine: set[str] = set()
        while len(mine) < PER_NAME:
            mine.add(sentence(rng, name))
        pool += sorted(mine)
    return pool


def questions(rng: random.Random, count: int) -> list[str]:
    asked: set[str] = set()
    while len(asked) < count:
        _, verb = rng.choice(ACTIVITIES)
        asked.add(rng.choice(QUESTION_FORMS).format(name=rng.choice(list(PEOPLE)), verb=verb))
    ordered = sorted(asked)  # a set's order changes with PYTHONHASHSEED; the shuffle must not
    rng.shuffle(ordered)
    return ordered


def combinations(rng: random.Random, count: int) -> list[tuple[int, ...]]:
    """`count` distinct memories, each 2 or 3 pool sentences of one person (pool indices)."""
    seen: set[tuple[int, ...]] = set()
    made: list[tuple[int, ...]] = []
    while len(made) < count:
        person = rng.randrange(len(PEOPLE))
        picked = rng.sample(range(PER_NAME), rng.choice((2, 3)))
        combo = tuple(sorted(person * PER_NAME + i for i in picked))
        if combo not in seen:
            seen.add(combo)
            made.append(combo)
    return made


@dataclass
class Pool:
    """Pool sentences with their vectors, lemmas (memq's and mem0's) and entities."""

    texts: list[str]
    vectors: np.ndarray
    memq_lemmas: list[str]
    mem0_lemmas: list[str]
    entities: list[list[tuple[str, str]]]  # (normalized name, type) per sentence
    entity_text: dict[str, str] = field(default_factory=dict)  # normalized -> as written

    def text(self, combo: tuple[int, ...]) -> str:
        return " ".join(self.texts[i] for i in combo)

    def memory(self, combo: tuple[int, ...]) -> tuple[str, list[float]]:
        """The memory's text, and its vector: the normalized sum of its sentences' vectors."""
        summed = self.vectors[list(combo)].sum(axis=0)
        vector: list[float] = np.round(summed / np.linalg.norm(summed), 6).tolist()
        return self.text(combo), vector


def mem0_lemmatize(text: str) -> str:
    from mem0.utils.lemmatization import lemmatize_for_bm25  # type: ignore[import-untyped]

    result: str = lemmatize_for_bm25(text)
    return result


def build_pool(embedder: MiniLMEmbedder, texts: list[str]) -> Pool:
    started = time.perf_counter()
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    lemmatizer = SimplemmaLemmatizer()
    pool = Pool(
        texts=texts,
        vectors=vectors,
        memq_lemmas=[lemmatizer.lemmatize(t) for t in texts],
        mem0_lemmas=[mem0_lemmatize(t) for t in texts],
        entities=[],
    )
    for text in texts:
        found = extract_entities(text)
        pool.entities.append([(normalize_entity(e.text), e.type) for e in found])
        pool.entity_text.update({normalize_entity(e.text): e.text for e in found})
    print(f"pool: {len(texts)} sentences embedded in {time.perf_counter() - started:.1f} s")
    return pool


def memq_actions(
    pool: Pool,
    combos: Sequence[tuple[int, ...]],
    names: IndexNames,
    now: datetime,
    first: int = 0,
) -> Iterator[dict[str, Any]]:
    """memq's memory documents for ``combos`` (the ``first``-th memory onwards): verbatim
    turns of conversations of ``TURNS`` messages each, so that a search whose best hit is one
    of them pays for fetching its reply, as it would on ingested conversations."""
    for n, combo in enumerate(combos, start=first):
        text, vector = pool.memory(combo)
        digest = md5_hex(normalize_for_hash(text))
        entities = {entity_id(SCOPE, name) for i in combo for name, _ in pool.entities[i]}
        doc = MemoryDoc(
            id=memory_id(SCOPE, digest),
            scope=SCOPE,
            text=text,
            text_lemmatized=" ".join(pool.memq_lemmas[i] for i in combo),
            embedding=vector,
            hash=digest,
            job_id=f"bench-latency-{n // TURNS}",
            created_at=now,
            observed_at=now,
            entity_ids=tuple(sorted(entities)),
            turn=n % TURNS,
        )
        yield {
            "_op_type": "create",
            "_index": names.memories,
            "_id": doc.id,
            "_routing": scope_routing(doc.scope),
            "_source": doc.source(),
        }


def entity_actions(
    pool: Pool,
    combos: Sequence[tuple[int, ...]],
    vectors: dict[str, list[float]],
    names: IndexNames,
    now: datetime,
) -> Iterator[dict[str, Any]]:
    """Every entity with all the memories (so far) that mention it, rewritten whole."""
    links: dict[str, list[str]] = {}
    kinds: dict[str, str] = {}
    for combo in combos:
        memory = memory_id(SCOPE, md5_hex(normalize_for_hash(pool.text(combo))))
        for name, kind in {e for i in combo for e in pool.entities[i]}:
            links.setdefault(name, []).append(memory)
            kinds[name] = kind
    for name, linked in links.items():
        doc = EntityDoc(
            id=entity_id(SCOPE, name),
            scope=SCOPE,
            text=pool.entity_text[name],
            normalized=name,
            type=kinds[name],
            embedding=vectors[name],
            created_at=now,
        )
        yield {
            "_index": names.entities,
            "_id": doc.id,
            "_routing": scope_routing(doc.scope),
            "_source": doc.source(linked),
        }


def mem0_template(es: Elasticsearch) -> dict[str, Any]:
    """The metadata of the one memory mem0 wrote itself, less what differs per memory."""
    es.indices.refresh(index=MEM0_INDEX)
    hits = es.search(index=MEM0_INDEX, size=1).body["hits"]["hits"]
    metadata: dict[str, Any] = hits[0]["_source"]["metadata"]
    per_memory = {"data", "hash", "created_at", "updated_at", "text_lemmatized"}
    return {k: v for k, v in metadata.items() if k not in per_memory}


def mem0_actions(
    pool: Pool, combos: Sequence[tuple[int, ...]], template: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """What mem0's `ElasticsearchDB.insert` writes for `_create_memory`'s payload."""
    for combo in combos:
        text, vector = pool.memory(combo)
        now = datetime.now(UTC).isoformat()
        metadata = {
            **template,
            "data": text,
            "hash": md5_hex(text),  # mem0: hashlib.md5(data.encode()).hexdigest()
            "created_at": now,
            "updated_at": now,
            "text_lemmatized": " ".join(pool.mem0_lemmas[i] for i in combo),
        }
        yield {
            "_index": MEM0_INDEX,
            "_id": str(uuid.uuid4()),
            "_source": {"vector": vector, "metadata": metadata},
        }


def make_mem0(es_url: str, port: int, workdir: Path, es: Elasticsearch) -> Any:
    config = mem0_config(es_url, port, workdir)
    config["vector_store"]["config"]["collection_name"] = MEM0_INDEX
    return mem0.make_mem0(config, es)


def drop_mem0(es: Elasticsearch) -> None:
    mem0.drop_mem0(es, MEM0_INDEX)


Search = Callable[[str], object]


def search_query(text: str, hop: bool = True, reply: bool = True) -> SearchQuery:
    """The bench's question ``text`` as memq's search of the bench's scope, top ``TOP_K``."""
    return SearchQuery(query=text, scope=SCOPE, top_k=TOP_K, hop=hop, reply=reply)


def memq_search(searcher: Searcher, hop: bool = True, reply: bool = True) -> Search:
    return lambda q: searcher.search(search_query(q, hop=hop, reply=reply))


def mem0_search(memory: Any) -> Search:
    return lambda q: memory.search(q, top_k=TOP_K, filters={"user_id": SCOPE.user_id})


def floor_knn(vector: list[float], clauses: list[dict[str, Any]]) -> dict[str, Any]:
    """The floor's kNN section: the ``TOP_K`` nearest of 100 candidates under ``clauses``."""
    return {
        "field": "embedding",
        "query_vector": vector,
        "k": TOP_K,
        "num_candidates": 100,
        "filter": clauses,
    }


def floor_search(es: Elasticsearch, embedder: MiniLMEmbedder, index: str) -> Search:
    """Embed in process, then one kNN request: what any vector search has to pay."""

    def search(query: str) -> object:
        knn = floor_knn(embedder.embed([query])[0], scope_filter(SCOPE))
        return es.search(index=index, knn=knn, size=TOP_K, source=False).body

    return search


def hit_count(reply: object) -> int:
    """Hits in a reply of any of the three (a list, mem0's dict, a search body)."""
    if isinstance(reply, list):
        return len(reply)
    assert isinstance(reply, dict)
    found = reply["results"] if "results" in reply else reply["hits"]["hits"]
    return len(found)


def sample(searches: dict[str, Search], asked: list[str]) -> dict[str, list[float]]:
    """The hits each system finds for the first question, printed, then `measure`."""
    found = {name: hit_count(search(asked[0])) for name, search in searches.items()}
    print(f"hits for {asked[0]!r}: {found}")
    return measure(searches, asked)


def measure(searches: dict[str, Search], asked: list[str]) -> dict[str, list[float]]:
    """Per question, every system once, the order rotated; returns ms per system."""
    systems = list(searches)
    for system in systems:
        for query in asked[:WARM_UP]:
            searches[system](query)
    latencies: dict[str, list[float]] = {s: [] for s in systems}
    for i, query in enumerate(asked):
        shift = i % len(systems)
        for system in systems[shift:] + systems[:shift]:
            started = time.perf_counter()
            searches[system](query)
            latencies[system].append((time.perf_counter() - started) * 1000)
    return latencies


def pyplot() -> Any:
    """matplotlib's pyplot, drawing to files only."""
    import matplotlib  # type: ignore[import-untyped,unused-ignore]

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-untyped,unused-ignore]

    return plt


def save(figure: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"plot: {path}")


def write(es: Elasticsearch, actions: Iterator[dict[str, Any]]) -> None:
    bulk(es.options(request_timeout=300), actions, chunk_size=1000)


@dataclass
class Bench:
    runtime: Runtime
    embedder: MiniLMEmbedder
    pool: Pool
    combos: list[tuple[int, ...]]
    entity_vectors: dict[str, list[float]]
    memory: Any = None
    without_hop: bool = False
    without_reply: bool = False
    without_newer_first: bool = False
    template: dict[str, Any] = field(default_factory=dict)

    def grow(self, start: int, stop: int) -> None:
        """Memories [start, stop) into both systems; memq's entities rewritten with the links."""
        es, names, now = self.runtime.es, self.runtime.store.names, datetime.now(UTC)
        started = time.perf_counter()
        if start == 0:
            text = self.pool.text(self.combos[0])
            self.memory.add([{"role": "user", "content": text}], user_id=SCOPE.user_id, infer=False)
            self.template = mem0_template(es)
        write(es, memq_actions(self.pool, self.combos[start:stop], names, now, start))
        write(es, mem0_actions(self.pool, self.combos[max(start, 1) : stop], self.template))
        links = entity_actions(self.pool, self.combos[:stop], self.entity_vectors, names, now)
        write(es, links)
        es.indices.refresh(index=[names.memories, names.entities, MEM0_INDEX])
        counts = [es.count(index=i).body["count"] for i in (names.memories, MEM0_INDEX)]
        print(f"grown to {stop:,} in {time.perf_counter() - started:.0f} s (memq, mem0: {counts})")

    def searches(self) -> dict[str, Search]:
        index = self.runtime.store.names.memories
        searches = {
            "memq": memq_search(self.runtime.searcher),
            "mem0": mem0_search(self.memory),
            "floor": floor_search(self.runtime.es, self.embedder, index),
        }
        if self.without_hop:  # the same searcher, each query asking for no second hop
            searches["memq, no hop"] = memq_search(self.runtime.searcher, hop=False)
        if self.without_reply:  # the same searcher, each query asking for no reply
            searches["memq, no reply"] = memq_search(self.runtime.searcher, reply=False)
        if self.without_newer_first:  # the rule off as its setting turns it off (ratio 1)
            searcher = self.runtime.searcher
            config = searcher.config.model_copy(update={"rival_score_ratio": 1.0})
            searches["memq, no newer-first"] = memq_search(replace(searcher, config=config))
        return searches


def settings_for(prefix: str) -> Settings:
    """The environment's settings on the indices under ``prefix``, with the local MiniLM
    whatever the environment says (benchmarks compare like with like)."""
    base = Settings()
    return base.model_copy(
        update={
            "es": base.es.model_copy(update={"index_prefix": prefix}),
            "embedder": base.embedder.model_copy(update={"kind": "local"}),
        }
    )


def fresh_runtime(prefix: str) -> Runtime:
    """memq on empty indices under ``prefix``, with the local MiniLM (``settings_for``)."""
    settings = settings_for(prefix)
    drop_indices(make_client(settings.es), IndexNames(prefix))
    runtime = Runtime(settings)
    ensure_indices(runtime.es, settings.es, settings.embedder.dims)
    return runtime


def local_minilm(embedder: Embedder) -> MiniLMEmbedder:
    """The local MiniLM memq embeds with (behind the embedder that follows the index version),
    for the pool and the floor."""
    if isinstance(embedder, IndexEmbedder):
        embedder = embedder.models().embedder
    if not isinstance(embedder, MiniLMEmbedder):
        raise SystemExit("search_latency: memq did not build the local MiniLM embedder")
    return embedder


def prepare(rng: random.Random, size: int) -> Bench:
    """memq on empty indices, the pool embedded, and `size` memories drawn (not yet written)."""
    runtime = fresh_runtime(MEMQ_PREFIX)
    embedder = local_minilm(runtime.deps.embedder)
    pool = build_pool(embedder, sentence_pool(rng))
    names = sorted(pool.entity_text)
    entity_vectors = dict(
        zip(names, embedder.embed([pool.entity_text[n] for n in names]), strict=True)
    )
    return Bench(runtime, embedder, pool, combinations(rng, size), entity_vectors)


@contextmanager
def opened(
    bench: Bench, endpoints: Endpoints, workdir: Path, keep: bool
) -> Iterator[ThreadingHTTPServer]:
    """`endpoints` served and mem0 on a fresh index; both systems' indices dropped at the end
    unless `keep`."""
    runtime = bench.runtime
    server = serve(endpoints)
    drop_mem0(runtime.es)
    bench.memory = make_mem0(runtime.settings.es.url, server.server_port, workdir, runtime.es)
    try:
        yield server
    finally:
        bench.memory.close()
        server.shutdown()
        if not keep:
            drop_indices(runtime.es, runtime.store.names)
            drop_mem0(runtime.es)


def arguments(doc: str | None, plot_path: Path) -> argparse.ArgumentParser:
    """--sizes, --keep and --plot, for this command and the ones built on its stores."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument(
        "--sizes", default="1000,10000,100000", help="growing sizes, comma-separated"
    )
    parser.add_argument("--keep", action="store_true", help="keep both systems' indices")
    parser.add_argument("--plot", type=Path, default=plot_path)
    return parser
