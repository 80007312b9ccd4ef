"""Provenance: which messages a memory came from, and which job wrote it.

Every message given to memq is stored in the messages index under ``models.message_id(job_id,
seq)`` (``seq``: its place in the request). Every memory written since provenance exists
carries ``source_ids``, the ids of its messages:

- a verbatim memory (``infer=false``): the one message it is;
- an extracted or procedural memory: every message the LLM was given as new in that job. The
  LLM reads them together (and the session's earlier messages as context, which are not
  sources), and does not say which sentence a fact came from, so this is all that is known.

A memory keeps the sources of the job that wrote it: the same fact met again later is a
duplicate and is not written again, an edit changes the text and not where it came from, and
a replacement closes the old memory while the new one carries its own sources.

Reading resolves the ids against the messages index: a message that is no longer there
(erased with its user) is not shown, only counted in ``missing``. A memory stored before
provenance has no ``source_ids``: ``known`` is false and the list is empty.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from pipeline.store.protocol import ServingStore
from pipeline.store.reads import MemoryRecord, StoredMessage
from pipeline.store.routing import owner_routing


class SourceMessage(BaseModel):
    """A message a memory came from, as it was given to memq (text parts only)."""

    id: str
    role: str
    name: str | None = None
    content: str
    timestamp: datetime | None = Field(default=None, description="when it was said")
    job_id: str
    seq: int = Field(description="its place in its job's request")


class SourceJob(BaseModel):
    """The job that wrote the memory (``status`` None when its record is gone)."""

    id: str
    status: str | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None


class Provenance(BaseModel):
    """Where a memory came from. ``known`` is false for a memory stored before memq recorded
    sources (then ``sources`` is empty); ``missing`` counts sources no longer stored."""

    known: bool
    job: SourceJob | None = None
    sources: list[SourceMessage] = Field(default_factory=list)
    missing: int = 0


def provenance_of(store: ServingStore, memory: MemoryRecord) -> Provenance:
    """The provenance of a stored memory: its messages in one read on its scope's shard, its
    job record in another. Raises what the store raises."""
    ids = memory.source_ids
    routing = owner_routing(memory.tenant, memory.user_id, memory.agent_id, memory.run_id)
    found = store.get_messages(ids, routing) if ids else {}
    tenant = memory.tenant  # an imported memory's ids never reach another tenant's
    sources = [source_message(found[i]) for i in ids if i in found and found[i].tenant == tenant]
    return Provenance(
        known=bool(ids),
        job=source_job(store, memory.job_id or ""),
        sources=sources,
        missing=len(ids) - len(sources),
    )


def source_message(message: StoredMessage) -> SourceMessage:
    return SourceMessage(
        id=message.id,
        role=message.role,
        name=message.name,
        content=message.content,
        timestamp=message.created_at,
        job_id=message.job_id,
        seq=message.seq,
    )


def source_job(store: ServingStore, job_id: str) -> SourceJob | None:
    """The job as its record tells (only its id when the record is gone); None for a memory
    no job wrote (one imported without a job id)."""
    if not job_id:
        return None
    record = store.get_jobs([job_id]).get(job_id)
    if record is None:
        return SourceJob(id=job_id)
    return SourceJob(
        id=job_id,
        status=record.status.value,
        created_at=record.created_at,
        finished_at=record.finished_at,
    )
