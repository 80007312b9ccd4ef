"""Export and import of a tenant's memories as JSON lines.

A dump is one header line, one line per memory, and an end line::

    {"type": "header", "format": "memq-export", "version": 1, "tenant": ..., "selector": {...},
     "history": bool, "vectors": bool, "embedding_model": ..., "dims": ..., "exported_at": ...}
    {"type": "memory", "id": ..., "text": ..., "scope": {...}, "hash": ..., "metadata": {...},
     "created_at": ..., ..., "entities": [{"id", "text", "normalized", "type"}],
     "history": [...]?, "embedding": [...]?}
    {"type": "end", "memories": N}

The end line tells a complete dump from one cut short (a dropped connection, a full disk).

``export_lines`` streams a page of memories at a time (constant memory at any size). ``restore``
reads a dump twice: first it checks every line (nothing is written if any is wrong), then it
writes batch by batch under the dump's ids, so importing the same dump again changes nothing.
Vectors are reused when the dump names the embedding model memq runs with (and its size);
otherwise they are computed again. Into another tenant, ids are mapped deterministically (ids
embed the scope), so that import is idempotent too.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.domain.models import (
    NAMESPACE,
    AwareDatetime,
    Identifier,
    Scope,
    check_metadata,
    entity_id,
)
from pipeline.errors import InvalidInputError
from pipeline.ingestion.deps import Deps
from pipeline.store.derived import with_derived
from pipeline.store.dump import DumpStore
from pipeline.store.elastic import ElasticStore
from pipeline.store.filters import metadata_pairs
from pipeline.store.protocol import EntityDoc, EntityLink, without_none
from pipeline.store.reads import DumpedEntity, DumpedHistoryRow, DumpedMessage
from pipeline.store.routing import scope_routing

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

FORMAT = "memq-export"
VERSION = 1
IMPORT_BATCH = 500
_MEMORY_FIELDS = (
    "actor_id",
    "role",
    "attributed_to",
    "memory_type",
    "language",
    "hash",
    "job_id",
    "metadata",
    "created_at",
    "updated_at",
    "observed_at",
    "expiration_date",
    "valid_until",
    "replaced_by",
    "replaces",
    "feedback",
    "feedback_reason",
    "feedback_at",
    "turn",
    "source_ids",
)


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Selector(_Line):
    """Which memories: a tenant, narrowed by any of user, agent, run."""

    tenant: Identifier
    user_id: Identifier | None = None
    agent_id: Identifier | None = None
    run_id: Identifier | None = None

    def fields(self) -> dict[str, str]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Header(_Line):
    type: Literal["header"]
    format: Literal["memq-export"]
    version: Literal[1]
    tenant: Identifier
    selector: Selector
    history: bool
    vectors: bool
    sources: bool = False  # whether memories carry their source messages (absent before)
    embedding_model: str | None = None
    dims: int | None = Field(default=None, ge=1, le=4096)
    exported_at: AwareDatetime


class EntityLine(_Line):
    id: str = Field(min_length=1, max_length=128)
    text: str = Field(min_length=1, max_length=1000)
    normalized: str = Field(min_length=1, max_length=1000)
    type: str = Field(max_length=100)
    embedding: list[float] | None = None


class HistoryLine(_Line):
    id: str = Field(min_length=1, max_length=128)
    event: str = Field(min_length=1, max_length=20)
    job_id: str = ""
    created_at: AwareDatetime
    old: str | None = None
    new: str | None = None
    actor: str | None = None
    replaced_by: str | None = None


class MessageLine(_Line):
    """A message a memory came from (``pipeline.features.provenance``), as the messages index has
    it."""

    id: str = Field(min_length=1, max_length=128)
    role: str = Field(max_length=32)
    name: str | None = Field(default=None, max_length=128)
    content: str = Field(max_length=200_000)
    created_at: AwareDatetime
    job_id: str = Field(min_length=1, max_length=128)
    seq: int = Field(ge=0)


class MemoryLine(_Line):
    type: Literal["memory"]
    id: str = Field(pattern=r"^\S{1,128}$")
    text: str = Field(min_length=1, max_length=20_000)
    scope: Scope
    hash: str = Field(min_length=1, max_length=128)
    job_id: str = ""
    actor_id: Identifier | None = None
    role: str = "user"
    attributed_to: str = "user"
    memory_type: str | None = None
    language: str = "en"
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: AwareDatetime
    updated_at: AwareDatetime | None = None
    observed_at: AwareDatetime | None = None
    expiration_date: AwareDatetime | None = None
    valid_until: AwareDatetime | None = None  # validity (pipeline.domain.validity)
    replaced_by: list[str] = Field(default_factory=list, max_length=1000)
    replaces: list[str] = Field(default_factory=list, max_length=1000)
    feedback: Literal["POSITIVE", "NEGATIVE", "VERY_NEGATIVE"] | None = None
    feedback_reason: str | None = Field(default=None, max_length=2000)
    feedback_at: AwareDatetime | None = None
    # provenance (``pipeline.features.provenance``); absent from dumps made before it
    turn: int | None = Field(default=None, ge=0)
    source_ids: list[str] = Field(default_factory=list, max_length=100_000)
    entities: list[EntityLine] = Field(default_factory=list, max_length=1000)
    history: list[HistoryLine] | None = None
    sources: list[MessageLine] | None = Field(default=None, max_length=10_000)
    embedding: list[float] | None = None


class EndLine(_Line):
    type: Literal["end"]
    memories: int = Field(ge=0)


# --- export -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportOptions:
    selector: Selector
    history: bool = False
    vectors: bool = False
    sources: bool = False


def export_lines(
    store: ElasticStore,
    options: ExportOptions,
    embedding_model: str,
    dims: int,
    now: datetime,
) -> Generator[str]:
    """The dump of ``options.selector`` as JSON lines (each ending in a newline), a page of
    memories at a time. A failure mid-way raises, and the dump then lacks its end line."""
    dump = DumpStore(store)
    dump.refresh()  # a memory stored a moment before the export is in it
    pages = dump.memory_pages(options.selector.fields(), options.vectors)
    first = next(pages, [])  # reach the store before the header: a caller can still refuse
    yield _json(header(options, embedding_model, dims, now))
    count = 0
    for page in itertools.chain([first], pages):
        for line in memory_lines(dump, page, options):
            yield _json(line)
        count += len(page)
    yield _json({"type": "end", "memories": count})


def header(options: ExportOptions, model: str, dims: int, now: datetime) -> dict[str, Any]:
    return {
        "type": "header",
        "format": FORMAT,
        "version": VERSION,
        "tenant": options.selector.tenant,
        "selector": options.selector.fields(),
        "history": options.history,
        "vectors": options.vectors,
        "sources": options.sources,
        "embedding_model": model if options.vectors else None,
        "dims": dims if options.vectors else None,
        "exported_at": now.isoformat(),
    }


def memory_lines(
    dump: DumpStore, page: list[dict[str, Any]], options: ExportOptions
) -> list[dict[str, Any]]:
    """One page of stored memories as dump lines: one mget for their entities, and (when
    asked) one paged read of their history."""
    entity_ids = sorted({e for item in page for e in item.get("entity_ids", [])})
    entities = dump.entities(entity_ids, options.vectors)
    history = dump.history([item["id"] for item in page]) if options.history else {}
    messages = dump.messages(page) if options.sources else {}
    lines = []
    for item in page:
        line = memory_line(item, entities)
        if options.history:
            line["history"] = [history_line(row) for row in history.get(item["id"], [])]
        if options.sources:
            found = [i for i in item.get("source_ids", []) if i in messages]
            line["sources"] = [message_line(messages[i]) for i in found]
        if options.vectors:
            line["embedding"] = item.get("embedding")
        lines.append(line)
    return lines


def memory_line(item: dict[str, Any], entities: Mapping[str, DumpedEntity]) -> dict[str, Any]:
    scope = {k: item[k] for k in ("tenant", "user_id", "agent_id", "run_id") if k in item}
    linked = [entity_line(entities[e]) for e in item.get("entity_ids", []) if e in entities]
    fields = {k: item[k] for k in _MEMORY_FIELDS if item.get(k) is not None}
    return (
        {"type": "memory", "id": item["id"], "text": item["text"], "scope": scope}
        | fields
        | {"entities": linked}
    )


def entity_line(entity: DumpedEntity) -> dict[str, Any]:
    line: dict[str, Any] = {
        "id": entity.id,
        "text": entity.text,
        "normalized": entity.normalized,
        "type": entity.type,
    }
    if entity.has_embedding:
        line["embedding"] = entity.embedding
    return line


def message_line(message: DumpedMessage) -> dict[str, Any]:
    keep = ("id", "role", "name", "content", "created_at", "job_id", "seq")
    return present_fields(message, keep)


def history_line(row: DumpedHistoryRow) -> dict[str, Any]:
    keep = ("id", "event", "job_id", "created_at", "old", "new", "actor", "replaced_by")
    return present_fields(row, keep)


def present_fields(read: BaseModel, keep: tuple[str, ...]) -> dict[str, Any]:
    """The fields ``keep`` of a read that have a value, in that order."""
    values = ((name, getattr(read, name)) for name in keep)
    return {name: value for name, value in values if value is not None}


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


# --- import -----------------------------------------------------------------------------------


@dataclass
class ImportReport:
    """What an import did: memories and history rows written, and how vectors were had."""

    memories: int = 0
    history: int = 0
    messages: int = 0
    entities: int = 0
    vectors_reused: bool = False
    tenant: str = ""
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    """What the check pass learnt: the header, the target tenant, whether vectors are reused."""

    header: Header
    tenant: str
    reuse_vectors: bool


Lines = Callable[[], Iterable[str]]
"""Opens the dump afresh on each call (``restore`` reads it twice)."""


def check_dump(lines: Iterable[str], model: str, dims: int, tenant: str | None) -> Plan:
    """Read the whole dump and refuse it, naming the line, unless every line is valid and it
    ends with an end line whose count matches. Writes nothing."""
    header: Header | None = None
    count = 0
    ended = False
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if ended:
            raise InvalidInputError(f"line {number}: text after the end line")
        value = parse_line(raw, number)
        if header is None:
            header = as_header(value, number)
            continue
        if value.get("type") == "end":
            end = validated(EndLine, value, number)
            if end.memories != count:
                raise InvalidInputError(
                    f"line {number}: the end line counts {end.memories} memories; "
                    f"the dump holds {count}"
                )
            ended = True
            continue
        check_memory(validated(MemoryLine, value, number), header, number)
        count += 1
    if header is None:
        raise InvalidInputError("the dump is empty: no header line")
    if not ended:
        raise InvalidInputError("the dump has no end line: it was cut short")
    reuse = header.vectors and header.embedding_model == model and header.dims == dims
    return Plan(header=header, tenant=tenant or header.tenant, reuse_vectors=reuse)


def parse_line(raw: str, number: int) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise InvalidInputError(f"line {number}: not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise InvalidInputError(f"line {number}: not a JSON object")
    return value


def as_header(value: dict[str, Any], number: int) -> Header:
    if value.get("type") != "header" or value.get("format") != FORMAT:
        raise InvalidInputError(f"line {number}: not a memq export (no memq-export header)")
    header = validated(Header, value, number)
    if header.vectors and (header.embedding_model is None or header.dims is None):
        raise InvalidInputError(
            f"line {number}: the dump has vectors but does not name their model and size"
        )
    return header


def validated(model: type[M], value: dict[str, Any], number: int) -> M:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "line"
        raise InvalidInputError(f"line {number}: {where}: {error['msg']}") from exc


def check_memory(line: MemoryLine, header: Header, number: int) -> None:
    """Beyond the line's own schema: its tenant is the dump's, its metadata is bounded, and a
    vector has the size the header names."""
    if line.scope.tenant != header.tenant:
        raise InvalidInputError(
            f"line {number}: memory of tenant {line.scope.tenant!r} in a dump of {header.tenant!r}"
        )
    try:
        check_metadata(line.metadata)
    except ValueError as exc:
        raise InvalidInputError(f"line {number}: metadata: {exc}") from exc
    if header.vectors and line.embedding is None:
        raise InvalidInputError(f"line {number}: the header promises vectors; this has none")
    vectors = [line.embedding] + [e.embedding for e in line.entities]
    for vector in vectors:
        if vector is not None and len(vector) != header.dims:
            raise InvalidInputError(
                f"line {number}: a vector of {len(vector)} numbers, but the header says "
                f"{header.embedding_model} makes {header.dims}"
            )


def restore(
    store: ElasticStore,
    deps: Deps,
    lines: Lines,
    *,
    model: str,
    dims: int,
    tenant: str | None = None,
) -> ImportReport:
    """Check the whole dump, then write it batch by batch. Raises ``InvalidInputError`` (and
    writes nothing) for a bad dump, or when one of its ids belongs to another tenant."""
    plan = check_dump(lines(), model, dims, tenant)
    report = ImportReport(vectors_reused=plan.reuse_vectors, tenant=plan.tenant)
    for batch in batches(memories_of(lines()), IMPORT_BATCH):
        write_batch(store, deps, plan, batch, report)
    store.make_visible()
    return report


def memories_of(lines: Iterable[str]) -> Iterator[MemoryLine]:
    """The memory lines of a dump already checked by ``check_dump``."""
    for raw in lines:
        if raw.strip():
            value = json.loads(raw)
            if value.get("type") == "memory":
                yield MemoryLine.model_validate(value)


def batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def write_batch(
    store: ElasticStore, deps: Deps, plan: Plan, batch: Sequence[MemoryLine], report: ImportReport
) -> None:
    """Memories, then their history rows, then their entities (which set ``entity_ids``)."""
    dump = DumpStore(store)
    mapped = [retarget(line, plan) for line in batch]
    refuse_foreign(dump, plan.tenant, [line.id for line in mapped])
    vectors = memory_vectors(deps, mapped, plan.reuse_vectors)
    dump.put_memories(
        {
            line.id: memory_source(line, deps, vector)
            for line, vector in zip(mapped, vectors, strict=True)
        }
    )
    rows = {row_id: source for line in mapped for row_id, source in history_sources(line)}
    dump.put_history(rows)
    messages = {i: routed for line in mapped for i, routed in message_sources(line)}
    dump.put_messages(messages)
    links = entity_links(deps, mapped, plan.reuse_vectors)
    store.link_entities(links)
    report.memories += len(mapped)
    report.history += len(rows)
    report.messages += len(messages)
    report.entities += len(links)


def retarget(line: MemoryLine, plan: Plan) -> MemoryLine:
    """The line as it lands in ``plan.tenant``: unchanged for its own tenant; for another,
    the scope's tenant replaced and every id mapped (uuid5 of the new tenant and the old id;
    entity ids as memq makes them, from the scope and the name)."""
    if plan.tenant == line.scope.tenant:
        return line
    scope = line.scope.model_copy(update={"tenant": plan.tenant})
    entities = [e.model_copy(update={"id": entity_id(scope, e.normalized)}) for e in line.entities]
    history = [
        h.model_copy(
            update={
                "id": moved(plan.tenant, h.id),
                "replaced_by": moved(plan.tenant, h.replaced_by) if h.replaced_by else None,
            }
        )
        for h in line.history or []
    ]
    return line.model_copy(
        update={
            "id": moved(plan.tenant, line.id),
            "scope": scope,
            "entities": entities,
            "history": history if line.history is not None else None,
            "replaced_by": [moved(plan.tenant, i) for i in line.replaced_by],
            "replaces": [moved(plan.tenant, i) for i in line.replaces],
            "source_ids": [moved(plan.tenant, i) for i in line.source_ids],
            "sources": [m.model_copy(update={"id": moved(plan.tenant, m.id)}) for m in line.sources]
            if line.sources is not None
            else None,
        }
    )


def moved(tenant: str, old_id: str) -> str:
    return str(uuid.uuid5(NAMESPACE, f"import\x1f{tenant}\x1f{old_id}"))


def refuse_foreign(dump: DumpStore, tenant: str, ids: Sequence[str]) -> None:
    """A dump never overwrites another tenant's memory."""
    foreign = sorted(i for i, owner in dump.owners(ids).items() if owner != tenant)
    if foreign:
        raise InvalidInputError(
            f"memory {foreign[0]} belongs to another tenant; import into that tenant or "
            "another memq"
        )


def memory_vectors(deps: Deps, lines: Sequence[MemoryLine], reuse: bool) -> list[list[float]]:
    if reuse:
        return [list(line.embedding or []) for line in lines]
    return deps.embedder.embed([line.text for line in lines])


def memory_source(line: MemoryLine, deps: Deps, vector: list[float]) -> dict[str, Any]:
    """The stored document: the dump's fields, lemmas made here, entity ids as exported."""
    doc: dict[str, Any] = {
        **line.scope.fields(),
        "text": line.text,
        "text_lemmatized": deps.lemmatizer.lemmatize(line.text),
        "embedding": vector,
        "hash": line.hash,
        "job_id": line.job_id,
        "role": line.role,
        "attributed_to": line.attributed_to,
        "language": line.language,
        "metadata": line.metadata,
        "metadata_kv": metadata_pairs(line.metadata),
        "entity_ids": [e.id for e in line.entities],
        "created_at": line.created_at.isoformat(),
        "updated_at": (line.updated_at or line.created_at).isoformat(),
        "observed_at": (line.observed_at or line.created_at).isoformat(),
    }
    optional = {
        "actor_id": line.actor_id,
        "memory_type": line.memory_type,
        "expiration_date": line.expiration_date.isoformat() if line.expiration_date else None,
        "valid_until": line.valid_until.isoformat() if line.valid_until else None,
        "replaced_by": line.replaced_by or None,
        "replaces": line.replaces or None,
        "feedback": line.feedback,
        "feedback_reason": line.feedback_reason,
        "feedback_at": line.feedback_at.isoformat() if line.feedback_at else None,
        "turn": line.turn,
        "source_ids": line.source_ids or None,
    }
    return with_derived(doc | without_none(optional))


def message_sources(line: MemoryLine) -> Iterator[tuple[str, tuple[dict[str, Any], str]]]:
    """The line's source messages as the messages index keeps them, each with its routing
    (its scope's, as the pipeline writes them)."""
    routing = scope_routing(line.scope)
    for message in line.sources or []:
        source = {
            **line.scope.fields(),
            "kind": "message",
            "session_key": line.scope.key,
            "job_id": message.job_id,
            "seq": message.seq,
            "role": message.role,
            "name": message.name,
            "content": message.content,
            "created_at": message.created_at.isoformat(),
        }
        yield message.id, (source, routing)


def history_sources(line: MemoryLine) -> Iterator[tuple[str, dict[str, Any]]]:
    for row in line.history or []:
        source = {
            **line.scope.fields(),
            "memory_id": line.id,
            "event": row.event,
            "job_id": row.job_id,
            "created_at": row.created_at.isoformat(),
        }
        texts = {"old": row.old, "new": row.new, "actor": row.actor}
        yield row.id, source | without_none({**texts, "replaced_by": row.replaced_by})


def entity_links(deps: Deps, lines: Sequence[MemoryLine], reuse: bool) -> list[EntityLink]:
    """One link per entity of the batch, to every memory of the batch naming it; vectors
    from the dump when reused, else one batch embed of the names."""
    memories: dict[str, list[str]] = {}
    entities: dict[str, tuple[EntityLine, Scope, datetime]] = {}
    for line in lines:
        for entity in line.entities:
            memories.setdefault(entity.id, []).append(line.id)
            entities.setdefault(entity.id, (entity, line.scope, line.created_at))
    if not entities:
        return []
    ordered = list(entities.values())
    if reuse and all(e.embedding is not None for e, _, _ in ordered):
        vectors = [list(e.embedding or []) for e, _, _ in ordered]
    else:
        vectors = deps.embedder.embed([e.text for e, _, _ in ordered])
    links = []
    for (entity, scope, at), vector in zip(ordered, vectors, strict=True):
        doc = EntityDoc(
            id=entity.id,
            scope=scope,
            text=entity.text,
            normalized=entity.normalized,
            type=entity.type,
            embedding=vector,
            created_at=at,
        )
        links.append(EntityLink(entity=doc, memory_ids=memories[entity.id], target=entity.id))
    return links
