"""The store side of export and import: a tenant's memories read out in bulk (with their
entities and history), and documents written back under the ids they had.

Reads page through a point in time (sort ``created_at``, then the PIT's tiebreaker), a bounded
page at a time, so an export of any size holds one page in memory. Writes use ``index`` (the
dump's version of a document wins, and writing it twice changes nothing) and raise when any
item fails: an import reports a failed batch instead of counting it as restored.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from elasticsearch import NotFoundError

from pipeline.errors import InvalidInputError, TransientError
from pipeline.store.client import error_reason, es_errors
from pipeline.store.columns import COLUMN_MAPPING
from pipeline.store.elastic import ElasticStore
from pipeline.store.reads import DumpedEntity, DumpedHistoryRow, DumpedMessage
from pipeline.store.routing import history_routing, source_routing

PIT_KEEP_ALIVE = "5m"
PAGE_SIZE = 1000
_INTERNAL_FIELDS = ("text_lemmatized", "metadata_kv", "substrings", *COLUMN_MAPPING)


def selector_filter(selector: Mapping[str, str]) -> list[dict[str, Any]]:
    """Term filters for ``{"tenant": ..., "user_id": ...}``: the tenant and any ids given."""
    return [{"term": {field: value}} for field, value in selector.items()]


class DumpStore:
    """Bulk reads and writes over the memories, entities and history of one memq."""

    def __init__(self, store: ElasticStore) -> None:
        self.client = store.client
        self.names = store.names

    def refresh(self) -> None:
        """Make everything written so far readable by the searches an export pages with."""
        indices = ",".join((self.names.memories, self.names.entities, self.names.history))
        with es_errors("refresh before an export"):
            self.client.indices.refresh(index=indices)

    def memory_pages(
        self, selector: Mapping[str, str], vectors: bool, page_size: int = PAGE_SIZE
    ) -> Iterator[list[dict[str, Any]]]:
        """Every memory matching ``selector``, oldest first, as pages of ``{"id", **source}``
        (``embedding`` only when ``vectors``). The point in time is closed at the end, also
        when the reader stops early."""
        excludes = list(_INTERNAL_FIELDS) + ([] if vectors else ["embedding"])
        pit = self.open_pit()
        try:
            after: list[Any] | None = None
            while True:
                hits = self._page(selector, pit, after, page_size, excludes)
                if hits:
                    yield [{"id": h["_id"], **h["_source"]} for h in hits]
                if len(hits) < page_size:
                    return
                after = hits[-1]["sort"]
        finally:
            self.close_pit(pit)

    def open_pit(self) -> str:
        with es_errors("open a point in time"):
            pit: str = self.client.open_point_in_time(
                index=self.names.memories, keep_alive=PIT_KEEP_ALIVE
            )["id"]
        return pit

    def close_pit(self, pit: str) -> None:
        try:
            with es_errors("close a point in time"):
                self.client.options(ignore_status=404).close_point_in_time(id=pit)
        except TransientError:
            pass  # it lapses by itself after its keep-alive

    def _page(
        self,
        selector: Mapping[str, str],
        pit: str,
        after: list[Any] | None,
        size: int,
        excludes: list[str],
    ) -> list[dict[str, Any]]:
        body: dict[str, Any] = {
            "size": size,
            "query": {"bool": {"filter": selector_filter(selector)}},
            "sort": [{"created_at": {"order": "asc", "missing": "_first"}}],
            "pit": {"id": pit, "keep_alive": PIT_KEEP_ALIVE},
            # Elasticsearch 9 leaves vectors out of _source unless asked for them
            "_source": {"excludes": excludes, "exclude_vectors": "embedding" in excludes},
            "track_total_hits": False,
        }
        if after is not None:
            body["search_after"] = after
        with es_errors("export memories"):
            try:
                hits: list[dict[str, Any]] = self.client.search(**body)["hits"]["hits"]
            except NotFoundError as exc:  # the PIT lapsed: a reader paused over 5 minutes
                raise TransientError("export: the point in time expired; start again") from exc
        return hits

    def entities(self, ids: Sequence[str], vectors: bool) -> dict[str, DumpedEntity]:
        """Entity id -> the entity (without links; ``embedding`` only when ``vectors``)."""
        if not ids:
            return {}
        excludes = ["linked_memory_ids"] + ([] if vectors else ["embedding"])
        found: dict[str, DumpedEntity] = {}
        for start in range(0, len(ids), PAGE_SIZE):
            chunk = list(ids[start : start + PAGE_SIZE])
            with es_errors("read entities"):  # a search: mget cannot ask for vectors
                hits = self.client.search(
                    index=self.names.entities,
                    query={"ids": {"values": chunk}},
                    size=len(chunk),
                    source={"excludes": excludes, "exclude_vectors": not vectors},
                    track_total_hits=False,
                )["hits"]["hits"]
            found |= {h["_id"]: DumpedEntity.from_source(h["_id"], h["_source"]) for h in hits}
        return found

    def messages(self, memories: Sequence[Mapping[str, Any]]) -> dict[str, DumpedMessage]:
        """Message id -> the message, for the ``source_ids`` of ``memories`` (each read on its
        memory's shard, ``PAGE_SIZE`` a request); a message no longer stored is left out."""
        wanted = {i: source_routing(m) for m in memories for i in m.get("source_ids", [])}
        docs = [{"_id": i, "routing": routing} for i, routing in wanted.items()]
        found: dict[str, DumpedMessage] = {}
        for start in range(0, len(docs), PAGE_SIZE):
            with es_errors("read messages"):
                chunk = self.client.mget(
                    index=self.names.messages, docs=docs[start : start + PAGE_SIZE]
                ).body["docs"]
            found |= {
                d["_id"]: DumpedMessage.from_source(d["_id"], d["_source"])
                for d in chunk
                if d.get("found")
            }
        return found

    def history(self, memory_ids: Sequence[str]) -> dict[str, list[DumpedHistoryRow]]:
        """Memory id -> its history rows, oldest first, every row read however many there are
        (paged by ``search_after``)."""
        rows: dict[str, list[DumpedHistoryRow]] = {}
        if not memory_ids:
            return rows
        after: list[Any] | None = None
        while True:
            hits = self._history_page(memory_ids, after)
            for hit in hits:
                row = DumpedHistoryRow.from_source(hit["_id"], hit["_source"])
                rows.setdefault(row.memory_id, []).append(row)
            if len(hits) < PAGE_SIZE:
                return rows
            after = hits[-1]["sort"]

    def _history_page(
        self, memory_ids: Sequence[str], after: list[Any] | None
    ) -> list[dict[str, Any]]:
        body: dict[str, Any] = {
            "size": PAGE_SIZE,
            "query": {"terms": {"memory_id": list(memory_ids)}},
            "sort": [{"created_at": "asc"}, {"_doc": "asc"}],
            "track_total_hits": False,
        }
        if after is not None:
            body["search_after"] = after
        with es_errors("read history"):
            hits: list[dict[str, Any]] = self.client.search(index=self.names.history, **body)[
                "hits"
            ]["hits"]
        return hits

    def owners(self, ids: Sequence[str]) -> dict[str, str]:
        """Memory id -> the tenant holding it, for the ids that exist: whoever holds an id,
        on whatever shard, so a search of every shard after a refresh (an import is rare and
        must see what was written a moment ago)."""
        if not ids:
            return {}
        with es_errors("read memory owners"):
            self.client.indices.refresh(index=self.names.memories)
            hits = self.client.search(
                index=self.names.memories,
                query={"ids": {"values": list(ids)}},
                size=len(ids),
                source_includes=["tenant"],
                track_total_hits=False,
            )["hits"]["hits"]
        return {h["_id"]: h["_source"].get("tenant", "") for h in hits}

    def put_memories(self, sources: Mapping[str, dict[str, Any]]) -> None:
        routed = {i: (s, source_routing(s)) for i, s in sources.items()}
        self._index_all(self.names.memories, routed, "restore memories")

    def put_messages(self, routed: Mapping[str, tuple[dict[str, Any], str]]) -> None:
        """Index messages (id -> (source, routing)) under their ids."""
        self._index_all(self.names.messages, routed, "restore messages")

    def put_history(self, sources: Mapping[str, dict[str, Any]]) -> None:
        routed = {i: (s, history_routing(s.get("memory_id", ""), i)) for i, s in sources.items()}
        self._index_all(self.names.history, routed, "restore history")

    def _index_all(
        self, index: str, sources: Mapping[str, tuple[dict[str, Any], str]], what: str
    ) -> None:
        """Index every document (id -> source, routing) under its id; any refused item
        raises (a mapping refusal is the input's fault: ``InvalidInputError``; anything else
        ``TransientError``)."""
        if not sources:
            return
        actions: list[dict[str, Any]] = []
        for doc_id, (source, routing) in sources.items():
            actions += [{"index": {"_index": index, "_id": doc_id, "routing": routing}}, source]
        with es_errors(what):
            body = self.client.bulk(operations=actions).body
        if not body.get("errors"):
            return
        for item in body["items"]:
            result = item["index"]
            if result.get("error"):
                reason = f"{what}: {result['_id']}: HTTP {result['status']} "
                reason += error_reason(result["error"])
                if result["status"] == 400:
                    raise InvalidInputError(reason)
                raise TransientError(reason)
