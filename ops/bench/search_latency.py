"""Search latency as the store grows: memq's hybrid search, mem0's `Memory.search` and a bare
Elasticsearch kNN request (the floor), at 1k, 10k and 100k memories of ONE scope (one user).

The memories are synthetic: a pool of about 3,000 distinct sentences built from templates (a
person, an activity, a place, a companion, a month) is embedded once with memq's local MiniLM;
each memory is 2 or 3 pool sentences about the same person, its text their concatenation and its
vector the L2-normalized sum of their vectors. The memories are written straight into each
system's own index with bulk requests, in each system's own document shape: memq's `MemoryDoc`
(lemmas, hash, uuid5 id; each a turn of a synthetic 10-turn conversation, so that memq's search
fetches the reply to its best hit) plus one entity document per person, place and date found by
memq's own extractor, linked to the memories that mention it; mem0's payload as its `insert`
writes it (the first memory goes through `Memory.add(..., infer=False)` so mem0 creates its
index itself; the others copy that document's shape). The stores grow 1k -> 10k -> 100k; at each
size, after one refresh and a few warm-up queries, the same 200 template questions are asked of
the three systems, interleaved per question (A B C, B C A, C A B). memq and the floor embed in
process, mem0 through mem0_compare's in-process OpenAI-compatible endpoint; the floor's time
includes its embedding. Needs the stack (Elasticsearch); writes docs/img/search_latency.png.

    .venv/bin/python ops/bench/search_latency.py [--sizes 1000,10000,100000] [--keep]
        [--without-hop] [--without-reply] [--without-newer-first] [--concurrency 8,32]

With ``--concurrency``, each size is also measured under load: for each level N, each system in
turn (the order rotated per level) is asked the questions by N threads at once, every question
twice, and the latency of each search and the searches per second are reported. All three run in
this one process, so their Python work shares one interpreter lock, as it does for mem0 in an
application; memq's API spreads the same work over its server processes instead.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from elasticsearch import Elasticsearch
from elasticsearch.helpers import bulk
from mem0_compare import Endpoints, mem0_config, percentile, serve

from pipeline.config import Settings
from pipeline.embedding.local import MiniLMEmbedder
from pipeline.embedding.versioned import IndexEmbedder
from pipeline.models import Scope, entity_id, md5_hex, memory_id
from pipeline.nlp.entities import extract_entities
from pipeline.nlp.lemmatize import SimplemmaLemmatizer, normalize_for_hash
from pipeline.phases.link import normalize_entity
from pipeline.protocols import Embedder
from pipeline.search import Searcher, SearchQuery
from pipeline.store.client import make_client
from pipeline.store.elastic import scope_filter
from pipeline.store.indices import IndexNames, drop_indices, ensure_indices
from pipeline.store.protocol import EntityDoc, MemoryDoc
from pipeline.store.routing import scope_routing
from workers.runtime import Runtime

MEMQ_PREFIX = "memqbench-latency"
MEM0_INDEX = "mem0bench_latency"
MEM0_INDICES = (MEM0_INDEX, f"{MEM0_INDEX}_entities")
SCOPE = Scope(tenant="bench", user_id="latency-user")
TOP_K = 10
QUESTIONS = 200
WARM_UP = 10
PER_NAME = 75  # pool sentences per person: 40 people x 75 = 3,000
SEED = 7
TURNS = 10  # memories per synthetic conversation (each its own job, turns 0..9)
PLOT = Path(__file__).resolve().parents[2] / "docs/img/search_latency.png"

# --- the synthetic vocabulary ----------------------------------------------------------------

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


# --- the pool, embedded once -----------------------------------------------------------------


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


# --- memq's documents ------------------------------------------------------------------------


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


# --- mem0's documents ------------------------------------------------------------------------


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
    from mem0 import Memory  # type: ignore[import-untyped]

    config = mem0_config(es_url, port, workdir)
    config["vector_store"]["config"]["collection_name"] = MEM0_INDEX
    memory = Memory.from_config(config)
    es.indices.put_settings(index=MEM0_INDEX, settings={"index": {"number_of_replicas": 0}})
    return memory


def drop_mem0(es: Elasticsearch) -> None:
    for name in MEM0_INDICES:
        es.indices.delete(index=name, ignore_unavailable=True)


# --- the three searches ----------------------------------------------------------------------


Search = Callable[[str], object]


def memq_search(searcher: Searcher, hop: bool = True, reply: bool = True) -> Search:
    return lambda q: searcher.search(
        SearchQuery(query=q, scope=SCOPE, top_k=TOP_K, hop=hop, reply=reply)
    )


def mem0_search(memory: Any) -> Search:
    return lambda q: memory.search(q, top_k=TOP_K, filters={"user_id": SCOPE.user_id})


def floor_search(es: Elasticsearch, embedder: MiniLMEmbedder, index: str) -> Search:
    """Embed in process, then one kNN request: what any vector search has to pay."""

    def search(query: str) -> object:
        vector = embedder.embed([query])[0]
        knn = {
            "field": "embedding",
            "query_vector": vector,
            "k": TOP_K,
            "num_candidates": 100,
            "filter": scope_filter(SCOPE),
        }
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


@dataclass(frozen=True)
class Loaded:
    """One system under N concurrent searchers: each search's ms and the searches per second."""

    latencies: list[float]
    per_second: float


def timed(search: Search, query: str) -> float:
    started = time.perf_counter()
    search(query)
    return (time.perf_counter() - started) * 1000


def loaded(search: Search, asked: list[str], threads: int) -> Loaded:
    """``asked`` twice over, by ``threads`` searchers at once."""
    queries = asked * 2
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda q: timed(search, q), asked[: threads * 2]))  # warm each thread
        started = time.perf_counter()
        latencies = list(pool.map(lambda q: timed(search, q), queries))
        elapsed = time.perf_counter() - started
    return Loaded(latencies, len(queries) / elapsed)


def under_load(
    searches: dict[str, Search], asked: list[str], levels: Sequence[int]
) -> dict[int, dict[str, Loaded]]:
    """For each level, every system under that many searchers, one after another, the order
    rotated from level to level."""
    systems = list(searches)
    found: dict[int, dict[str, Loaded]] = {}
    for i, level in enumerate(levels):
        shift = i % len(systems)
        order = systems[shift:] + systems[:shift]
        found[level] = {s: loaded(searches[s], asked, level) for s in order}
    return found


# --- report ----------------------------------------------------------------------------------

Results = dict[int, dict[str, list[float]]]
LoadResults = dict[int, dict[int, dict[str, Loaded]]]


def load_table(results: LoadResults) -> str:
    lines = [
        "| memories | searchers | system | p50 ms | p95 ms | searches/s | p95 / mem0 p95 |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, by_level in results.items():
        for level, by_system in by_level.items():
            mem0_p95 = percentile(by_system["mem0"].latencies, 95)
            for system in sorted(by_system):
                got = by_system[system]
                p50, p95 = (percentile(got.latencies, p) for p in (50, 95))
                lines.append(
                    f"| {size:,} | {level} | {system} | {p50:.1f} | {p95:.1f} "
                    f"| {got.per_second:.1f} | {p95 / mem0_p95:.2f} |"
                )
    return "\n".join(lines)


def table(results: Results) -> str:
    lines = [
        "| memories | system | p50 ms | p95 ms | p99 ms | p50 / floor p50 |",
        "|---|---|---|---|---|---|",
    ]
    for size, by_system in results.items():
        floor = percentile(by_system["floor"], 50)
        for system, values in by_system.items():
            p50, p95, p99 = (percentile(values, p) for p in (50, 95, 99))
            lines.append(
                f"| {size:,} | {system} | {p50:.1f} | {p95:.1f} | {p99:.1f} | {p50 / floor:.2f} |"
            )
    return "\n".join(lines)


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


def plot(results: Results, path: Path) -> None:
    sizes = list(results)
    figure, axes = pyplot().subplots(figsize=(7, 4.5))
    for system, color in (("memq", "tab:blue"), ("mem0", "tab:orange"), ("floor", "tab:gray")):
        for p, style in ((50, "-"), (95, "--")):
            values = [percentile(results[s][system], p) for s in sizes]
            axes.plot(sizes, values, style, marker="o", color=color, label=f"{system} p{p}")
    axes.set_xscale("log")
    axes.set_xlabel("memories in the scope (one user)")
    axes.set_ylabel("search latency, ms")
    axes.set_title("Search latency as the store grows (top 10, single client)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(ncol=3, fontsize=8)
    save(figure, path)


# --- the run ---------------------------------------------------------------------------------


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


def fresh_runtime(prefix: str) -> Runtime:
    """memq on empty indices under ``prefix``, with the local MiniLM whatever the environment
    says (benchmarks compare like with like)."""
    base = Settings()
    settings = base.model_copy(
        update={
            "es": base.es.model_copy(update={"index_prefix": prefix}),
            "embedder": base.embedder.model_copy(update={"kind": "local"}),
        }
    )
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


def run(
    sizes: list[int],
    keep: bool,
    workdir: Path,
    *,
    without_hop: bool = False,
    without_reply: bool = False,
    without_newer_first: bool = False,
    levels: Sequence[int] = (),
    loads: LoadResults | None = None,
) -> Results:
    rng = random.Random(SEED)
    bench = prepare(rng, max(sizes))
    bench.without_hop, bench.without_reply = without_hop, without_reply
    bench.without_newer_first = without_newer_first
    asked = questions(rng, QUESTIONS)
    results: Results = {}
    with opened(bench, Endpoints(bench.embedder, turns=0), workdir, keep):
        previous = 0
        for size in sizes:
            bench.grow(previous, size)
            results[size] = sample(bench.searches(), asked)
            print(table({size: results[size]}), flush=True)
            if levels and loads is not None:
                loads[size] = under_load(bench.searches(), asked, levels)
                print(load_table({size: loads[size]}), flush=True)
            previous = size
    return results


def arguments(doc: str | None, plot_path: Path) -> argparse.ArgumentParser:
    """--sizes, --keep and --plot, for this command and the ones built on its stores."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument(
        "--sizes", default="1000,10000,100000", help="growing sizes, comma-separated"
    )
    parser.add_argument("--keep", action="store_true", help="keep both systems' indices")
    parser.add_argument("--plot", type=Path, default=plot_path)
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(__doc__, PLOT)
    parser.add_argument(
        "--without-hop",
        action="store_true",
        help="also time memq with each query asking for no second hop (hop=false)",
    )
    parser.add_argument(
        "--without-reply",
        action="store_true",
        help="also time memq with each query asking for no reply to its best hit (reply=false)",
    )
    parser.add_argument(
        "--without-newer-first",
        action="store_true",
        help="also time memq with the newer-first rule off (MEMQ_SEARCH_RIVAL_SCORE_RATIO=1)",
    )
    parser.add_argument(
        "--concurrency",
        default="",
        help="also measure each size under this many concurrent searchers, comma-separated",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    levels = [int(n) for n in args.concurrency.split(",") if n]
    loads: LoadResults = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mem0bench-") as workdir:
        os.environ["MEM0_TELEMETRY"] = "False"  # both read when mem0 is first imported
        os.environ["MEM0_DIR"] = workdir
        results = run(
            sizes,
            args.keep,
            Path(workdir),
            without_hop=args.without_hop,
            without_reply=args.without_reply,
            without_newer_first=args.without_newer_first,
            levels=levels,
            loads=loads,
        )
    print(f"\n{QUESTIONS} questions, top {TOP_K}, one scope, interleaved per question")
    print(table(results))
    if loads:
        print("\nunder load: every question twice, by N searchers at once, one system at a time")
        print(load_table(loads))
    plot(results, args.plot)
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
