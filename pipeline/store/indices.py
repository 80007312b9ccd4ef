"""Index templates with explicit mappings for memq's five indices, applied idempotently.

Each kind of document lives in a concrete index ``{prefix}-{kind}-v{SCHEMA_VERSION}`` reached
through the alias ``{prefix}-{kind}``; code reads and writes through the alias only. The root of
every mapping is ``dynamic: strict``: a document with a field memq did not declare is refused, and
free-form user data sits in a ``flattened`` field, so no payload can grow the mapping.

Only core field types and the standard analyzer are used, so the same mappings work on the minimal
Elasticsearch distribution (server + x-pack core) and on the full official image.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from elasticsearch import BadRequestError, Elasticsearch, NotFoundError

from pipeline.config import ElasticsearchConfig
from pipeline.errors import ConfigurationError, PermanentError
from pipeline.store.client import error_reason, es_errors
from pipeline.store.columns import COLUMN_MAPPING, CONTENT_TERMS

# 2: memories, entities, messages and history require their routing (pipeline.store.routing)
SCHEMA_VERSION = 2

_KEYWORD: dict[str, Any] = {"type": "keyword"}
_DATE: dict[str, Any] = {"type": "date"}
_STORED_ONLY: dict[str, Any] = {"type": "object", "enabled": False}
# keyword fields of memories read whole, never filtered on by callers: no substrings
# (a memory's ``source_ids`` can be many uuids, each would add 36 suffixes; ``content_terms``
# is a ranking column, pipeline.store.columns)
WHOLE_VALUE_FIELDS = frozenset({"tenant", "source_ids", CONTENT_TERMS})
_SCOPE: dict[str, Any] = {
    "tenant": _KEYWORD,
    "user_id": _KEYWORD,
    "agent_id": _KEYWORD,
    "run_id": _KEYWORD,
}


class Kind(StrEnum):
    MEMORIES = "memories"
    ENTITIES = "entities"
    HISTORY = "history"
    MESSAGES = "messages"
    JOBS = "jobs"
    KEYS = "keys"


# the kinds whose documents carry a routing value (see pipeline.store.routing)
ROUTED = frozenset({Kind.MEMORIES, Kind.ENTITIES, Kind.HISTORY, Kind.MESSAGES})


@dataclass(frozen=True)
class IndexNames:
    """Alias and concrete index names for one ``index_prefix``."""

    prefix: str

    def alias(self, kind: Kind) -> str:
        return f"{self.prefix}-{kind.value}"

    def concrete(self, kind: Kind) -> str:
        return f"{self.alias(kind)}-v{SCHEMA_VERSION}"

    def template(self, kind: Kind) -> str:
        return f"{self.alias(kind)}-template"

    @property
    def memories(self) -> str:
        return self.alias(Kind.MEMORIES)

    @property
    def entities(self) -> str:
        return self.alias(Kind.ENTITIES)

    @property
    def history(self) -> str:
        return self.alias(Kind.HISTORY)

    @property
    def messages(self) -> str:
        return self.alias(Kind.MESSAGES)

    @property
    def jobs(self) -> str:
        return self.alias(Kind.JOBS)

    @property
    def keys(self) -> str:
        return self.alias(Kind.KEYS)


def _vector(dims: int) -> dict[str, Any]:
    return {
        "type": "dense_vector",
        "dims": dims,
        "index": True,
        "similarity": "cosine",
        "index_options": {"type": "int8_hnsw", "m": 16, "ef_construction": 100},
    }


def memory_properties(dims: int) -> dict[str, Any]:
    properties = _memory_fields(dims)
    return {**properties, "substrings": _substrings(properties)}


def _substrings(properties: dict[str, Any]) -> dict[str, Any]:
    """Where ``contains`` / ``icontains`` look (``pipeline.store.filters.substring_terms``): one
    keyword per keyword field but ``tenant``, and one for the metadata's values. A prefix query
    there is a seek in the term dictionary, where a ``*x*`` wildcard walked all of it."""
    suffixes = {"type": "keyword", "doc_values": False}
    names = [
        n
        for n, spec in properties.items()
        if spec.get("type") == "keyword" and n not in WHOLE_VALUE_FIELDS
    ]
    return {"type": "object", "properties": {n: suffixes for n in [*names, "metadata"]}}


def _memory_fields(dims: int) -> dict[str, Any]:
    return {
        **_SCOPE,
        "text": {"type": "text"},
        "text_lemmatized": {"type": "text"},
        "embedding": _vector(dims),
        "hash": _KEYWORD,
        "actor_id": _KEYWORD,
        "speaker": {"type": "text"},  # who said it, as words (added in place to v1)
        "role": _KEYWORD,
        "memory_type": _KEYWORD,
        "attributed_to": _KEYWORD,
        "job_id": _KEYWORD,
        "turn": {"type": "integer"},  # its message's place in the job (added in place to v1)
        # provenance: the ids of the messages it came from (added in place to v1)
        "source_ids": _KEYWORD,
        "language": _KEYWORD,
        "metadata": {"type": "flattened", "depth_limit": 20, "ignore_above": 1024},
        "metadata_kv": {"type": "keyword", "ignore_above": 1024},
        "entity_ids": _KEYWORD,
        "created_at": _DATE,
        "updated_at": _DATE,
        "observed_at": _DATE,
        "expiration_date": _DATE,
        # validity (pipeline.domain.validity), added in place to v1: when it stopped being true
        # (absent while it is), the memories that replaced it, and those it replaced
        "valid_until": _DATE,
        "replaced_by": _KEYWORD,
        "replaces": _KEYWORD,
        # a caller's verdict on the memory (pipeline.features.platform.Feedback), added in place
        "feedback": _KEYWORD,
        "feedback_reason": {"type": "text", "index": False},
        "feedback_at": _DATE,
        # what ranking reads without the source (pipeline.store.columns), added in place to v1
        **COLUMN_MAPPING,
    }


def entity_properties(dims: int) -> dict[str, Any]:
    return {
        **_SCOPE,
        "text": {"type": "text", "fields": {"raw": {"type": "keyword", "ignore_above": 512}}},
        "normalized": _KEYWORD,
        "type": _KEYWORD,
        "embedding": _vector(dims),
        "linked_memory_ids": _KEYWORD,
        "created_at": _DATE,
        "updated_at": _DATE,
    }


def history_properties() -> dict[str, Any]:
    return {
        **_SCOPE,
        "memory_id": _KEYWORD,
        "event": _KEYWORD,
        "old": {"type": "text", "index": False},
        "new": {"type": "text", "index": False},
        "actor": _KEYWORD,
        "job_id": _KEYWORD,
        "replaced_by": _KEYWORD,  # REPLACED rows: the memory that replaced it (added in place)
        "created_at": _DATE,
    }


def message_properties() -> dict[str, Any]:
    return {
        **_SCOPE,
        "kind": _KEYWORD,  # "message", or "window": a session's last messages in one document
        "session_key": _KEYWORD,
        "job_id": _KEYWORD,
        "seq": {"type": "long"},
        "window": _STORED_ONLY,
        "role": _KEYWORD,
        "name": _KEYWORD,
        "content": {"type": "text", "index": False},
        "created_at": _DATE,
    }


def job_properties() -> dict[str, Any]:
    return {
        "tenant": _KEYWORD,
        "job_id": _KEYWORD,
        "batch_id": _KEYWORD,
        "session_key": _KEYWORD,
        "user_id": _KEYWORD,
        "agent_id": _KEYWORD,
        "run_id": _KEYWORD,
        "status": _KEYWORD,
        "phase": _KEYWORD,
        "attempts": {"type": "integer"},
        "backfill": {"type": "boolean"},
        "parked": {"type": "boolean"},
        "request_id": _KEYWORD,
        "counts": {"type": "object", "dynamic": False},
        "timings_ms": {"type": "object", "dynamic": False},
        "reason": {"type": "text", "index": False},
        "errors": _STORED_ONLY,
        "results": _STORED_ONLY,
        "request": _STORED_ONLY,
        "created_at": _DATE,
        "updated_at": _DATE,
        "finished_at": _DATE,
    }


def key_properties() -> dict[str, Any]:
    return {
        "tenant": _KEYWORD,
        "name": _KEYWORD,
        "role": _KEYWORD,
        "secret_sha256": _KEYWORD,
        "created_at": _DATE,
        "revoked_at": _DATE,
    }


# the kinds that hold vectors: an index version of them is of one embedder (its ``_meta``)
VECTOR_KINDS = frozenset({Kind.MEMORIES, Kind.ENTITIES})

Meta = dict[str, Any]


def mappings(kind: Kind, dims: int, embedder: Meta | None = None) -> dict[str, Any]:
    """The explicit mapping of ``kind``; ``dims`` sizes the vector fields, and ``embedder``
    (``pipeline.adapters.embedding.versioned.EmbedderSpec``), when given, names the embedder whose
    vectors a vector kind holds."""
    properties = {
        Kind.MEMORIES: lambda: memory_properties(dims),
        Kind.ENTITIES: lambda: entity_properties(dims),
        Kind.HISTORY: history_properties,
        Kind.MESSAGES: message_properties,
        Kind.JOBS: job_properties,
        Kind.KEYS: key_properties,
    }[kind]()
    mapping: dict[str, Any] = {
        "dynamic": "strict",
        "_meta": {"memq_schema": SCHEMA_VERSION, "kind": kind.value, "dims": dims},
        "properties": properties,
    }
    if embedder is not None and kind in VECTOR_KINDS:
        mapping["_meta"]["embedder"] = embedder
    if kind in ROUTED:
        mapping["_routing"] = {"required": True}
    return mapping


def template_body(
    names: IndexNames,
    kind: Kind,
    config: ElasticsearchConfig,
    dims: int,
    embedder: Meta | None = None,
) -> Any:
    return {
        "index_patterns": [f"{names.alias(kind)}-v*"],
        "priority": 500,
        "version": SCHEMA_VERSION,
        "_meta": {"managed_by": "memq", "memq_schema": SCHEMA_VERSION},
        "template": {
            "settings": {
                "number_of_shards": config.shards,
                "number_of_replicas": config.replicas,
                "index.mapping.total_fields.limit": 200,
            },
            "mappings": mappings(kind, dims, embedder),
        },
    }


def ensure_indices(client: Elasticsearch, config: ElasticsearchConfig, dims: int) -> IndexNames:
    """Put every template and create every index with its alias, if missing. Safe to repeat.

    ``dims`` is the size of the settings' embedder; an index version that names its own
    embedder (built by ``memq reprocess --reembed``) keeps its size and its embedder, which the
    process follows (``pipeline.adapters.embedding.versioned``).

    Raises ``ConfigurationError`` when an existing index was built for another vector size, and
    ``TransientError`` when Elasticsearch cannot be reached.
    """
    names = IndexNames(config.index_prefix)
    dims, embedder = vectors_in_use(client, names, dims)
    for kind in Kind:
        _check_dims(client, names, kind, dims)
        _check_routing(client, names, kind)
    put_templates(client, config, dims, embedder)
    for kind in Kind:
        _ensure_index(client, names, kind)
        _add_new_fields(client, names, kind, dims, embedder)
    # imported here: pipeline.store.filters reads the memories mapping from this module
    from pipeline.store.derived import fill_derived

    fill_derived(client, names.memories)
    return names


def put_templates(
    client: Elasticsearch, config: ElasticsearchConfig, dims: int, embedder: Meta | None = None
) -> None:
    """Put the index template of every kind (the mapping and settings a new index gets)."""
    names = IndexNames(config.index_prefix)
    for kind in Kind:
        with es_errors(f"put index template {names.template(kind)}"):
            client.indices.put_index_template(
                name=names.template(kind), **template_body(names, kind, config, dims, embedder)
            )


def vectors_in_use(client: Elasticsearch, names: IndexNames, dims: int) -> tuple[int, Meta | None]:
    """The vector size and embedder of the memories index in use: those its ``_meta`` names,
    or ``dims`` and None when it names none (or does not exist yet)."""
    embedder = stored_embedder(client, names.memories)
    return (int(embedder["dims"]), embedder) if embedder else (dims, None)


def stored_embedder(client: Elasticsearch, alias: str) -> Meta | None:
    """``_meta.embedder`` of the index behind ``alias``, or None."""
    with es_errors(f"read mapping of {alias}"):
        try:
            found = client.indices.get_mapping(index=alias)
        except NotFoundError:
            return None
    for body in found.body.values():
        embedder = body["mappings"].get("_meta", {}).get("embedder")
        if isinstance(embedder, dict):
            return embedder
    return None


def _add_new_fields(
    client: Elasticsearch, names: IndexNames, kind: Kind, dims: int, embedder: Meta | None
) -> None:
    """Bring an existing index up to the declared mapping. Adding fields is allowed in place;
    a changed field is a conflict that needs a new versioned index, reported as such."""
    declared = mappings(kind, dims, embedder)
    declared.pop("_routing", None)  # fixed when the index is made; checked by _check_routing
    try:
        with es_errors(f"update the mapping of {names.alias(kind)}"):
            client.indices.put_mapping(
                index=names.alias(kind), properties=declared["properties"], meta=declared["_meta"]
            )
    except PermanentError as exc:
        raise ConfigurationError(
            f"{names.alias(kind)} has a mapping this memq cannot extend in place ({exc.reason}); "
            "it needs a new index version"
        ) from exc


def _ensure_index(client: Elasticsearch, names: IndexNames, kind: Kind) -> None:
    with es_errors(f"create index {names.concrete(kind)}"):
        if client.indices.exists_alias(name=names.alias(kind)):
            return
        try:
            client.indices.create(
                index=names.concrete(kind), aliases={names.alias(kind): {"is_write_index": True}}
            )
        except BadRequestError as exc:
            if "resource_already_exists" not in error_reason(exc.body):
                raise


def _check_routing(client: Elasticsearch, names: IndexNames, kind: Kind) -> None:
    """An index made before routing (schema 1) may go on with one shard: every routing value
    leads to that shard, so its documents are all found. With more shards they were placed by
    id, and a routed read would miss them: refused, with the way out."""
    if kind not in ROUTED:
        return
    with es_errors(f"read settings of {names.alias(kind)}"):
        try:
            found = client.indices.get(index=names.alias(kind), features=["mappings", "settings"])
        except NotFoundError:
            return
    for index, body in found.body.items():
        required = body["mappings"].get("_routing", {}).get("required", False)
        shards = int(body["settings"]["index"]["number_of_shards"])
        if not required and shards > 1:
            raise ConfigurationError(
                f"index {index} predates routing by scope and has {shards} shards, so its "
                "documents are not where memq now looks for them: move them onto a routed "
                f"index with `memq reindex --shards {shards} --kind {kind.value}`"
            )


def _check_dims(client: Elasticsearch, names: IndexNames, kind: Kind, dims: int) -> None:
    if kind not in (Kind.MEMORIES, Kind.ENTITIES):
        return
    with es_errors(f"read mapping of {names.alias(kind)}"):
        try:
            found = client.indices.get_mapping(index=names.alias(kind))
        except NotFoundError:
            return
    for index, body in found.body.items():
        stored = body["mappings"].get("_meta", {}).get("dims")
        if stored is not None and stored != dims:
            raise ConfigurationError(
                f"index {index} holds {stored}-dimensional vectors but the embedder makes {dims}: "
                "use another MEMQ_ES_INDEX_PREFIX or the embedder the index was built with"
            )


def drop_indices(client: Elasticsearch, names: IndexNames) -> None:
    """Delete every memq index and template of ``names.prefix`` (tests and ``reset``)."""
    for kind in Kind:
        with es_errors(f"delete {names.alias(kind)}"):
            found = client.options(ignore_status=404).indices.get_alias(name=names.alias(kind))
            concrete = [index for index in found.body if index not in {"error", "status"}]
            if concrete:
                client.indices.delete(index=",".join(concrete))
            client.options(ignore_status=404).indices.delete_index_template(
                name=names.template(kind)
            )
