"""The documents of any index at large: paged reads and deletes by query (erasure, reindex,
re-extraction), and the cluster's health, the embedder in use, index versions and reset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.config import ElasticsearchConfig
from pipeline.store.client import es_errors
from pipeline.store.health import elasticsearch_health
from pipeline.store.indices import Kind, ensure_indices, stored_embedder
from pipeline.store.reads import StoreHealth
from pipeline.store.repositories.base import Connection, hit_address
from pipeline.store.reprocess import Version, versions_of


class DocumentRepository:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def delete_matching(self, index: str, query: dict[str, Any], routing: str | None = None) -> int:
        """Delete every document of ``index`` matching ``query``, page by page from one point
        in time (the minimal distribution has no delete-by-query); returns how many. With a
        ``routing`` only its shard is read; each hit is deleted under its own routing."""
        deleted = 0
        connection = self.connection
        with es_errors(f"delete from {index}"):
            connection.client.indices.refresh(index=index)
            pit = connection.open_pit(index, routing)
            try:
                for hits in connection.pages(pit, query):
                    ops = [{"delete": hit_address(h)} for h in hits]
                    items = connection.bulk(operations=ops)["items"]
                    deleted += sum(1 for i in items if i["delete"].get("result") == "deleted")
            finally:
                connection.close_pit(pit)
            connection.client.indices.refresh(index=index)
        return deleted

    def matching_sources(
        self, index: str, query: dict[str, Any], fields: Sequence[str], routing: str | None = None
    ) -> list[dict[str, Any]]:
        """``fields`` of every document of ``index`` matching ``query`` (on the shard of
        ``routing`` only, when given)."""
        hits = self.connection.matching(index, query, list(fields), routing)
        return [h.get("_source", {}) for h in hits]

    def matching_ids(
        self, index: str, query: dict[str, Any], routing: str | None = None
    ) -> list[str]:
        """The ids of every document of ``index`` matching ``query``."""
        return [str(h["_id"]) for h in self.connection.matching(index, query, [], routing)]

    def health(self) -> StoreHealth:
        return StoreHealth.model_validate(elasticsearch_health(self.connection.client))

    def embedder_meta(self) -> dict[str, Any] | None:
        """The embedder the memories index in use names (``_meta.embedder``), or None."""
        return stored_embedder(self.connection.client, self.connection.names.memories)

    def index_versions(self) -> dict[Kind, list[Version]]:
        """Every index version of the memories and entities (``pipeline.store.reprocess``)."""
        return versions_of(self.connection.client, self.connection.names)

    def reset(self, config: ElasticsearchConfig, dims: int) -> None:
        """Delete every index but the keys', and create them again, empty."""
        client = self.connection.client
        with es_errors("reset indices"):
            for kind in Kind:
                if kind is not Kind.KEYS:  # every index behind the alias (a reindex renames)
                    found = client.options(ignore_status=404).indices.get_alias(
                        name=self.connection.names.alias(kind)
                    )
                    concrete = [i for i in found.body if i not in {"error", "status"}]
                    if concrete:
                        client.indices.delete(index=",".join(concrete))
        ensure_indices(client, config, dims)
