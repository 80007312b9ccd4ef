"""API keys in memory (``repositories.keys``)."""

from __future__ import annotations

from typing import Any

from pipeline.errors import PermanentError
from pipeline.store.memory.tables import Tables
from pipeline.store.reads import KeyDocument, ListedKey


class KeysInMemory(Tables):
    def create_key(self, key_id: str, document: KeyDocument) -> None:
        with self._lock:
            if key_id in self.keys:
                raise PermanentError(f"create an API key: key {key_id} already exists")
            self.keys[key_id] = document.model_dump(mode="json", exclude_none=True)

    def get_key(self, key_id: str) -> KeyDocument | None:
        with self._lock:
            held = self.keys.get(key_id)
            return None if held is None else KeyDocument.model_validate(held)

    def update_key(self, key_id: str, fields: dict[str, Any]) -> bool:
        with self._lock:
            if key_id not in self.keys:
                return False
            self.keys[key_id] = {**self.keys[key_id], **fields}
            return True

    def key_ids(self) -> list[str]:
        with self._lock:
            return list(self.keys)

    def list_keys(self, tenant: str | None = None) -> list[ListedKey]:
        with self._lock:
            held = [
                ListedKey.from_source(key_id, doc).model_copy(update={"secret_sha256": None})
                for key_id, doc in self.keys.items()
                if tenant is None or doc.get("tenant") == tenant
            ]
        return sorted(held, key=lambda key: key.created_at)
