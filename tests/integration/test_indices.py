"""Index templates applied to the real Elasticsearch node."""

from __future__ import annotations

import uuid

import pytest
from elasticsearch import BadRequestError, Elasticsearch

from pipeline.adapters.nlp.feedback import content_terms
from pipeline.config import ElasticsearchConfig, Settings
from pipeline.errors import ConfigurationError, PermanentError
from pipeline.store.client import es_errors
from pipeline.store.columns import RANK_FIELDS, columns_of, rank_columns
from pipeline.store.filters import translate_filters
from pipeline.store.indices import (
    SCHEMA_VERSION,
    IndexNames,
    Kind,
    drop_indices,
    ensure_indices,
    mappings,
)

pytestmark = pytest.mark.integration


def test_every_kind_has_an_alias_over_a_versioned_index(
    es: Elasticsearch, indices: IndexNames
) -> None:
    for kind in Kind:
        found = es.indices.get_alias(name=indices.alias(kind)).body
        assert list(found) == [indices.concrete(kind)]
        assert indices.concrete(kind).endswith(f"-v{SCHEMA_VERSION}")


@pytest.mark.parametrize("kind", list(Kind))
def test_mapping_is_exactly_as_declared(
    es: Elasticsearch, indices: IndexNames, settings: Settings, kind: Kind
) -> None:
    stored = es.indices.get_mapping(index=indices.alias(kind)).body[indices.concrete(kind)]
    declared = mappings(kind, settings.embedder.dims)
    assert stored["mappings"]["dynamic"] == "strict"
    assert stored["mappings"]["_meta"] == declared["_meta"]
    assert set(stored["mappings"]["properties"]) == set(declared["properties"])
    for field, spec in declared["properties"].items():
        stored_type = stored["mappings"]["properties"][field].get("type", "object")
        assert stored_type == spec.get("type", "object"), field


def test_vectors_are_quantized_hnsw_with_the_embedder_dims(
    es: Elasticsearch, indices: IndexNames, settings: Settings
) -> None:
    props = es.indices.get_mapping(index=indices.memories).body[indices.concrete(Kind.MEMORIES)]
    embedding = props["mappings"]["properties"]["embedding"]
    assert embedding["dims"] == settings.embedder.dims
    assert embedding["similarity"] == "cosine"
    assert embedding["index_options"]["type"] == "int8_hnsw"


def test_unknown_fields_are_refused_not_mapped(es: Elasticsearch, indices: IndexNames) -> None:
    marker = uuid.uuid4().hex  # one token of its own: other tests share these indices
    with pytest.raises(PermanentError) as caught, es_errors("index a memory"):
        document = {"text": marker, "surprise": {"a": 1}}
        es.index(index=indices.memories, document=document, routing="r")
    assert "strict_dynamic_mapping" in caught.value.reason
    assert es.count(index=indices.memories, query={"term": {"text": marker}})["count"] == 0


def test_metadata_bomb_does_not_grow_the_mapping(es: Elasticsearch, indices: IndexNames) -> None:
    before = es.indices.get_mapping(index=indices.memories).body
    bomb = {f"key_{i}": {"nested": f"value {i}"} for i in range(2_000)}
    es.index(
        index=indices.memories,
        id="metadata-bomb",
        routing="r",
        document={"text": "bomb", "tenant": "t", "metadata": bomb},
        refresh="wait_for",
    )
    after = es.indices.get_mapping(index=indices.memories).body
    assert after == before
    hits = es.search(
        index=indices.memories, query={"term": {"metadata.key_1999.nested": "value 1999"}}
    )
    assert hits["hits"]["total"]["value"] == 1
    es.delete(index=indices.memories, id="metadata-bomb", routing="r", refresh="wait_for")


def test_applying_twice_changes_nothing(
    es: Elasticsearch, indices: IndexNames, settings: Settings
) -> None:
    before = es.indices.get(index=f"{indices.prefix}-*").body
    ensure_indices(es, settings.es, settings.embedder.dims)
    assert es.indices.get(index=f"{indices.prefix}-*").body.keys() == before.keys()


def test_an_index_built_for_other_dims_is_a_clear_error(
    es: Elasticsearch, indices: IndexNames, settings: Settings
) -> None:
    with pytest.raises(ConfigurationError, match="384-dimensional"):
        ensure_indices(es, settings.es, settings.embedder.dims * 2)
    template = es.indices.get_index_template(name=indices.template(Kind.MEMORIES)).body
    mapping = template["index_templates"][0]["index_template"]["template"]["mappings"]
    assert mapping["properties"]["embedding"]["dims"] == settings.embedder.dims


def test_no_request_touches_a_module_the_minimal_distribution_lacks(es: Elasticsearch) -> None:
    """The english analyzer lives in analysis-common, absent from the Maven distribution:
    memq's mappings must not need it, and this node proves which distribution it is."""
    with pytest.raises(BadRequestError):
        es.indices.analyze(analyzer="english", text="running")
    assert (
        es.indices.analyze(analyzer="standard", text="Running")["tokens"][0]["token"] == "running"
    )


def legacy_memories(
    es: Elasticsearch, settings: Settings, suffix: str, missing: str
) -> tuple[ElasticsearchConfig, IndexNames]:
    """A memories index of its own prefix, made as before the field ``missing`` existed."""
    config = settings.es.model_copy(update={"index_prefix": f"{settings.es.index_prefix}-{suffix}"})
    names = IndexNames(config.index_prefix)
    legacy = mappings(Kind.MEMORIES, settings.embedder.dims)
    del legacy["properties"][missing]
    es.indices.create(
        index=names.concrete(Kind.MEMORIES),
        mappings=legacy,
        aliases={names.memories: {"is_write_index": True}},
    )
    return config, names


def test_a_field_added_to_the_schema_reaches_existing_indices(
    es: Elasticsearch, settings: Settings
) -> None:
    """An index created before a field was declared gets it on the next start."""
    config, names = legacy_memories(es, settings, "old", "metadata_kv")
    try:
        ensure_indices(es, config, settings.embedder.dims)
        stored = es.indices.get_mapping(index=names.memories).body[names.concrete(Kind.MEMORIES)]
        assert stored["mappings"]["properties"]["metadata_kv"]["type"] == "keyword"
    finally:
        drop_indices(es, names)


def test_memories_written_before_substrings_get_them_at_the_next_start(
    es: Elasticsearch, settings: Settings
) -> None:
    """A memory stored before ``substrings`` existed is found by ``contains`` once memq has
    started again on its index (``pipeline.store.derived``)."""
    config, names = legacy_memories(es, settings, "subs", "substrings")
    try:
        old = {"tenant": "t", "user_id": "u1", "agent_id": "Travel-Planner", "hash": "h1"}
        old |= {"metadata": {"city": "Lisbon"}, "metadata_kv": ["city=Lisbon"]}
        es.index(index=names.memories, id="old", document=old, routing="t\x1fu1", refresh=True)
        ensure_indices(es, config, settings.embedder.dims)
        for condition in (
            {"agent_id": {"icontains": "planner"}},
            {"city": {"contains": "isbo"}},
            {"metadata": {"icontains": "LISB"}},
        ):
            query = {"bool": {"filter": translate_filters(condition)}}
            assert es.search(index=names.memories, query=query)["hits"]["total"]["value"] == 1
        ensure_indices(es, config, settings.embedder.dims)  # nothing left to fill: a no-op
    finally:
        drop_indices(es, names)


def test_memories_written_before_the_ranking_columns_get_them_at_the_next_start(
    es: Elasticsearch, settings: Settings
) -> None:
    """A memory stored before the ranking columns existed (``pipeline.store.columns``) gets
    them, made from its text and lemmas, once memq has started again on its index."""
    config, names = legacy_memories(es, settings, "cols", "mentions_time")
    try:
        old = {"tenant": "t", "user_id": "u1", "hash": "h1", "text": "We met in May 2021"}
        old |= {"text_lemmatized": "we meet in May 2021"}
        es.index(index=names.memories, id="old", document=old, routing="t\x1fu1", refresh=True)
        ensure_indices(es, config, settings.embedder.dims)
        hit = es.search(index=names.memories, docvalue_fields=RANK_FIELDS, source=False, size=1)[
            "hits"
        ]["hits"][0]
        assert columns_of(hit) == {
            "content_terms": " ".join(content_terms("we meet in May 2021")),
            "mentions_time": True,
        }
        assert columns_of(hit) == rank_columns(old)
        ensure_indices(es, config, settings.embedder.dims)  # nothing left to fill: a no-op
    finally:
        drop_indices(es, names)
