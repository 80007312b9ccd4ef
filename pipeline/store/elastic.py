"""``ElasticStore``: the store protocols over Elasticsearch, composed of one repository per
concern (``pipeline.store.repositories``) over one shared ``Connection``.

Writes use deterministic ids with ``op_type=create``, so a replayed write meets itself as a
conflict instead of a duplicate. Links between entities and memories are updated with optimistic
concurrency (``if_seq_no``/``if_primary_term``) because the minimal distribution has no scripting.
"""

from __future__ import annotations

from elasticsearch import Elasticsearch

from pipeline.store.indices import IndexNames
from pipeline.store.repositories.base import Connection, Forward, hit_address, scope_filter
from pipeline.store.repositories.documents import DocumentRepository
from pipeline.store.repositories.entities import EntityRepository, cosine_from_score
from pipeline.store.repositories.history import HistoryRepository
from pipeline.store.repositories.jobs import JobRepository, jobs_query
from pipeline.store.repositories.keys import KeyRepository
from pipeline.store.repositories.memories import MemoryRepository
from pipeline.store.repositories.messages import MessageRepository, window_id

__all__ = [
    "ElasticStore",
    "cosine_from_score",
    "hit_address",
    "jobs_query",
    "scope_filter",
    "window_id",
]

Memories = MemoryRepository
History = HistoryRepository
Entities = EntityRepository
Messages = MessageRepository
Jobs = JobRepository
Keys = KeyRepository
Documents = DocumentRepository


class ElasticStore:
    """The real store: ``Store``, ``ServingStore`` and ``KeyRecords``. Each method is its
    repository's (``store.memories``, ``.history``, ``.entities``, ``.messages``, ``.jobs``,
    ``.keys``, ``.documents``), which a caller may also use directly. ``refresh`` is
    "wait_for" only where a read follows in the same flow; the writes a job's ``succeeded``
    promises findable refresh the shards they touched."""

    def __init__(
        self, client: Elasticsearch, names: IndexNames, miss_refresh_interval_s: float = 0.0
    ) -> None:
        self.connection = Connection(client, names, miss_refresh_interval_s)
        self.history = HistoryRepository(self.connection)
        self.memories = MemoryRepository(self.connection, self.history)
        self.entities = EntityRepository(self.connection)
        self.jobs = JobRepository(self.connection)
        self.messages = MessageRepository(self.connection, self.jobs)
        self.keys = KeyRepository(self.connection)
        self.documents = DocumentRepository(self.connection)

    @property
    def client(self) -> Elasticsearch:
        return self.connection.client

    @property
    def names(self) -> IndexNames:
        return self.connection.names

    @property
    def miss_refresh_interval_s(self) -> float:
        return self.connection.miss_refresh_interval_s

    # -- messages (and the job records saved with them) -------------------------------------
    recent_messages = Forward("messages", Messages.recent_messages)
    recent_messages_many = Forward("messages", Messages.recent_messages_many)
    append_messages = Forward("messages", Messages.append_messages)
    finish_jobs = Forward("messages", Messages.finish_jobs)
    get_messages = Forward("messages", Messages.get_messages)

    # -- memories -----------------------------------------------------------------------------
    similar_memories = Forward("memories", Memories.similar_memories)
    similar_memories_many = Forward("memories", Memories.similar_memories_many)
    hashes_in_scope = Forward("memories", Memories.hashes_in_scope)
    hashes_in_scopes = Forward("memories", Memories.hashes_in_scopes)
    create_memories = Forward("memories", Memories.create_memories)
    create_memories_with_history = Forward("memories", Memories.create_memories_with_history)
    replace_memories = Forward("memories", Memories.replace_memories)
    make_visible = Forward("memories", Memories.make_visible)
    get_memory = Forward("memories", Memories.get_memory)
    update_memory = Forward("memories", Memories.update_memory)
    delete_memories = Forward("memories", Memories.delete_memories)
    search_memories = Forward("memories", Memories.search_memories)
    search_indices = Forward("connection", Connection.search_indices)
    open_memories_cursor = Forward("memories", Memories.open_memories_cursor)
    close_cursor = Forward("memories", Memories.close_cursor)
    page = Forward("memories", Memories.page)
    count_memories = Forward("memories", Memories.count_memories)

    # -- history --------------------------------------------------------------------------------
    write_history = Forward("history", History.write_history)
    delete_history = Forward("history", History.delete_history)
    memory_history = Forward("history", History.memory_history)

    # -- entities -------------------------------------------------------------------------------
    nearest_entities = Forward("entities", Entities.nearest_entities)
    nearest_entities_many = Forward("entities", Entities.nearest_entities_many)
    link_entities = Forward("entities", Entities.link_entities)
    entities_by_name = Forward("entities", Entities.entities_by_name)
    entity_links = Forward("entities", Entities.entity_links)
    entities_of = Forward("entities", Entities.entities_of)

    # -- jobs -----------------------------------------------------------------------------------
    save_job = Forward("jobs", Jobs.save_job)
    save_jobs = Forward("jobs", Jobs.save_jobs)
    create_job = Forward("jobs", Jobs.create_job)
    get_job = Forward("jobs", Jobs.get_job)
    get_jobs = Forward("jobs", Jobs.get_jobs)
    parked_jobs = Forward("jobs", Jobs.parked_jobs)
    unpark_jobs = Forward("jobs", Jobs.unpark_jobs)
    search_jobs = Forward("jobs", Jobs.search_jobs)
    job_counts = Forward("jobs", Jobs.job_counts)
    jobs_in_status = Forward("jobs", Jobs.jobs_in_status)
    refresh_jobs = Forward("jobs", Jobs.refresh_jobs)

    # -- API keys -------------------------------------------------------------------------------
    create_key = Forward("keys", Keys.create_key)
    get_key = Forward("keys", Keys.get_key)
    update_key = Forward("keys", Keys.update_key)
    list_keys = Forward("keys", Keys.list_keys)
    key_ids = Forward("keys", Keys.key_ids)

    # -- any index: paged reads and deletes; the cluster and its indices ------------------------
    delete_matching = Forward("documents", Documents.delete_matching)
    matching_sources = Forward("documents", Documents.matching_sources)
    matching_ids = Forward("documents", Documents.matching_ids)
    health = Forward("documents", Documents.health)
    embedder_meta = Forward("documents", Documents.embedder_meta)
    index_versions = Forward("documents", Documents.index_versions)
    reset = Forward("documents", Documents.reset)
