"""``Memory``: the in-process facade, with mem0's method set (add, search, get, get_all, update,
delete, delete_all, history). ``add`` runs the same phase functions as the workers,
synchronously, with no queue, over whatever ``Deps`` it is given; reading and editing need a
store that serves them (``ServingStore``: ``ElasticStore``), ``add`` and ``job`` any ``Store``.

Whose memories: the facade's ``tenant`` and, per call, ``user_id`` / ``agent_id`` / ``run_id``
(at least one), as with mem0. Failures raise ``MemqError`` (``InvalidInputError`` for bad input,
``NotFoundError`` for a memory that is not the tenant's, ``TransientError`` when a service is
down); invalid ids or messages raise pydantic's ``ValidationError`` (a ``ValueError``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pipeline.config import SearchConfig
from pipeline.domain.jobs import JobRecord, JobStatus, job_record, mem0_results
from pipeline.domain.models import AddRequest, MemoryType, MemoryView, MessageIn, Role, Scope
from pipeline.domain.state import JobState
from pipeline.domain.validity import mem0_event
from pipeline.errors import ConfigurationError, MemqError, RetriesExhaustedError, TransientError
from pipeline.features.provenance import provenance_of
from pipeline.ingestion.deps import Deps
from pipeline.ingestion.phases import PHASES, run_phase
from pipeline.serving import crud
from pipeline.serving.listing import close_cursor, delete_all, list_memories
from pipeline.serving.search import Reranker, Searcher, SearchQuery
from pipeline.store.protocol import ServingStore
from pipeline.store.reads import MemoryRecord

Messages = AddRequest | str | Sequence[Mapping[str, Any]]


class Memory:
    """add() a conversation and get its memories back in the same call; search, read, change
    and delete them."""

    def __init__(
        self,
        deps: Deps,
        *,
        tenant: str = "default",
        search: SearchConfig | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.deps = deps
        self.tenant = tenant
        self.search_config = search or SearchConfig()
        self.reranker = reranker

    def add(
        self,
        messages: Messages,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        infer: bool = True,
        memory_type: MemoryType | None = None,
        prompt: str | None = None,
        job_id: str | None = None,
    ) -> dict[str, Any]:
        """Run every phase for the conversation (a string is one user message; an
        ``AddRequest`` is taken as it is). Returns ``{"job_id", "results": [{"id", "memory",
        "event"}]}``, the memories searchable at once (persist refreshes what it wrote, as
        for every job that succeeds). The job is recorded either way; a failure re-raises
        the ``MemqError``."""
        if isinstance(messages, AddRequest):
            request = messages
        else:
            request = AddRequest(
                scope=self._scope(user_id, agent_id, run_id),
                messages=messages_in(messages),
                metadata=metadata or {},
                infer=infer,
                memory_type=memory_type,
                prompt=prompt,
            )
        return self._add(request, job_id)

    def _add(self, request: AddRequest, job_id: str | None) -> dict[str, Any]:
        state = JobState(
            job_id=job_id or request.job_id(), request=request, received_at=self.deps.clock()
        )
        existing = self.deps.store.get_job(state.job_id)
        if existing is not None and existing.status == JobStatus.SUCCEEDED:
            return result_of(existing)
        state = self._run(state)
        return {"job_id": state.job_id, "results": mem0_results(state.stored)}

    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int = 20,
        filters: dict[str, Any] | None = None,
        threshold: float | None = None,
        rerank: bool = False,
        as_of: datetime | None = None,
        include_replaced: bool = False,
    ) -> dict[str, Any]:
        """The scope's memories best matching ``query``: ``{"results": [memory + "score"]}``,
        best first (the same hybrid search as the API's): what is true now, what was true at
        ``as_of``, or (``include_replaced``) replaced memories too, with their ``valid_until``
        and ``replaced_by``. When a shard did not answer, the answer also has ``"partial":
        True`` and the ``"shards"`` counts, as the API's mem0 routes do; a whole answer has
        mem0's shape exactly."""
        searcher = Searcher(
            store=self._serving(),
            embedder=self.deps.embedder,
            lemmatizer=self.deps.lemmatizer,
            entities=self.deps.entities,
            config=self.search_config,
            entity_similarity=self.deps.limits.entity_merge_similarity,
            reranker=self.reranker,
            clock=self.deps.clock,
        )
        found = searcher.search_reported(
            SearchQuery(
                query=query,
                scope=self._scope(user_id, agent_id, run_id),
                top_k=limit,
                filters=filters,
                threshold=threshold,
                rerank=rerank,
                as_of=as_of,
                include_replaced=include_replaced,
            )
        )
        return found.mem0_answer(
            [hit.model_dump(mode="json", exclude_none=True) for hit in found.hits]
        )

    def get(self, memory_id: str, include_sources: bool = False) -> dict[str, Any]:
        """One memory of the tenant; ``NotFoundError`` otherwise. With ``include_sources``,
        its ``provenance`` (``pipeline.features.provenance``)."""
        store = self._serving()
        source = crud.get_memory(store, self.tenant, memory_id)
        if not include_sources:
            return view(source)
        return view(source) | {"provenance": provenance_of(store, source).model_dump(mode="json")}

    def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: dict[str, Any] | None = None,
        limit: int = 100,
        as_of: datetime | None = None,
        include_replaced: bool = False,
    ) -> dict[str, Any]:
        """The scope's first ``limit`` memories, oldest first: ``{"results": [...]}`` (by
        validity as ``search``)."""
        store = self._serving()
        page = list_memories(
            store,
            self._scope(user_id, agent_id, run_id),
            filters,
            page_size=limit,
            as_of=as_of,
            include_replaced=include_replaced,
        )
        if page.cursor is not None:
            close_cursor(store, page.cursor)
        return {"results": [listed_view(item) for item in page.items]}

    def update(
        self, memory_id: str, data: str | None = None, metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Change a memory's text (``data``) and/or metadata, keeping its id; the memory as it
        is now."""
        store = self._serving()
        changed = crud.update_memory(
            store, self.deps, self.tenant, memory_id, text=data, metadata=metadata
        )
        return view(changed)

    def delete(self, memory_id: str) -> dict[str, str]:
        crud.delete_memory(self._serving(), self.tenant, memory_id, self.deps.clock())
        return {"message": "Memory deleted successfully!"}

    def delete_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Delete every memory of the scope (matching ``filters``), each with a history row."""
        scope = self._scope(user_id, agent_id, run_id)
        deleted = delete_all(self._serving(), scope, filters, self.deps.clock())
        return {"message": "Memories deleted successfully!", "deleted": deleted}

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """The memory's ADD, UPDATE and DELETE events, oldest first (kept after a delete); its
        replacement by a newer memory is an UPDATE (as mem0 shows it) that names the newer
        one in ``replaced_by``."""
        rows = crud.memory_history(self._serving(), self.tenant, memory_id)
        return [row.public() | {"event": mem0_event(row.event)} for row in rows]

    def _scope(self, user_id: str | None, agent_id: str | None, run_id: str | None) -> Scope:
        return Scope(tenant=self.tenant, user_id=user_id, agent_id=agent_id, run_id=run_id)

    def _serving(self) -> ServingStore:
        store = self.deps.store
        if not isinstance(store, ServingStore):
            raise ConfigurationError(
                f"{type(store).__name__} only runs jobs: search, get, update and delete need "
                "Elasticsearch (ElasticStore)"
            )
        return store

    def _run(self, state: JobState) -> JobState:
        for spec in PHASES:
            try:
                state = run_phase(spec, state, self.deps)
            except MemqError as exc:
                dead = isinstance(exc, TransientError | RetriesExhaustedError)
                status = JobStatus.DEAD if dead else JobStatus.FAILED
                self.deps.store.save_job(
                    job_record(
                        state, status, self.deps.clock(), phase=spec.phase.value, reason=exc.reason
                    )
                )
                raise
        return state

    def job(self, job_id: str) -> JobRecord | None:
        return self.deps.store.get_job(job_id)


def messages_in(messages: str | Sequence[Mapping[str, Any]]) -> list[MessageIn]:
    """A string as one user message; mappings as messages (``role``, ``content``, ``name``)."""
    if isinstance(messages, str):
        return [MessageIn(role=Role.USER, content=messages)]
    return [MessageIn.model_validate(dict(m)) for m in messages]


def view(memory: MemoryRecord) -> dict[str, Any]:
    """A memory as the API shows it."""
    return MemoryView.from_record(memory).model_dump(mode="json", exclude_none=True)


def listed_view(item: MemoryView) -> dict[str, Any]:
    """A listed memory as the API shows it."""
    return item.model_dump(mode="json", exclude_none=True)


def result_of(record: JobRecord) -> dict[str, Any]:
    return {"job_id": record.job_id, "results": mem0_results(record.results)}


class AsyncMemory:
    """``Memory`` for ``await``: the same methods, phases and store, run inline in the calling
    coroutine (no thread, no queue). Each call holds the event loop while it runs, as long as
    the same call on ``Memory`` takes: the way to use memq from a notebook or an async test
    suite; a server answering many callers queues jobs for the workers instead."""

    def __init__(
        self,
        deps: Deps,
        *,
        tenant: str = "default",
        search: SearchConfig | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.sync = Memory(deps, tenant=tenant, search=search, reranker=reranker)

    async def add(self, messages: Messages, **kw: Any) -> dict[str, Any]:
        """See ``Memory.add``."""
        return self.sync.add(messages, **kw)

    async def search(self, query: str, **kw: Any) -> dict[str, Any]:
        """See ``Memory.search``."""
        return self.sync.search(query, **kw)

    async def get(self, memory_id: str, include_sources: bool = False) -> dict[str, Any]:
        return self.sync.get(memory_id, include_sources)

    async def get_all(self, **kw: Any) -> dict[str, Any]:
        """See ``Memory.get_all``."""
        return self.sync.get_all(**kw)

    async def update(
        self, memory_id: str, data: str | None = None, metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return self.sync.update(memory_id, data, metadata)

    async def delete(self, memory_id: str) -> dict[str, str]:
        return self.sync.delete(memory_id)

    async def delete_all(self, **kw: Any) -> dict[str, Any]:
        """See ``Memory.delete_all``."""
        return self.sync.delete_all(**kw)

    async def history(self, memory_id: str) -> list[dict[str, Any]]:
        return self.sync.history(memory_id)

    async def job(self, job_id: str) -> JobRecord | None:
        return self.sync.job(job_id)
