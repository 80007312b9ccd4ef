"""``InMemoryStore``: the ``Store`` protocol in process memory, with the same semantics as
``ElasticStore`` (create conflicts, scope filters, cosine ranking). For unit tests and the
SDK's local mode; thread-safe, not persistent.

The parts follow the Elasticsearch store's repositories: ``messages``, ``memories`` (with
their history), ``entities``, ``jobs`` and ``keys``, over the ``Tables`` they share.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.domain.jobs import JobRecord
from pipeline.store.memory.entities import EntitiesInMemory
from pipeline.store.memory.jobs import JobsInMemory
from pipeline.store.memory.keys import KeysInMemory
from pipeline.store.memory.memories import MemoriesInMemory
from pipeline.store.memory.messages import MessagesInMemory
from pipeline.store.protocol import SessionMessages
from pipeline.store.reads import StoreHealth

__all__ = ["InMemoryStore"]


class InMemoryStore(
    MessagesInMemory, MemoriesInMemory, EntitiesInMemory, JobsInMemory, KeysInMemory
):
    """Every ``Store`` and ``KeyRecords`` method, in process memory."""

    def finish_jobs(self, entries: Sequence[SessionMessages], records: Sequence[JobRecord]) -> None:
        for entry in entries:
            self.append_messages(entry.scope, entry.job_id, entry.messages, entry.at)
        self.save_jobs(records)

    def health(self) -> StoreHealth:
        """Always reachable: it is this process."""
        return StoreHealth(cluster="in-memory", status="green", nodes=1)
