"""API keys' documents (``pipeline.serving.keys`` makes, hashes and checks the keys)."""

from __future__ import annotations

from typing import Any

from elasticsearch import NotFoundError

from pipeline.store.client import es_errors
from pipeline.store.indices import Kind
from pipeline.store.reads import KeyDocument, ListedKey
from pipeline.store.repositories.base import Repository

KEYS_LISTED_MAX = 1000


class KeyRepository(Repository):
    kind = Kind.KEYS

    def create_key(self, key_id: str, document: KeyDocument) -> None:
        with es_errors("create an API key"):
            self.connection.client.create(
                index=self.index,
                id=key_id,
                document=document.model_dump(mode="json", exclude_none=True),
                refresh="wait_for",
            )

    def get_key(self, key_id: str) -> KeyDocument | None:
        with es_errors("read an API key"):
            try:
                body = self.connection.client.get(index=self.index, id=key_id).body
            except NotFoundError:
                return None
        return KeyDocument.model_validate(body["_source"])

    def update_key(self, key_id: str, fields: dict[str, Any]) -> bool:
        with es_errors("update an API key"):
            try:
                self.connection.client.update(
                    index=self.index, id=key_id, doc=fields, refresh="wait_for"
                )
            except NotFoundError:
                return False
        return True

    def list_keys(self, tenant: str | None = None) -> list[ListedKey]:
        query = {"term": {"tenant": tenant}} if tenant else {"match_all": {}}
        with es_errors("list API keys"):
            hits = self.connection.client.search(
                index=self.index,
                query=query,
                size=KEYS_LISTED_MAX,
                sort=[{"created_at": "asc"}],
                source_excludes=["secret_sha256"],
            ).body["hits"]["hits"]
        return [ListedKey.from_source(h["_id"], h["_source"]) for h in hits]

    def key_ids(self) -> list[str]:
        hits = self.connection.matching(self.index, {"match_all": {}}, [], None)
        return [str(h["_id"]) for h in hits]
