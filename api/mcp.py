"""memq as a Model Context Protocol server: seven tools over memq's own functions.

The same tools serve two transports:
- streamable HTTP at ``/mcp`` in the API (``mount_mcp``): every request carries a tenant key
  (``Authorization: Bearer``), checked before the MCP layer sees it; stateless, so any API
  process answers any request;
- stdio (``memq mcp``, ``serve_stdio``): one process per desktop client, acting with the key
  in ``MEMQ_MCP_KEY``.

The tenant always comes from the key. A tool's bad argument, an unknown id or a store that is
down comes back as a tool error (``isError``) whose text says what to change; nothing a caller
sends crashes the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

import anyio
from fastapi import FastAPI
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field, ValidationError
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from api.convert import add_request, job_public, memory_detail, memory_public, shards_public
from api.errors import error
from api.limits import Path, RateLimitedError
from api.request_ids import request_id_of
from api.resources import Resources
from api.schemas import (
    JobPublic,
    MemoryCreate,
    MemoryPage,
    MemoryPublic,
    SearchResults,
)
from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import AwareDatetime, Identifier, MemoryType
from pipeline.domain.models import Scope as MemoryScope
from pipeline.errors import (
    InvalidInputError,
    MemqError,
    NotFoundError,
    RetriesExhaustedError,
    TransientError,
)
from pipeline.ingestion.intake import Accepted
from pipeline.serving import crud
from pipeline.serving.keys import Principal
from pipeline.serving.listing import list_memories
from pipeline.serving.search import SearchQuery
from pipeline.serving.search_models import AS_OF, INCLUDE_REPLACED

log = logging.getLogger("memq.mcp")
T = TypeVar("T")
PrincipalOf = Callable[[Context], Principal]
PRINCIPAL_STATE = "memq_principal"

INSTRUCTIONS = (
    "memq is a long-term memory. Call add_memory with what the user said (and your replies) "
    "to remember it; it is processed in the background and returns a job id. Call "
    "search_memories before answering to recall what you know about the user. Every call "
    "names whose memory it is with user_id, agent_id and/or run_id (at least one)."
)


class AddedJob(JobPublic):
    """``add_memory``'s answer: the job (``created`` false when the same conversation, or the
    same idempotency key, was a job already)."""

    created: bool


class MemoryDeleted(BaseModel):
    deleted: str = Field(description="the id of the memory deleted")


class ChatMessage(BaseModel):
    """One message of the conversation to remember."""

    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(min_length=1, max_length=100_000)
    name: Identifier | None = None


UserId = Annotated[Identifier | None, Field(description="whose memory: a user id")]
AgentId = Annotated[Identifier | None, Field(description="whose memory: an agent id")]
RunId = Annotated[Identifier | None, Field(description="whose memory: a run or session id")]
MemoryId = Annotated[str, Field(pattern=r"^\S{1,128}$", description="a memory id")]
Filters = Annotated[
    dict[str, Any] | None,
    Field(
        description='narrow by fields or metadata, e.g. {"category": "food"}, '
        '{"created_at": {"gte": "2025-01-01"}}, {"AND": [...]}, {"OR": [...]}, {"NOT": ...}; '
        "operators eq, ne, gt, gte, lt, lte, in, nin, contains, icontains, and * (exists)"
    ),
]
Metadata = Annotated[
    dict[str, Any] | None, Field(description="free-form JSON stored with the memory")
]
AsOf = Annotated[AwareDatetime | None, Field(description=AS_OF)]
IncludeReplaced = Annotated[bool, Field(description=INCLUDE_REPLACED)]


class MemqTools:
    """The tools, bound to one memq (the API's resources: the same store, search and intake
    as its routes) and to the way a call's principal is found (the HTTP request's key, or the
    stdio process's)."""

    def __init__(self, resources: Resources, principal_of: PrincipalOf) -> None:
        self.resources = resources
        self.services = resources.services
        self.principal_of = principal_of

    async def charged(self, ctx: Context, path: Path) -> Principal:
        """The call's principal, its tenant charged one request on ``path``: the tools count
        against the same per-tenant limits as the routes."""
        principal = self.principal_of(ctx)
        await self.call(lambda: self.resources.limits.charge(principal.tenant, path))
        return principal

    async def call(self, fn: Callable[[], T]) -> T:
        """Run blocking store work off the event loop; memq's errors become tool errors."""
        try:
            return await anyio.to_thread.run_sync(fn)
        except MemqError as exc:
            raise ToolError(tool_message(exc)) from exc
        except ValidationError as exc:
            raise ToolError(f"invalid arguments: {validation_message(exc)}") from exc

    async def add_memory(
        self,
        ctx: Context,
        *,
        messages: Annotated[
            str | list[ChatMessage],
            Field(description="the text to remember, or the conversation as messages"),
        ],
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
        metadata: Metadata = None,
        infer: Annotated[
            bool,
            Field(description="extract facts with the LLM (false: store each message as is)"),
        ] = True,
        memory_type: Annotated[
            MemoryType | None, Field(description="procedural_memory needs an agent_id")
        ] = None,
        timestamp: Annotated[
            datetime | None, Field(description="when the conversation happened (ISO 8601)")
        ] = None,
        wait_s: Annotated[
            float,
            Field(ge=0, le=300, description="seconds to wait for the result (0: do not wait)"),
        ] = 0,
    ) -> AddedJob:
        principal = await self.charged(ctx, "write")
        raw = messages if isinstance(messages, str) else [m.model_dump() for m in messages]
        fields = {
            "messages": raw,
            "user_id": user_id,
            "agent_id": agent_id,
            "run_id": run_id,
            "metadata": metadata,
            "infer": infer,
            "memory_type": memory_type,
            "timestamp": timestamp,
        }

        def accept() -> Accepted:
            body = MemoryCreate.model_validate(fields)
            request_id = request_id_of(ctx.request_context.request)
            return self.resources.intake.submit(add_request(body, principal), request_id=request_id)

        accepted = await self.call(accept)
        record = accepted.record
        if wait_s > 0:
            record = await self.wait(record, min(wait_s, self.resources.settings.api.wait_max_s))
        if record.status in (JobStatus.FAILED, JobStatus.DEAD):
            raise ToolError(failed_job_message(record))
        return AddedJob(**job_public(record).model_dump(), created=accepted.created)

    async def wait(self, record: JobRecord, timeout_s: float) -> JobRecord:
        deadline = time.monotonic() + timeout_s
        store = await self.call(lambda: self.services.store)
        job_id = record.job_id
        while not record.ended and time.monotonic() < deadline:
            await anyio.sleep(0.1)
            latest: JobRecord | None = await self.call(lambda: store.get_job(job_id))
            record = latest or record
        return record

    async def search_memories(
        self,
        ctx: Context,
        *,
        query: Annotated[str, Field(min_length=1, max_length=4000, description="what to recall")],
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
        filters: Filters = None,
        top_k: Annotated[int, Field(ge=1, le=100, description="how many results at most")] = 10,
        threshold: Annotated[
            float | None, Field(ge=0, le=1, description="drop results scored below this")
        ] = None,
        as_of: AsOf = None,
        include_replaced: IncludeReplaced = False,
    ) -> SearchResults:
        principal = await self.charged(ctx, "search")

        def run() -> SearchResults:
            scope = scope_of(principal, user_id, agent_id, run_id)
            search = SearchQuery(
                scope=scope,
                query=query,
                filters=filters,
                top_k=top_k,
                threshold=threshold,
                as_of=as_of,
                include_replaced=include_replaced,
            )
            found = self.resources.searcher.search_reported(search)
            shards = shards_public(found.shards)
            return SearchResults(results=found.hits, partial=found.partial, shards=shards)

        return await self.call(run)

    async def get_memories(
        self,
        ctx: Context,
        *,
        user_id: UserId = None,
        agent_id: AgentId = None,
        run_id: RunId = None,
        filters: Filters = None,
        page_size: Annotated[int, Field(ge=1, le=100, description="memories per page")] = 50,
        cursor: Annotated[
            str | None, Field(max_length=10_000, description="next_cursor of the previous page")
        ] = None,
        as_of: AsOf = None,
        include_replaced: IncludeReplaced = False,
    ) -> MemoryPage:
        principal = await self.charged(ctx, "read")

        def run() -> MemoryPage:
            scope = scope_of(principal, user_id, agent_id, run_id)
            page = self.resources.limits.listing(
                principal.tenant,
                cursor,
                lambda at: list_memories(
                    self.services.store,
                    scope,
                    filters,
                    page_size=page_size,
                    cursor=at,
                    as_of=as_of,
                    include_replaced=include_replaced,
                ),
            )
            return MemoryPage(results=page.items, next_cursor=page.cursor)

        return await self.call(run)

    async def get_memory(
        self,
        ctx: Context,
        memory_id: MemoryId,
        include_sources: Annotated[
            bool,
            Field(description="also return its provenance: the messages it came from, its job"),
        ] = False,
    ) -> MemoryPublic:
        """The memory; with its provenance (a ``MemoryDetail``) only when asked for."""
        tenant = (await self.charged(ctx, "read")).tenant
        store = self.services.store

        def run() -> MemoryPublic:
            record = crud.get_memory(store, tenant, memory_id)
            return (
                memory_detail(store, record, ["sources"])
                if include_sources
                else memory_public(record)
            )

        return await self.call(run)

    async def update_memory(
        self,
        ctx: Context,
        memory_id: MemoryId,
        text: Annotated[
            str | None, Field(max_length=20_000, description="the new text (re-embedded)")
        ] = None,
        metadata: Metadata = None,
    ) -> MemoryPublic:
        tenant = (await self.charged(ctx, "write")).tenant
        services = self.services
        updated = await self.call(
            lambda: crud.update_memory(
                services.store, services.deps, tenant, memory_id, text=text, metadata=metadata
            )
        )
        return memory_public(updated)

    async def delete_memory(self, ctx: Context, memory_id: MemoryId) -> MemoryDeleted:
        tenant = (await self.charged(ctx, "write")).tenant
        services = self.services
        await self.call(
            lambda: crud.delete_memory(services.store, tenant, memory_id, services.clock())
        )
        return MemoryDeleted(deleted=memory_id)

    async def job_status(
        self,
        ctx: Context,
        job_id: Annotated[str, Field(pattern=r"^\S{1,128}$", description="from add_memory")],
    ) -> JobPublic:
        tenant = (await self.charged(ctx, "read")).tenant
        record = await self.call(lambda: self.services.store.get_job(job_id))
        if record is None or record.tenant != tenant:
            raise ToolError(f"no job {job_id}")
        return job_public(record)


def scope_of(
    principal: Principal, user_id: str | None, agent_id: str | None, run_id: str | None
) -> MemoryScope:
    if user_id is None and agent_id is None and run_id is None:
        raise InvalidInputError("give at least one of user_id, agent_id, run_id", field="user_id")
    return MemoryScope(tenant=principal.tenant, user_id=user_id, agent_id=agent_id, run_id=run_id)


def tool_message(exc: MemqError) -> str:
    """What the agent reads: the reason, and what to do about it."""
    if isinstance(exc, InvalidInputError):
        where = f"{exc.field}: " if exc.field and exc.field not in exc.reason else ""
        return f"invalid arguments: {where}{exc.reason}"
    if isinstance(exc, NotFoundError):
        return exc.reason
    if isinstance(exc, RateLimitedError):
        return f"{exc.reason}; try again in {exc.retry_after_s} s"
    if isinstance(exc, TransientError | RetriesExhaustedError):
        return f"memq is unavailable right now; try again shortly ({exc.reason})"
    return exc.reason


def failed_job_message(record: JobRecord) -> str:
    """What the agent reads of a job that ended without storing its memories."""
    again = " (it is listed for replay)" if record.status == JobStatus.DEAD else ""
    return (
        f"the memory was not stored: job {record.job_id} {record.status}{again}: "
        f"{record.reason or 'no reason recorded'}"
    )


def validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


TOOLS: list[tuple[str, str, bool, bool]] = [
    # name, description, read-only, destructive
    (
        "add_memory",
        "Remember a conversation or a piece of text for a user, agent or run. Returns at once "
        "with a job id (processing takes a few seconds; job_status tells when it is done), or "
        "waits up to wait_s seconds and returns the finished job with the memories it stored "
        "(a job that failed is an error giving its reason).",
        False,
        False,
    ),
    (
        "search_memories",
        "Find the memories most relevant to a query (meaning, keywords and named entities), "
        "best first, with a score; optionally narrowed by filters. partial is true when part "
        "of the store did not answer: memories may then be missing, so do not conclude that "
        "something was never said.",
        True,
        False,
    ),
    (
        "get_memories",
        "List the memories of a user, agent or run, oldest first, a page at a time; pass "
        "next_cursor back to get the next page.",
        True,
        False,
    ),
    (
        "get_memory",
        "Read one memory by its id (include_sources: with the messages it came from).",
        True,
        False,
    ),
    (
        "update_memory",
        "Change a memory's text and/or metadata; its id stays and its history records the change.",
        False,
        False,
    ),
    ("delete_memory", "Delete one memory by its id (its history is kept).", False, True),
    (
        "job_status",
        "The status of an add_memory job (queued, running, succeeded, failed, dead) and, when "
        "finished, the memories it stored.",
        True,
        False,
    ),
]


def build_server(resources: Resources, principal_of: PrincipalOf) -> MCPServer:
    """An MCP server whose tools act for the principal ``principal_of`` finds in each call."""
    server: MCPServer = MCPServer(
        name="memq", instructions=INSTRUCTIONS, version="0.1.0", log_level="WARNING"
    )
    tools = MemqTools(resources, principal_of)
    for name, description, read_only, destructive in TOOLS:
        server.add_tool(
            getattr(tools, name),
            name=name,
            description=description,
            annotations=ToolAnnotations(
                read_only_hint=read_only, destructive_hint=destructive, open_world_hint=False
            ),
            structured_output=False,
        )
    return server


# --- streamable HTTP, in the API ----------------------------------------------------------


def request_principal(ctx: Context) -> Principal:
    """The principal ``KeyGate`` put on the HTTP request."""
    request = ctx.request_context.request
    principal = getattr(getattr(request, "state", None), PRINCIPAL_STATE, None)
    if not isinstance(principal, Principal):
        raise ToolError("not authenticated: send 'Authorization: Bearer <memq key>'")
    return principal


class KeyGate:
    """Authenticate each MCP HTTP request with a memq key before the MCP layer reads it; a
    missing or unknown key is answered 401 like the rest of the API."""

    def __init__(self, app: ASGIApp, resources: Resources) -> None:
        self.app = app
        self.resources = resources

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        principal: Principal | None = None
        if scheme.lower() in ("bearer", "token") and token.strip():
            admin_key = self.resources.settings.api.admin_key
            services = self.resources.services
            try:
                principal = await anyio.to_thread.run_sync(
                    lambda: services.keys.authenticate(token.strip(), admin_key)
                )
            except MemqError as exc:
                await error(503, "unavailable", exc.reason)(scope, receive, send)
                return
        if principal is None:
            response = error(401, "unauthorized", "send 'Authorization: Bearer <memq key>'")
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        state = {**scope.get("state", {}), PRINCIPAL_STATE: principal}
        await self.app({**scope, "state": state}, receive, send)


def mount_mcp(app: FastAPI, resources: Resources) -> Callable[[FastAPI], Any]:
    """Serve the MCP endpoint at ``/mcp`` (stateless streamable HTTP, JSON responses) and
    return the lifespan that runs its session manager. The key store is reached when a
    request needs it (it needs Elasticsearch; building the app does not)."""
    server = build_server(resources, request_principal)
    server.streamable_http_app(
        stateless_http=True, json_response=True, host=resources.settings.api.host
    )
    manager = server.session_manager
    gate = KeyGate(manager.handle_request, resources)
    app.router.routes.append(Route("/mcp", gate, include_in_schema=False))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return lifespan


# --- stdio, for desktop clients -----------------------------------------------------------


def serve_stdio(resources: Resources, key: str) -> None:
    """Run the server over stdin/stdout for the tenant of ``key`` (checked first: a wrong key
    stops here with a message, not at the first tool call)."""
    principal = resources.services.keys.authenticate(key, resources.settings.api.admin_key)
    if principal is None:
        raise InvalidInputError("MEMQ_MCP_KEY is not a valid memq key (unknown or revoked)")
    server = build_server(resources, lambda _ctx: principal)
    log.info("memq MCP server on stdio for tenant %s", json.dumps(principal.tenant))
    server.run("stdio")
