"""What every repository of the Elasticsearch store shares: the ``Connection`` (the client,
the index names and the refresh policy), the one bulk helper, msearch and paged reads."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Concatenate, Generic, ParamSpec, TypeVar, overload

from elasticsearch import Elasticsearch

from pipeline.domain.models import Scope
from pipeline.errors import EmbedderChangedError, TransientError
from pipeline.store.client import error_reason, es_errors, item_error, other_dims
from pipeline.store.indices import IndexNames, Kind
from pipeline.store.protocol import SearchIndex, StoredHash, WriteOutcome
from pipeline.store.routing import search_routing

BULK_ITEM_RETRIES = 3

Repo = TypeVar("Repo")
P = ParamSpec("P")
R = TypeVar("R")

CreateItems = dict[tuple[str, str, str], dict[str, Any]]
"""Documents to create: (index, id, routing) -> source."""


def scope_filter(scope: Scope) -> list[dict[str, Any]]:
    """Term filters selecting exactly the documents of ``scope``."""
    return [{"term": {field: value}} for field, value in scope.fields().items()]


def hit_address(hit: Mapping[str, Any]) -> dict[str, Any]:
    """Where a search hit lives: its index, id and routing (when it has one)."""
    address = {"_index": hit["_index"], "_id": hit["_id"]}
    return address | ({"routing": hit["_routing"]} if "_routing" in hit else {})


def search_header(index: str, scope: Scope | None) -> dict[str, Any]:
    """An msearch header for a read of ``scope``: its one shard when the scope names it
    (``search_routing``), every shard otherwise."""
    routing = search_routing(scope) if scope is not None else None
    return {"index": index} | ({"routing": routing} if routing else {})


@dataclass(frozen=True)
class Connection:
    """The client, the index names and the refresh policy every repository shares, with the
    requests they all make the same way (bulk writes, msearch, paged reads).

    ``miss_refresh_interval_s``: how often a read by id that missed may refresh the memories
    to look again (see ``MemoryRepository.routing_of``); 0 for every miss."""

    client: Elasticsearch
    names: IndexNames
    miss_refresh_interval_s: float = 0.0

    # -- bulk writes ----------------------------------------------------------------------

    def bulk(self, **kwargs: Any) -> dict[str, Any]:
        """A bulk request whose items refused by an index block (a reindex pausing writes
        for its catch-up, see ``pipeline.store.reindex``) fail the whole call as transient:
        the caller's retry writes them once the block is lifted, instead of reporting them
        lost item by item."""
        body: dict[str, Any] = self.client.bulk(**kwargs).body
        if body.get("errors"):
            for item in body["items"]:
                error = next(iter(item.values())).get("error") or {}
                if isinstance(error, dict) and error.get("type") == "cluster_block_exception":
                    raise TransientError(f"bulk write: {error_reason(error)}")
                if other_dims(error):  # the index moved to another embedder meanwhile
                    raise EmbedderChangedError(f"bulk write: {error_reason(error)}")
        return body

    def create_all(self, items: CreateItems, refresh: bool = False) -> dict[str, WriteOutcome]:
        """Bulk-create ``items``; items rejected with 429 are retried, item by item. One
        outcome per index named by an item."""
        outcomes: dict[str, WriteOutcome] = {index: WriteOutcome() for index, _, _ in items}
        pending = dict(items)
        for attempt in range(BULK_ITEM_RETRIES + 1):
            if not pending:
                break
            if attempt:
                time.sleep(0.2 * 2**attempt)
            last = attempt == BULK_ITEM_RETRIES
            pending = self._create_round(pending, outcomes, last, refresh)
        return outcomes

    def _create_round(
        self,
        pending: CreateItems,
        outcomes: dict[str, WriteOutcome],
        last: bool,
        refresh: bool,
    ) -> CreateItems:
        actions: list[dict[str, Any]] = []
        for (index, doc_id, routing), source in pending.items():
            actions.append({"create": {"_index": index, "_id": doc_id, "routing": routing}})
            actions.append(source)
        with es_errors("bulk create"):
            items = self.bulk(operations=actions, refresh=refresh)["items"]
        retry: CreateItems = {}
        for (key, source), item in zip(pending.items(), items, strict=True):
            result, outcome = item["create"], outcomes[key[0]]
            status, doc_id = result["status"], key[1]
            if status in (200, 201):
                outcome.created.append(doc_id)
            elif status == 409:
                outcome.conflicts[doc_id] = StoredHash(hash="", job_id=None)
            elif status == 429 and not last:
                retry[key] = source
            else:
                outcome.failed[doc_id] = f"HTTP {status} {error_reason(result.get('error'))}"
        return retry

    def bulk_all_or_raise(
        self,
        actions: list[dict[str, Any]],
        what: str,
        may_conflict: frozenset[str] = frozenset(),
        refresh: bool = False,
    ) -> set[str]:
        """Run a bulk whose every item must succeed, except that ids in ``may_conflict`` may
        meet a version conflict (409): those are returned. Any other item error raises: a
        conflict, or a status worth retrying, as ``TransientError``; a refusal that will not
        pass (a document the mapping rejects, a memory deleted meanwhile) as ``PermanentError``,
        so its job fails at once with the reason instead of retrying until its deadline."""
        with es_errors(what):
            body = self.bulk(operations=actions, refresh=refresh)
        conflicted: set[str] = set()
        if not body.get("errors"):
            return conflicted
        for item in body["items"]:
            result = next(iter(item.values()))
            if result["status"] == 409 and result["_id"] in may_conflict:
                conflicted.add(result["_id"])
            elif result.get("error"):
                status = result["status"]
                if status == 409:
                    raise TransientError(f"{what}: HTTP 409 {error_reason(result['error'])}")
                raise item_error(f"{what}: HTTP {status}", status, result["error"])
        return conflicted

    # -- searches ---------------------------------------------------------------------------

    def msearch_hits(self, searches: list[dict[str, Any]], what: str) -> list[list[dict[str, Any]]]:
        """The hits of each search; any search that failed fails the call (the batch then
        falls back to one call per job, which isolates the failing one). So does a search that
        did not hear from every shard: a dedup or an entity lookup that missed one could
        miss a duplicate, so the phase is retried rather than run on half an answer."""
        if not searches:
            return []
        with es_errors(what):
            responses = self.client.msearch(searches=searches).body["responses"]
        for response in responses:
            if "error" in response:
                raise item_error(what, response.get("status"), response["error"])
            shards = response.get("_shards", {})
            if shards.get("failed") or response.get("timed_out"):
                reason = error_reason((shards.get("failures") or [{}])[0].get("reason", ""))
                raise TransientError(
                    f"{what}: {shards.get('failed', 0)} of {shards.get('total', 0)} shards "
                    f"failed or timed out ({reason})"
                )
        return [response["hits"]["hits"] for response in responses]

    def search_indices(
        self,
        searches_by_index: Sequence[tuple[SearchIndex, Scope | None, dict[str, Any]]],
        what: str,
        named: bool = False,
    ) -> list[dict[str, Any]]:
        """(index, scope, body) each: one full response per search in one msearch, in order;
        a failed search fails the call (``TransientError``, or ``EmbedderChangedError`` when
        the index moved to another embedder)."""
        searches: list[dict[str, Any]] = []
        for kind, scope, body in searches_by_index:
            searches += [search_header(self.names.alias(Kind(kind)), scope), body]
        with es_errors(what):
            responses: list[dict[str, Any]] = self.client.msearch(
                searches=searches, include_named_queries_score=named or None
            ).body["responses"]
        for response in responses:
            if "error" in response:
                reason = f"{what}: {error_reason(response['error'])}"
                if other_dims(response["error"]):  # the index moved to another embedder
                    raise EmbedderChangedError(reason)
                raise TransientError(reason)
        return responses

    # -- paged reads over a point in time ---------------------------------------------------

    def matching(
        self, index: str, query: dict[str, Any], fields: list[str], routing: str | None
    ) -> list[dict[str, Any]]:
        """Every hit of ``query`` over ``index`` (refreshed first), with ``fields`` of its
        source (none when empty), from one point in time (on the shard of ``routing`` only,
        when given)."""
        with es_errors(f"read from {index}"):
            self.client.indices.refresh(index=index)
            pit = self.open_pit(index, routing)
            try:
                return [h for hits in self.pages(pit, query, fields) for h in hits]
            finally:
                self.close_pit(pit)

    def open_pit(self, index: str, routing: str | None, keep_alive: str = "1m") -> str:
        pit: str = self.client.open_point_in_time(
            index=index, keep_alive=keep_alive, routing=routing
        )["id"]
        return pit

    def close_pit(self, pit: str) -> None:
        """Give back a point in time; one already gone is not an error."""
        self.client.options(ignore_status=404).close_point_in_time(id=pit)

    def pages(
        self, pit: str, query: dict[str, Any], fields: list[str] | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "size": 1000,
                "query": query,
                "sort": [{"_shard_doc": "asc"}],
                "pit": {"id": pit, "keep_alive": "1m"},
                "_source": {"includes": fields} if fields else False,
                "track_total_hits": False,
            }
            if after is not None:
                body["search_after"] = after
            hits: list[dict[str, Any]] = self.client.search(**body)["hits"]["hits"]
            if not hits:
                return
            yield hits
            after = hits[-1]["sort"]


class Repository:
    """The documents of one index (``kind``) over the shared connection."""

    kind: ClassVar[Kind]

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    @property
    def index(self) -> str:
        return self.connection.names.alias(self.kind)


class Forward(Generic[Repo, P, R]):
    """A method of a composed store that is its repository's method: ``name =
    Forward("memories", MemoryRepository.name)`` on the store class makes ``store.name``
    the bound ``store.memories.name``, with its signature (type checkers see it, so the
    store is checked against its protocols) and its docstring, written once."""

    def __init__(self, repository: str, method: Callable[Concatenate[Repo, P], R]) -> None:
        self.repository = repository
        self.method = method
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.method.__name__:
            raise TypeError(f"{owner.__name__}.{name} forwards to {self.method.__name__}")

    @overload
    def __get__(self, instance: None, owner: type) -> Forward[Repo, P, R]: ...

    @overload
    def __get__(self, instance: object, owner: type) -> Callable[P, R]: ...

    def __get__(self, instance: object | None, owner: type) -> Any:
        if instance is None:
            return self
        return getattr(getattr(instance, self.repository), self.method.__name__)
