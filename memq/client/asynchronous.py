"""``AsyncClient``: memq over HTTP with ``async`` methods, over ``httpx.AsyncClient``: the same
operations (``memq.client.operations``), retry rules and answers as ``Client``; only the
sending, the waiting and the polling are its own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self, TypeVar, Unpack, overload

import httpx

from memq.client import operations as op
from memq.client.answers import accepted_or_job, answer, parse, timed_out
from memq.client.calls import (
    AddOptions,
    Call,
    JobQuery,
    JobRef,
    Messages,
    Validity,
    add_call,
    job_id_of,
    scope_params,
)
from memq.client.connection import connection_from, headers_for
from memq.client.paging import AsyncJobPager, AsyncMemoryPager
from memq.client.retries import Backoff, Outcome, Retrying
from memq.types import (
    Batch,
    BatchAccepted,
    Deleted,
    Health,
    HistoryEntry,
    Job,
    JobAccepted,
    JobPage,
    KeyCreated,
    Memory,
    MemoryPage,
    Message,
    Readiness,
    SearchHits,
)

T = TypeVar("T")


class AsyncClient(Retrying):
    """memq over HTTP with ``async`` methods; the same API, contracts and environment
    variables as ``Client``. Use as an async context manager, or ``await aclose()``
    (``close()`` is an alias)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        max_retries: int | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        conn = connection_from(base_url, api_key, timeout_s, max_retries, backoff)
        self.base_url = conn.base_url
        self._timeout_s = conn.timeout_s
        self._retry = conn.retry
        self._http = httpx.AsyncClient(
            base_url=conn.base_url,
            headers=headers_for(conn.api_key),
            timeout=conn.timeout_s,
            transport=transport,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Release the connection pool; the client is unusable afterwards."""
        await self._http.aclose()

    aclose = close

    async def _run(self, operation: op.Operation[T]) -> T:
        return operation.read(await self._send(operation.call))

    async def _send(self, call: Call) -> Any:
        """``call``'s answer, tried again as ``RetryPolicy.delay_s`` says."""
        options, retries_done = call.options(), 0
        while True:
            outcome = await self._try(call, options)
            delay_s = self._retry.delay_s(outcome, call.replay, retries_done)
            if delay_s is None:
                return answer(outcome)
            await asyncio.sleep(delay_s)
            retries_done += 1

    async def _try(self, call: Call, options: dict[str, Any]) -> Outcome:
        try:
            return await self._http.request(call.method, call.path, **options)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return exc

    # jobs

    @overload
    async def add(
        self, messages: Messages, *, wait: Literal[False] = False, **options: Unpack[AddOptions]
    ) -> JobAccepted: ...

    @overload
    async def add(
        self, messages: Messages, *, wait: Literal[True], **options: Unpack[AddOptions]
    ) -> Job: ...

    @overload
    async def add(
        self, messages: Messages, *, wait: bool, **options: Unpack[AddOptions]
    ) -> JobAccepted | Job: ...

    async def add(
        self, messages: Messages, *, wait: bool = False, **options: Unpack[AddOptions]
    ) -> JobAccepted | Job:
        """See ``Client.add``."""
        add = add_call(messages, options, wait, self._timeout_s)
        deadline = time.monotonic() + add.wait_timeout_s
        if not wait:
            return parse(JobAccepted, await self._send(add.call))
        job = accepted_or_job(await self._send(add.call))
        if isinstance(job, Job) and job.finished:
            return job
        return await self.wait_for(job, timeout_s=max(deadline - time.monotonic(), 0.0))

    async def job(self, job_id: str) -> Job:
        """See ``Client.job``."""
        return await self._run(op.job(job_id))

    async def retry(self, job_id: str) -> Job:
        """See ``Client.retry``."""
        return await self._run(op.retry(job_id))

    async def jobs_page(
        self, *, limit: int = 50, cursor: str | None = None, **query: Unpack[JobQuery]
    ) -> JobPage:
        """See ``Client.jobs_page``."""
        return await self._run(op.jobs_page(query, limit, cursor))

    def jobs(self, *, limit: int = 50, **query: Unpack[JobQuery]) -> AsyncJobPager:
        """See ``Client.jobs``; iterate with ``async for`` (not awaited itself)."""

        async def fetch(cursor: str | None) -> JobPage:
            return await self.jobs_page(limit=limit, cursor=cursor, **query)

        return AsyncJobPager(fetch)

    async def wait_for(
        self, job_or_id: JobRef, timeout_s: float = 60.0, poll_s: float = 0.2
    ) -> Job:
        """See ``Client.wait_for``."""
        job_id = job_id_of(job_or_id)
        deadline = time.monotonic() + timeout_s
        while True:
            job = await self.job(job_id)
            remaining = deadline - time.monotonic()
            if job.finished:
                return job
            if remaining <= 0:
                raise timed_out(job_id, timeout_s, job)
            await asyncio.sleep(min(poll_s, remaining))

    async def add_batch(self, items: Sequence[Mapping[str, Any]]) -> BatchAccepted:
        """See ``Client.add_batch``."""
        return await self._run(op.add_batch(items))

    async def batch(self, batch_id: str) -> Batch:
        """See ``Client.batch``."""
        return await self._run(op.batch(batch_id))

    # memories

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        top_k: int = 20,
        threshold: float | None = None,
        rerank: bool = False,
        explain: bool = False,
        show_expired: bool = False,
        reference_time: datetime | None = None,
        as_of: datetime | None = None,
        include_replaced: bool = False,
    ) -> SearchHits:
        """See ``Client.search``."""
        return await self._run(
            op.search(
                query,
                user_id=user_id,
                agent_id=agent_id,
                run_id=run_id,
                filters=filters,
                top_k=top_k,
                threshold=threshold,
                rerank=rerank,
                explain=explain,
                show_expired=show_expired,
                reference_time=reference_time,
                as_of=as_of,
                include_replaced=include_replaced,
            )
        )

    async def search_many(self, queries: Sequence[Mapping[str, Any]]) -> list[SearchHits]:
        """See ``Client.search_many``."""
        return await self._run(op.search_many(queries))

    async def get(self, memory_id: str, *, include_sources: bool = False) -> Memory:
        """See ``Client.get``."""
        return await self._run(op.get(memory_id, include_sources))

    async def page(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        page_size: int = 100,
        cursor: str | None = None,
        **validity: Unpack[Validity],
    ) -> MemoryPage:
        """See ``Client.page``."""
        scope = scope_params(user_id, agent_id, run_id)
        return await self._run(op.page(scope, filters, page_size, cursor, validity))

    def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        page_size: int = 100,
        **validity: Unpack[Validity],
    ) -> AsyncMemoryPager:
        """See ``Client.get_all``; iterate with ``async for`` (not awaited itself)."""
        scope = scope_params(user_id, agent_id, run_id)

        async def fetch(cursor: str | None) -> MemoryPage:
            return await self._run(op.page(scope, filters, page_size, cursor, validity))

        return AsyncMemoryPager(fetch)

    async def update(
        self, memory_id: str, *, text: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> Memory:
        """See ``Client.update``."""
        return await self._run(op.update(memory_id, text, metadata))

    async def delete(self, memory_id: str) -> Message:
        """See ``Client.delete``."""
        return await self._run(op.delete(memory_id))

    async def delete_all(
        self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> Deleted:
        """See ``Client.delete_all``."""
        return await self._run(op.delete_all(scope_params(user_id, agent_id, run_id)))

    async def history(self, memory_id: str) -> list[HistoryEntry]:
        """See ``Client.history``."""
        return await self._run(op.history(memory_id))

    # admin and health

    async def create_key(self, tenant: str, name: str = "", admin: bool = False) -> KeyCreated:
        """See ``Client.create_key``."""
        return await self._run(op.create_key(tenant, name, admin))

    async def revoke_key(self, key_id: str) -> Message:
        """See ``Client.revoke_key``."""
        return await self._run(op.revoke_key(key_id))

    async def healthz(self) -> Health:
        """See ``Client.healthz``."""
        return await self._run(op.healthz())

    async def readyz(self) -> Readiness:
        """See ``Client.readyz``."""
        return await self._run(op.readyz())
