"""Erasing a user everywhere memq keeps data: Elasticsearch (``pipeline.features.erase``), then
Redis: the state of the user's jobs (it holds their request), their places in session lines, the
vectors of their new turns embedded ahead, and chat messages still waiting in a debounce
buffer.

A job of the user still queued or running when the erasure starts finds its state gone and
stops; one caught between two writes may still store something, so an erasure answered while
jobs of the user were in flight says so (``in_flight``) and is safe to repeat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.adapters.embedding.shared import drop_vectors
from pipeline.adapters.embedding.versioned import model_key
from pipeline.adapters.redis_errors import redis_errors
from pipeline.domain.jobs import ACTIVE_STATUSES
from pipeline.features.erase import UserErased, erase_user
from pipeline.ingestion.phases.retrieve import query_texts
from workers.aof import erased_from_redis

if TYPE_CHECKING:
    from workers.runtime import Runtime

ACTIVE = ACTIVE_STATUSES


def erase_user_everywhere(runtime: Runtime, tenant: str, user_id: str) -> UserErased:
    """Counts of what was erased, per place; ``in_flight`` lists jobs that were not finished.
    Chat buffers are searched when ``tenant`` is the one chat platforms write to."""
    chat_tenant = runtime.settings.chat.tenant
    states = runtime.states
    erasure = erase_user(runtime.store, tenant, user_id, runtime.clock())
    loaded = states.load_many([job.job_id for job in erasure.jobs])
    unfinished = [state for state in loaded if state is not None]
    in_flight = [state.job_id for state in unfinished]
    turns = [text for _, text in query_texts(unfinished)]
    with redis_errors("drop the vectors of erased jobs' turns"):
        prefix, model = runtime.vectors_kept_as()
        drop_vectors(runtime.redis, prefix, model_key(runtime.deps.embedder, model), turns)
    for job in erasure.jobs:
        if job.session_key:
            states.leave_line(job.session_key, job.job_id)
        for attempt in range(job.attempts + 1):
            states.forget(job.job_id, attempt)
    buffered = runtime.chat_buffer.erase_user(user_id) if chat_tenant == tenant else 0
    with redis_errors("rewrite the append-only file"):
        erased_from_redis(runtime.redis)
    counts = {**erasure.counts, "job_states": len(erasure.jobs), "chat_buffered": buffered}
    return UserErased(erased=counts, in_flight=in_flight)
