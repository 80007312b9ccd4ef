"""``memq reindex`` on the real node, with data in it: every kind moves onto three shards
behind the same alias, and what was written while it ran is there afterwards. The writes are
made at fixed points of the move (its progress steps): during the copy they go on as usual;
during the catch-up they meet the write block, which memq reports as transient (its callers
retry), and land once the alias has moved."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from elasticsearch import Elasticsearch

from memq.cli import main
from pipeline.config import Settings
from pipeline.domain.models import Scope
from pipeline.errors import NotFoundError, TransientError
from pipeline.memory import Memory
from pipeline.store.indices import Kind, drop_indices
from pipeline.store.reindex import reindex
from workers.runtime import Runtime

pytestmark = pytest.mark.integration


@pytest.fixture
def runtime(settings: Settings, es: Elasticsearch) -> Iterator[Runtime]:
    """A store of one shard per index on a prefix of its own."""
    prefix = f"{settings.es.index_prefix}-re{uuid.uuid4().hex[:4]}"
    runtime = Runtime(
        settings.model_copy(update={"es": settings.es.model_copy(update={"index_prefix": prefix})})
    )
    yield runtime
    drop_indices(es, runtime.store.names)


def shards_of(es: Elasticsearch, alias: str) -> list[str]:
    found = es.indices.get_settings(index=alias).body
    return [body["settings"]["index"]["number_of_shards"] for body in found.values()]


def test_every_kind_moves_to_three_shards_keeping_writes_made_meanwhile(
    runtime: Runtime, es: Elasticsearch
) -> None:
    memory = Memory(runtime.deps, tenant="reindex")
    added = [memory.add(f"I like {t}", user_id=f"u{i % 4}", infer=False)["results"][0]["id"]
             for i, t in enumerate(["tea", "chess", "rain", "jazz", "maps", "figs"])]  # fmt: skip
    written: dict[str, str] = {}

    def during(line: str) -> None:
        """Writes at fixed points of the memories' move."""
        if "copied" in line and not written:  # between the copy and the catch-up
            written["new"] = memory.add("I grow basil", user_id="u1", infer=False)["results"][0][
                "id"
            ]
            memory.update(added[0], "I like green tea")
            memory.delete(added[1])
        elif "paused" in line:  # writes meet the block: transient, to be retried
            with pytest.raises(TransientError, match="block"):
                memory.update(added[2], "I like summer rain")

    store, settings = runtime.store, runtime.settings
    for kind in Kind:
        done = reindex(
            es, settings.es, settings.embedder.dims, kind, shards=3, replicas=0,
            progress=during if kind is Kind.MEMORIES else lambda _: None,
        )  # fmt: skip
        assert shards_of(es, store.names.alias(kind)) == ["3"], kind
        assert not es.indices.exists(index=done.source)  # the old index is gone
        if kind is Kind.MEMORIES:
            assert (done.copied, done.recopied, done.deleted) == (6, 2, 1)
    memory.update(added[2], "I like summer rain")  # the retry, after the move
    assert memory.get(written["new"])["memory"] == "I grow basil"
    assert memory.get(added[0])["memory"] == "I like green tea"
    assert memory.get(added[2])["memory"] == "I like summer rain"
    with pytest.raises(NotFoundError):
        memory.get(added[1])
    assert [r["event"] for r in memory.history(added[0])] == ["ADD", "UPDATE"]
    found = memory.search("which drink", user_id="u0", limit=1)["results"]
    assert found[0]["id"] == added[0]  # vectors came along
    assert len(memory.get_all(user_id="u1")["results"]) == 2  # "chess" deleted, basil added
    alice = Scope(tenant="reindex", user_id="u0")
    body = {"size": 1, "query": {"term": {"user_id": "u0"}}}
    (response,) = store.search_memories([body], "test", scopes=[alice])
    assert response["_shards"]["total"] == 1  # routing kept: one shard of three


def test_a_failed_move_leaves_the_old_index_working(runtime: Runtime, es: Elasticsearch) -> None:
    memory = Memory(runtime.deps, tenant="reindex")
    [kept] = memory.add("I like tea", user_id="u0", infer=False)["results"]
    names = runtime.store.names

    def fail(line: str) -> None:
        if "paused" in line:
            raise RuntimeError("the operator pressed ctrl-c")

    settings = runtime.settings
    with pytest.raises(RuntimeError):
        reindex(es, settings.es, settings.embedder.dims, Kind.MEMORIES, shards=2, replicas=0,
                progress=fail)  # fmt: skip
    assert shards_of(es, names.memories) == ["1"]
    assert len(es.indices.get(index=f"{names.memories}-*").body) == 1  # the new one is gone
    memory.update(kept["id"], "I like green tea")  # writes work again
    assert memory.get(kept["id"])["memory"] == "I like green tea"


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--shards", "0"], "--shards must be 1..64"),
        (["--shards", "65"], "--shards must be 1..64"),
        (["--shards", "2", "--replicas", "9"], "--replicas must be 0..8"),
    ],
)
def test_bad_counts_are_refused_before_anything_moves(
    settings: Settings, capsys: pytest.CaptureFixture[str], argv: list[str], complaint: str
) -> None:
    assert main(["reindex", *argv]) == 2
    assert complaint in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--shards", "three"], "'three' is not a whole number"),
        (["--shards", "2", "--kind", "everything"], "invalid choice: 'everything'"),
        ([], "the following arguments are required: --shards"),
    ],
)
def test_malformed_arguments_are_refused_by_the_parser(
    capsys: pytest.CaptureFixture[str], argv: list[str], complaint: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["reindex", *argv])
    assert caught.value.code == 2
    assert complaint in capsys.readouterr().err


def test_an_index_from_before_routing_is_refused_then_moved_onto_routed_shards(
    runtime: Runtime, es: Elasticsearch
) -> None:
    """Schema 1 placed documents by id: with two shards memq refuses it and names the way out,
    and the move gives every document the routing memq uses now."""
    from pipeline.errors import ConfigurationError
    from pipeline.store.indices import ensure_indices, mappings

    settings, names = runtime.settings, runtime.store.names
    old = f"{names.memories}-v1"
    es.indices.delete(index=list(es.indices.get_alias(name=names.memories).body))
    mapping = mappings(Kind.MEMORIES, settings.embedder.dims)
    mapping.pop("_routing")
    es.indices.delete_index_template(name=names.template(Kind.MEMORIES))  # as before schema 2
    es.indices.create(
        index=old,
        settings={"number_of_shards": 2, "number_of_replicas": 0},
        mappings=mapping,
        aliases={names.memories: {"is_write_index": True}},
    )
    for i in range(6):
        doc = {"tenant": "old", "user_id": f"u{i}", "text": f"fact {i}", "hash": f"h{i}"}
        es.index(index=names.memories, id=f"m{i}", document=doc)
    with pytest.raises(ConfigurationError, match="memq reindex --shards 2 --kind memories"):
        ensure_indices(es, settings.es, settings.embedder.dims)
    reindex(es, settings.es, settings.embedder.dims, Kind.MEMORIES, shards=2, replicas=0)
    ensure_indices(es, settings.es, settings.embedder.dims)  # accepted now
    for i in range(6):
        found = runtime.store.get_memory(f"m{i}")
        assert found is not None and found.text == f"fact {i}"
        scope = Scope(tenant="old", user_id=f"u{i}")
        assert runtime.store.count_memories(scope) == 1  # on the one shard its routing names
