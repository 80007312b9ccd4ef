"""``memq reprocess --reembed``: a new index version of the memories and entities, their
vectors made by another embedder (of any size), swapped in behind the aliases while memq keeps
serving.

Glossary:
- **version**: a concrete index behind an alias; one version's vectors are all of one
  embedder, which its mapping's ``_meta.embedder`` names (``EmbedderSpec``). A re-embedded
  version is ``{alias}-v{SCHEMA}-e{digest}``, the digest naming its embedder, so a run that was
  stopped finds its version again.
- **build**: a version being filled, out of the aliases; its ``_meta.reprocess`` names the
  version it is built from (its source) and the mode.
- **sync**: one pass over the source from a point in time, page by page: each document the
  build lacks at the source's ``_version`` is embedded anew and written with that version
  (external versioning). What the build holds already costs one ids query per page and no
  embedding, so a killed run resumes where it was by syncing again: the build is its own
  checkpoint. Re-embedded memories get a ``REPROCESS`` history row (deterministic id).
- **progress**: where a run is, recorded in each build's mapping as it goes
  (``pipeline.store.build_progress``): any process reads it, a failure leaves its reason.
- **switch**: writes to both sources are paused (an index write block), a last sync brings the
  builds level (what was added or changed during the build, embedded now), what was deleted
  meanwhile is deleted, and one ``update_aliases`` call moves both aliases. The sources stay,
  out of the aliases, until ``--drop-old``.

A write that meets the block is transient (workers retry, the API answers 503 Retry-After);
reads never pause. Processes follow the embedder of the version in use
(``pipeline.adapters.embedding.versioned``): searches answer from the old version, with the old
embedder, until the switch, and from the new one after it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from elasticsearch import Elasticsearch

from pipeline.adapters.embedding.versioned import EmbedderSpec
from pipeline.adapters.nlp.speaker import embedding_text
from pipeline.config import ElasticsearchConfig
from pipeline.domain.models import history_id, utcnow
from pipeline.domain.protocols import Embedder
from pipeline.errors import ConflictError, InvalidInputError
from pipeline.store.build_progress import BuildProgress, MetaSink, ProgressWriter, Stage
from pipeline.store.client import es_errors
from pipeline.store.indices import (
    SCHEMA_VERSION,
    IndexNames,
    Kind,
    mappings,
    put_templates,
    stored_embedder,
)
from pipeline.store.reindex import (
    PAGE_SIZE,
    delete_gone,
    pages,
    raise_item_errors,
    single_index,
    versions,
    write_copies,
)
from pipeline.store.routing import history_routing

REEMBED = "reembed"
REPROCESS_EVENT = "REPROCESS"
KINDS = (Kind.MEMORIES, Kind.ENTITIES)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    """What a rebuild would cost (``--dry-run``): texts to embed and model calls; for a
    re-extraction, the jobs and messages replayed (``uncounted``: jobs whose record has no
    LLM count)."""

    memories: int
    entities: int
    embedding_calls: int
    llm_calls: int = 0
    llm_tokens: int = 0
    jobs: int = 0
    messages: int = 0
    uncounted: int = 0


@dataclass
class Synced:
    """One kind's documents embedded anew (``embedded``) and found already built (``held``)."""

    embedded: int = 0
    held: int = 0


@dataclass(frozen=True)
class Reembedded:
    """What a run did: per kind, the source and the build, and the documents synced."""

    sources: dict[Kind, str]
    targets: dict[Kind, str]
    synced: dict[Kind, Synced] = field(default_factory=dict)
    dropped: bool = False


class Pace:
    """At most ``per_s`` documents a second over the run (None: as fast as it goes)."""

    def __init__(self, per_s: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        if per_s is not None and per_s <= 0:
            raise InvalidInputError("--rate must be above 0 documents a second", field="rate")
        self.per_s = per_s
        self._clock = clock
        self._start = clock()
        self._done = 0

    def page_size(self) -> int:
        return PAGE_SIZE if self.per_s is None else max(1, min(PAGE_SIZE, int(self.per_s)))

    def after(self, count: int) -> None:
        self._done += count
        if self.per_s is not None:
            time.sleep(max(0.0, self._start + self._done / self.per_s - self._clock()))


def plan(client: Elasticsearch, names: IndexNames, batch_size: int) -> Plan:
    """The texts a re-embedding would embed, and the embedding calls (``batch_size`` a call)."""
    counts = {kind: count(client, names.alias(kind)) for kind in KINDS}
    calls = sum(math.ceil(n / batch_size) for n in counts.values())
    return Plan(counts[Kind.MEMORIES], counts[Kind.ENTITIES], calls)


def reembed(
    client: Elasticsearch,
    config: ElasticsearchConfig,
    spec: EmbedderSpec,
    embedder: Embedder,
    *,
    rate_per_s: float | None = None,
    progress: Progress = lambda _: None,
    drop_old: bool = False,
) -> Reembedded:
    """Build (or resume) the version of ``spec`` for memories and entities, embedding with
    ``embedder``, and switch to it (see the module doc). Raises ``InvalidInputError`` when
    the indices already use ``spec`` or the embedder is not of ``spec.dims``, and
    ``ConfigurationError`` when an alias is missing or points at several indices."""
    if embedder.dims != spec.dims:
        raise InvalidInputError(f"the embedder makes {embedder.dims} dims, not {spec.dims}")
    names = IndexNames(config.index_prefix)
    pace = Pace(rate_per_s)
    sources = {kind: single_index(client, names.alias(kind)) for kind in KINDS}
    targets = check_new(client, names, spec)
    for kind in KINDS:
        prepare_build(client, sources[kind], targets[kind], kind, spec)
    lift_block(client, ",".join(sources.values()))
    report = ProgressWriter(MetaSink(client, list(targets.values())), REEMBED)
    try:
        done = rebuild(
            client,
            Reembedded(sources, targets),
            embedder=embedder,
            spec=spec,
            pace=pace,
            progress=progress,
            report=report,
            names=names,
        )
    except BaseException as exc:
        report.failed(exc)
        raise
    put_templates(client, config, spec.dims, spec.meta())
    if drop_old:
        with es_errors("drop the old versions"):
            client.indices.delete(index=",".join(sources.values()))
    return Reembedded(sources, targets, done.synced, drop_old)


def build_names(names: IndexNames, spec: EmbedderSpec) -> dict[Kind, str]:
    """The build of each kind for ``spec``: named by its digest, so a rerun finds it."""
    return {kind: f"{names.alias(kind)}-v{SCHEMA_VERSION}-e{spec.digest}" for kind in KINDS}


def check_new(
    client: Elasticsearch,
    names: IndexNames,
    spec: EmbedderSpec,
    default: EmbedderSpec | None = None,
) -> dict[Kind, str]:
    """The builds a re-embedding with ``spec`` would fill; ``ConflictError`` when the
    version in use is of ``spec`` already: its own build, or a version whose mapping names
    ``spec`` (one made before specs is of ``default``, the settings' embedder)."""
    targets = build_names(names, spec)
    meta = stored_embedder(client, names.memories)
    in_use = EmbedderSpec.model_validate(meta) if meta is not None else default
    if in_use == spec or single_index(client, names.memories) == targets[Kind.MEMORIES]:
        raise ConflictError(f"the indices already hold vectors of {spec.describe()}")
    return targets


def rebuild(
    client: Elasticsearch,
    done: Reembedded,
    *,
    embedder: Embedder,
    spec: EmbedderSpec,
    pace: Pace,
    progress: Progress,
    report: ProgressWriter,
    names: IndexNames,
) -> Reembedded:
    """Sync each kind's build, then switch; ``report`` told of each page and stage."""
    for kind in KINDS:
        done.synced[kind] = sync(
            client,
            kind,
            done.sources[kind],
            done.targets[kind],
            embedder=embedder,
            spec=spec,
            pace=pace,
            progress=progress,
            report=report,
        )
    switch(client, names, done, embedder=embedder, spec=spec, progress=progress, report=report)
    report.stage(Stage.SWITCHED)
    return done


def prepare_build(
    client: Elasticsearch,
    source: str,
    target: str,
    kind: Kind,
    spec: EmbedderSpec,
    *,
    reprocess: dict[str, Any] | None = None,
) -> None:
    """Make the build of ``kind`` (with the source's shard and replica counts), or keep the
    one a stopped run left. ``reprocess``: what its ``_meta.reprocess`` says besides its
    source (default: a re-embedding)."""
    with es_errors(f"look for {target}"):
        if client.indices.exists(index=target):
            return
        settings = client.indices.get_settings(index=source).body[source]["settings"]["index"]
    mapping = mappings(kind, spec.dims, spec.meta())
    mapping["_meta"]["reprocess"] = (reprocess or {"mode": REEMBED}) | {"source": source}
    with es_errors(f"create {target}"):
        client.indices.create(
            index=target,
            settings={
                "number_of_shards": int(settings["number_of_shards"]),
                "number_of_replicas": int(settings["number_of_replicas"]),
            },
            mappings=mapping,
        )


def sync(
    client: Elasticsearch,
    kind: Kind,
    source: str,
    target: str,
    *,
    embedder: Embedder,
    spec: EmbedderSpec,
    pace: Pace,
    progress: Progress = lambda _: None,
    report: ProgressWriter | None = None,
) -> Synced:
    """Embed into ``target`` each document of ``source`` it lacks at its version; ``report``
    told of each page (the catch-up passes none: its stage says enough)."""
    synced = Synced()
    total = count(client, source)
    if report is not None:  # a new kind: written at once
        report.advance(kind.value, 0, total)
    for hits in pages(client, source, with_source=True, size=pace.page_size()):
        held = versions(client, target, [h["_id"] for h in hits])
        stale = [h for h in hits if held.get(h["_id"]) != h["_version"]]
        if stale:
            write_embedded(client, kind, target, stale, embedder=embedder, spec=spec)
        synced.embedded += len(stale)
        synced.held += len(hits) - len(stale)
        pace.after(len(stale))
        progress(f"{kind.value}: {synced.embedded + synced.held}/{total} in {target}")
        if report is not None:
            report.advance(kind.value, synced.embedded + synced.held, total)
    return synced


def write_embedded(
    client: Elasticsearch,
    kind: Kind,
    target: str,
    hits: list[dict[str, Any]],
    *,
    embedder: Embedder,
    spec: EmbedderSpec,
) -> None:
    """Write ``hits`` into ``target`` with new vectors, as ``memq reindex`` copies them (their
    source version, routing; a 409: the build holds a newer one already); a memory's
    ``REPROCESS`` history row beside it."""
    vectors = embedder.embed([text_of(kind, h["_source"]) for h in hits])
    embedded = [
        {**hit, "_source": {**hit["_source"], "embedding": vector}}
        for hit, vector in zip(hits, vectors, strict=True)
    ]
    write_copies(client, kind, target, embedded)
    if kind is Kind.MEMORIES:
        write_history(client, target, hits, f"{REEMBED} with {spec.describe()}")


def text_of(kind: Kind, source: dict[str, Any]) -> str:
    """What was embedded for a document: a memory's ``Speaker: text``, an entity's name."""
    text = str(source.get("text", ""))
    return embedding_text(text, source.get("speaker")) if kind is Kind.MEMORIES else text


def write_history(
    client: Elasticsearch, target: str, hits: list[dict[str, Any]], note: str
) -> None:
    """One ``REPROCESS`` row per memory and build (created once: a resumed run adds none),
    ``note`` saying how it was rebuilt."""
    alias = target.split(f"-{Kind.MEMORIES.value}-", maxsplit=1)[0] + f"-{Kind.HISTORY.value}"
    now = utcnow().isoformat()
    ops: list[dict[str, Any]] = []
    for hit in hits:
        memory, source = hit["_id"], hit["_source"]
        row = history_id(memory, REPROCESS_EVENT, target)
        scope = {k: source[k] for k in ("tenant", "user_id", "agent_id", "run_id") if k in source}
        ops.append(
            {"create": {"_index": alias, "_id": row, "routing": history_routing(memory, row)}}
        )
        ops.append(
            scope
            | {
                "memory_id": memory,
                "event": REPROCESS_EVENT,
                "job_id": f"reprocess:{target}",
                "actor": "reprocess",
                "old": source.get("text"),
                "new": note,
                "created_at": now,
            }
        )
    with es_errors("write reprocess history"):
        body = client.bulk(operations=ops).body
    raise_item_errors(body, "write reprocess history", allowed=frozenset({409}))


def switch(
    client: Elasticsearch,
    names: IndexNames,
    done: Reembedded,
    *,
    embedder: Embedder,
    spec: EmbedderSpec,
    progress: Progress,
    report: ProgressWriter | None = None,
) -> None:
    """Pause writes to the sources, bring the builds level, move both aliases at once."""
    sources = ",".join(done.sources.values())
    with paused(client, sources):
        progress(f"writes to {sources} paused for the catch-up")
        with es_errors("refresh before the catch-up"):
            client.indices.refresh(index=f"{sources},{','.join(done.targets.values())}")
        actions: list[dict[str, Any]] = []
        for kind in KINDS:
            source, target = done.sources[kind], done.targets[kind]
            if report is not None:
                report.stage(Stage.CATCH_UP, kind.value)
            again = sync(
                client, kind, source, target, embedder=embedder, spec=spec, pace=Pace(None)
            )
            deleted = delete_gone(client, source, target)
            progress(f"{kind.value}: caught up ({again.embedded} embedded, {deleted} deleted)")
            alias = names.alias(kind)
            actions += [
                {"remove": {"index": source, "alias": alias}},
                {"add": {"index": target, "alias": alias, "is_write_index": True}},
            ]
        with es_errors("move the aliases"):
            client.indices.refresh(index=",".join(done.targets.values()))
            client.indices.update_aliases(actions=actions)
    progress(f"now {', '.join(done.targets.values())}, vectors of {spec.describe()}")


@contextmanager
def paused(client: Elasticsearch, indices: str) -> Iterator[None]:
    """Writes to ``indices`` blocked for the block's body; lifted again if it fails. After a
    switch the block stays: an old version is read-only until it is dropped."""
    with es_errors(f"pause writes to {indices}"):
        client.indices.put_settings(index=indices, settings={"index.blocks.write": True})
    try:
        yield
    except BaseException:
        lift_block(client, indices)
        raise


def lift_block(client: Elasticsearch, indices: str) -> None:
    """Writes to the versions in use allowed again: a run killed in its catch-up left them
    blocked, and writes would be refused until the resumed run switched."""
    with es_errors(f"resume writes to {indices}"):
        client.indices.put_settings(index=indices, settings={"index.blocks.write": False})


def count(client: Elasticsearch, index: str) -> int:
    with es_errors(f"count {index}"):
        return int(client.count(index=index)["count"])


@dataclass(frozen=True)
class Version:
    """One index version of a vector kind, as ``GET /v1/admin/reprocess`` shows it."""

    index: str
    state: str  # "in use", "building" (a build of the version in use), "old"
    documents: int
    embedder: dict[str, Any] | None  # None: the settings' embedder (made before specs)
    progress: BuildProgress | None = None  # a reprocess's last word on this version's build


def versions_of(client: Elasticsearch, names: IndexNames) -> dict[Kind, list[Version]]:
    """Every version of the memories and entities: the one in use, builds and old ones."""
    found: dict[Kind, list[Version]] = {}
    for kind in KINDS:
        alias = names.alias(kind)
        with es_errors(f"read the versions of {alias}"):
            current = single_index(client, alias)
            indices = client.indices.get(index=f"{alias}-v*", features=["mappings"]).body
            documents = documents_of(client, f"{alias}-v*")
        found[kind] = [
            version_of(index, body["mappings"].get("_meta", {}), current, documents.get(index, 0))
            for index, body in sorted(indices.items())
        ]
    return found


def documents_of(client: Elasticsearch, pattern: str) -> dict[str, int]:
    """How many documents each index matching ``pattern`` holds, from the index stats: unlike
    a count, they answer for an index whose shards are still starting (a build just created,
    counted 0) and leave out one deleted meanwhile, so the status never fails on either."""
    stats = client.indices.stats(index=pattern, metric="docs").body.get("indices", {})
    return {
        index: int(body.get("primaries", {}).get("docs", {}).get("count", 0))
        for index, body in stats.items()
    }


def version_of(index: str, meta: dict[str, Any], current: str, documents: int) -> Version:
    reprocess = meta.get("reprocess", {})
    building = reprocess.get("source") == current
    state = "in use" if index == current else "building" if building else "old"
    progress = BuildProgress.from_meta(reprocess.get("progress"))
    return Version(index, state, documents, meta.get("embedder"), progress)


def drop_old(client: Elasticsearch, names: IndexNames) -> list[str]:
    """Delete the old versions (neither in use nor a build of the one in use)."""
    old = [
        version.index
        for versions in versions_of(client, names).values()
        for version in versions
        if version.state == "old"
    ]
    if old:
        with es_errors("drop the old versions"):
            client.indices.delete(index=",".join(old))
    return old
