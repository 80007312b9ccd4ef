"""``Client``: memq over HTTP, synchronously, over ``httpx.Client``. Each method builds its
``Operation`` (``memq.client.operations``) and runs it here: this module only sends, retries
and sleeps."""

from __future__ import annotations

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
from memq.client.paging import JobPager, MemoryPager
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


class Client(Retrying):
    """memq over HTTP, synchronously. Use as a context manager, or call ``close()``.

    ``base_url``, ``api_key``, ``timeout_s`` and ``max_retries`` default to
    ``MEMQ_CLIENT_URL``, ``MEMQ_CLIENT_API_KEY``, ``MEMQ_CLIENT_TIMEOUT_S`` (30 s) and
    ``MEMQ_CLIENT_MAX_RETRIES`` (2). ``timeout_s`` bounds each HTTP request (each try);
    ``max_retries`` is how many times a call is sent again after a 429, a 502/503/504 or a
    connection failure (``Repeat`` says which calls after which; 0: never), waiting as
    ``backoff`` says; ``transport`` replaces the network (tests pass an ``httpx.MockTransport``).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float | None = None,
        transport: httpx.BaseTransport | None = None,
        *,
        max_retries: int | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        conn = connection_from(base_url, api_key, timeout_s, max_retries, backoff)
        self.base_url = conn.base_url
        self._timeout_s = conn.timeout_s
        self._retry = conn.retry
        self._http = httpx.Client(
            base_url=conn.base_url,
            headers=headers_for(conn.api_key),
            timeout=conn.timeout_s,
            transport=transport,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the connection pool; the client is unusable afterwards."""
        self._http.close()

    def _run(self, operation: op.Operation[T]) -> T:
        return operation.read(self._send(operation.call))

    def _send(self, call: Call) -> Any:
        """``call``'s answer, tried again as ``RetryPolicy.delay_s`` says."""
        options, retries_done = call.options(), 0
        while True:
            outcome = self._try(call, options)
            delay_s = self._retry.delay_s(outcome, call.replay, retries_done)
            if delay_s is None:
                return answer(outcome)
            time.sleep(delay_s)
            retries_done += 1

    def _try(self, call: Call, options: dict[str, Any]) -> Outcome:
        try:
            return self._http.request(call.method, call.path, **options)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return exc

    # jobs

    @overload
    def add(
        self, messages: Messages, *, wait: Literal[False] = False, **options: Unpack[AddOptions]
    ) -> JobAccepted: ...

    @overload
    def add(
        self, messages: Messages, *, wait: Literal[True], **options: Unpack[AddOptions]
    ) -> Job: ...

    @overload
    def add(
        self, messages: Messages, *, wait: bool, **options: Unpack[AddOptions]
    ) -> JobAccepted | Job: ...

    def add(
        self, messages: Messages, *, wait: bool = False, **options: Unpack[AddOptions]
    ) -> JobAccepted | Job:
        """Queue a conversation (POST /v1/memories). Returns a ``JobAccepted`` (``job_id``,
        ``status``, ``status_url``, ``created``); with ``wait=True``, the finished ``Job``
        instead (whatever its status), or ``MemqTimeoutError`` after ``wait_timeout_s``.

        ``options`` (``AddOptions``): ``user_id``, ``agent_id``, ``run_id`` (at least one),
        ``metadata``, ``infer`` (True), ``memory_type``, ``prompt``, ``timestamp`` (a datetime
        or Unix seconds), ``expiration_date``, ``webhook_url``, ``idempotency_key`` and
        ``wait_timeout_s`` (60). The same conversation, or the same ``idempotency_key``, always
        answers with the same job, which is why an add is retried like a read; an add that was
        retried after its answer was lost may say ``created=False`` for the job it made."""
        add = add_call(messages, options, wait, self._timeout_s)
        deadline = time.monotonic() + add.wait_timeout_s
        if not wait:
            return parse(JobAccepted, self._send(add.call))
        job = accepted_or_job(self._send(add.call))
        if isinstance(job, Job) and job.finished:
            return job
        return self.wait_for(job, timeout_s=max(deadline - time.monotonic(), 0.0))

    def job(self, job_id: str) -> Job:
        """The job (GET /v1/jobs/{id}): status, phase, counts (with LLM tokens), timings,
        results, errors."""
        return self._run(op.job(job_id))

    def retry(self, job_id: str) -> Job:
        """Replay a failed or dead job from its recorded request; returns the job."""
        return self._run(op.retry(job_id))

    def jobs_page(
        self, *, limit: int = 50, cursor: str | None = None, **query: Unpack[JobQuery]
    ) -> JobPage:
        """One page of the tenant's jobs, newest first (GET /v1/jobs); pass the page's
        ``next_cursor`` with the same filters for the next one."""
        return self._run(op.jobs_page(query, limit, cursor))

    def jobs(self, *, limit: int = 50, **query: Unpack[JobQuery]) -> JobPager:
        """Every job matching the filters, newest first, as a ``Pager``: iterate it for
        ``Job`` objects (``limit`` a page, fetched as it is consumed) or walk ``.pages()``.
        ``client.jobs(status="failed")`` lists what to look at or replay."""

        def fetch(cursor: str | None) -> JobPage:
            return self.jobs_page(limit=limit, cursor=cursor, **query)

        return JobPager(fetch)

    def wait_for(self, job_or_id: JobRef, timeout_s: float = 60.0, poll_s: float = 0.2) -> Job:
        """Poll the job until it is succeeded, failed or dead and return it (a failed job is
        returned, not raised: read ``status``). ``MemqTimeoutError`` after ``timeout_s``."""
        job_id = job_id_of(job_or_id)
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            remaining = deadline - time.monotonic()
            if job.finished:
                return job
            if remaining <= 0:
                raise timed_out(job_id, timeout_s, job)
            time.sleep(min(poll_s, remaining))

    def add_batch(self, items: Sequence[Mapping[str, Any]]) -> BatchAccepted:
        """Queue many conversations (POST /v1/batches), each item an ``add`` body; returns
        ``batch_id``, ``status_url`` and the accepted ``jobs``. A bad item queues nothing."""
        return self._run(op.add_batch(items))

    def batch(self, batch_id: str) -> Batch:
        """Counts of the batch's jobs per status: ``batch_id``, ``total``, ``counts``."""
        return self._run(op.batch(batch_id))

    # memories

    def search(
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
        """Hybrid search in a scope (at least one id); hits best first. ``reference_time`` is
        the moment relative times in the query ("last week") are read against (default: the
        server's now). Memories a newer one replaced are left out unless ``include_replaced``;
        ``as_of`` answers with what was true then."""
        return self._run(
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

    def search_many(self, queries: Sequence[Mapping[str, Any]]) -> list[SearchHits]:
        """Several searches (each a ``search`` body with ``query``), answered in order, each
        with its own ``partial`` flag."""
        return self._run(op.search_many(queries))

    def get(self, memory_id: str, *, include_sources: bool = False) -> Memory:
        """One memory; ``NotFoundError`` when it does not exist (or was deleted). With
        ``include_sources``, its ``provenance``: the messages it came from and its job."""
        return self._run(op.get(memory_id, include_sources))

    def page(
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
        """One page of the scope's memories, oldest first (GET /v1/memories); pass the
        page's ``next_cursor`` for the next one."""
        scope = scope_params(user_id, agent_id, run_id)
        return self._run(op.page(scope, filters, page_size, cursor, validity))

    def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        page_size: int = 100,
        **validity: Unpack[Validity],
    ) -> MemoryPager:
        """Every memory of the scope, oldest first, as a ``MemoryPager``: iterate it for
        ``Memory`` objects (pages are fetched as it is consumed) or walk ``.pages()``."""
        scope = scope_params(user_id, agent_id, run_id)

        def fetch(cursor: str | None) -> MemoryPage:
            return self._run(op.page(scope, filters, page_size, cursor, validity))

        return MemoryPager(fetch)

    def update(
        self, memory_id: str, *, text: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> Memory:
        """New text (re-embedded) and/or metadata; returns the updated memory."""
        return self._run(op.update(memory_id, text, metadata))

    def delete(self, memory_id: str) -> Message:
        """Delete one memory (its history keeps a DELETE row). A delete sent again because its
        answer was lost answers ``NotFoundError`` when the first had done it."""
        return self._run(op.delete(memory_id))

    def delete_all(
        self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> Deleted:
        """Delete every memory of a scope (at least one id); ``deleted`` is the count."""
        return self._run(op.delete_all(scope_params(user_id, agent_id, run_id)))

    def history(self, memory_id: str) -> list[HistoryEntry]:
        """ADD, UPDATE and DELETE events of a memory, oldest first."""
        return self._run(op.history(memory_id))

    # admin and health

    def create_key(self, tenant: str, name: str = "", admin: bool = False) -> KeyCreated:
        """A new API key for ``tenant`` (needs an admin key): ``id``, ``tenant``, ``key``."""
        return self._run(op.create_key(tenant, name, admin))

    def revoke_key(self, key_id: str) -> Message:
        """Revoke a key by its id (needs an admin key)."""
        return self._run(op.revoke_key(key_id))

    def healthz(self) -> Health:
        """The API process is up: ``status`` is ``ok``."""
        return self._run(op.healthz())

    def readyz(self) -> Readiness:
        """Elasticsearch and Redis reachable; ``UnavailableError`` (the answer as its message)
        when one is not."""
        return self._run(op.readyz())
