"""History rows: one per change of a memory, kept after the memory is deleted."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.store.client import es_errors
from pipeline.store.indices import Kind
from pipeline.store.protocol import HistoryDoc, WriteOutcome
from pipeline.store.reads import HistoryRow
from pipeline.store.repositories.base import CreateItems, Repository
from pipeline.store.routing import history_routing


class HistoryRepository(Repository):
    kind = Kind.HISTORY

    def creates(self, rows: Sequence[HistoryDoc]) -> CreateItems:
        """The rows as items of a bulk create (``Connection.create_all``)."""
        index = self.index
        return {(index, r.id, history_routing(r.memory_id, r.id)): r.source() for r in rows}

    def write_history(self, rows: Sequence[HistoryDoc]) -> WriteOutcome:
        outcomes = self.connection.create_all(self.creates(rows))
        return outcomes.get(self.index, WriteOutcome())

    def delete_history(self, rows: Sequence[HistoryDoc]) -> None:
        """Remove history rows (written for memories that turned out not to be stored)."""
        actions = [
            {
                "delete": {
                    "_index": self.index,
                    "_id": r.id,
                    "routing": history_routing(r.memory_id, r.id),
                }
            }
            for r in rows
        ]
        if actions:
            with es_errors("delete history rows"):
                self.connection.bulk(operations=actions)

    def memory_history(self, memory_id: str, limit: int = 1000) -> list[HistoryRow]:
        """History rows of a memory, oldest first."""
        client, index = self.connection.client, self.index
        with es_errors(f"read the history of {memory_id}"):
            client.indices.refresh(index=index)  # rows written a moment ago
            body = client.search(
                index=index,
                routing=memory_id,  # history_routing: a memory's rows live together
                query={"term": {"memory_id": memory_id}},
                sort=[{"created_at": "asc"}],
                size=limit,
            ).body
        return [HistoryRow.from_source(h["_id"], h["_source"]) for h in body["hits"]["hits"]]
