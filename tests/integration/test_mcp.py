"""The MCP server driven by the MCP SDK's own client over both transports — streamable HTTP at
``/mcp`` of a real ``memq api`` process, and stdio through a real ``memq mcp`` process — against
the real Elasticsearch, Redis and a real worker. Adds are ``infer=false`` unless the scripted
LLM is told otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from elasticsearch import Elasticsearch
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from pipeline.domain.jobs import JobStatus
from pipeline.store.indices import IndexNames
from tests.fakellm import FakeLLMServer
from tests.integration.test_key_cache import counted
from tests.processes import ApiProcess, WorkerProcess

pytestmark = pytest.mark.integration

TOOLS = {
    "add_memory",
    "search_memories",
    "get_memories",
    "get_memory",
    "update_memory",
    "delete_memory",
    "job_status",
}


@pytest.fixture(scope="module")
def keys(es: Elasticsearch, indices: IndexNames) -> dict[str, str]:
    """Two tenants of their own, a key each."""
    store = counted(es, indices)
    now = datetime.now(UTC)
    return {
        name: store.create(f"mcp-{name}-{uuid.uuid4().hex[:6]}", "mcp tests", now)[1]
        for name in ("a", "b")
    }


@pytest.fixture(scope="module")
def stack(api_process: ApiProcess, worker: WorkerProcess) -> ApiProcess:
    return api_process


@asynccontextmanager
async def keyed_transport(url: str, key: str) -> AsyncIterator[TransportStreams]:
    """Streamable HTTP with the key on every request (the SDK leaves a client it was given
    open, so this one closes its own)."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


def http_session(api: ApiProcess) -> Callable[[str], Any]:
    def connect(key: str) -> Client:
        return Client(keyed_transport(f"{api.url}/mcp", key))

    return connect


def stdio_session(test_env: dict[str, str]) -> Callable[[str], Any]:
    def connect(key: str) -> Client:
        env = {**test_env, "MEMQ_MCP_KEY": key}
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "memq.cli", "mcp"], env=env
        )
        return Client(params, read_timeout_seconds=60)

    return connect


@pytest.fixture
def connect(stack: ApiProcess) -> Callable[[str], Any]:
    """Opens an MCP session over streamable HTTP for a key. The stdio transport runs the same
    tools (``test_stdio_serves_the_same_tools_for_the_keys_tenant``); each stdio session is a
    process start, so it gets one scenario instead of every test."""
    return http_session(stack)


def run(body: Callable[[], Awaitable[None]]) -> None:
    anyio.run(body)


def payload(result: CallToolResult) -> Any:
    assert not result.is_error, text_of(result)
    return json.loads(text_of(result))


def text_of(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


async def remember(client: Client, user: str, text: str, **extra: Any) -> dict[str, Any]:
    args = {"messages": text, "user_id": user, "infer": False, "wait_s": 60, **extra}
    job = payload(await client.call_tool("add_memory", args))
    assert job["status"] == JobStatus.SUCCEEDED, job
    return dict(job["results"][0])


def test_lists_seven_tools_with_schemas_an_agent_can_act_on(
    connect: Callable[[str], Client], keys: dict[str, str]
) -> None:
    async def body() -> None:
        async with connect(keys["a"]) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        for tool in tools.values():
            assert tool.description and len(tool.description) > 20, tool.name
            assert tool.input_schema["type"] == "object"
        add = tools["add_memory"].input_schema
        assert add["required"] == ["messages"]
        assert {"user_id", "agent_id", "run_id", "metadata", "wait_s"} <= set(add["properties"])
        assert tools["search_memories"].input_schema["properties"]["top_k"]["maximum"] == 100
        assert tools["delete_memory"].annotations is not None
        assert tools["delete_memory"].annotations.destructive_hint is True
        assert tools["search_memories"].annotations is not None
        assert tools["search_memories"].annotations.read_only_hint is True

    run(body)


def test_add_search_read_update_delete(
    connect: Callable[[str], Client], keys: dict[str, str]
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        async with connect(keys["a"]) as client:
            stored = await remember(
                client, user, "I am allergic to peanuts", metadata={"topic": "health"}
            )
            await remember(client, user, "My sister lives in Lisbon")
            found = payload(
                await client.call_tool(
                    "search_memories", {"query": "what food allergy?", "user_id": user}
                )
            )
            assert found["partial"] is False and found["shards"]["failed"] == 0
            hits = found["results"]
            assert hits[0]["id"] == stored["id"]
            assert hits[0]["memory"] == "I am allergic to peanuts"
            filtered = payload(
                await client.call_tool(
                    "search_memories",
                    {"query": "family", "user_id": user, "filters": {"topic": "health"}},
                )
            )["results"]
            assert [h["id"] for h in filtered] == [stored["id"]]
            page = payload(
                await client.call_tool("get_memories", {"user_id": user, "page_size": 1})
            )
            assert len(page["results"]) == 1 and page["next_cursor"]
            rest = payload(
                await client.call_tool(
                    "get_memories", {"user_id": user, "cursor": page["next_cursor"]}
                )
            )
            assert len(rest["results"]) == 1 and rest["next_cursor"] is None
            one = payload(await client.call_tool("get_memory", {"memory_id": stored["id"]}))
            assert one["metadata"] == {"topic": "health"} and "provenance" not in one
            sourced = payload(
                await client.call_tool(
                    "get_memory", {"memory_id": stored["id"], "include_sources": True}
                )
            )
            [source] = sourced["provenance"]["sources"]
            assert (source["content"], source["role"]) == ("I am allergic to peanuts", "user")
            assert sourced["provenance"]["job"]["id"] == source["job_id"]
            updated = payload(
                await client.call_tool(
                    "update_memory",
                    {"memory_id": stored["id"], "text": "I am allergic to peanuts and cashews"},
                )
            )
            assert updated["memory"] == "I am allergic to peanuts and cashews"
            assert updated["id"] == stored["id"]
            gone = payload(await client.call_tool("delete_memory", {"memory_id": stored["id"]}))
            assert gone == {"deleted": stored["id"]}
            missing = await client.call_tool("get_memory", {"memory_id": stored["id"]})
            assert missing.is_error and f"no memory {stored['id']}" in text_of(missing)

    run(body)


def test_add_is_fire_and_forget_and_job_status_follows_it(
    connect: Callable[[str], Client], keys: dict[str, str]
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        async with connect(keys["a"]) as client:
            accepted = payload(
                await client.call_tool(
                    "add_memory",
                    {
                        "messages": [{"role": "user", "content": "I run on Sundays"}],
                        "user_id": user,
                        "infer": False,
                    },
                )
            )
            assert accepted["status"] in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.SUCCEEDED)
            assert accepted["created"] is True
            job_id = accepted["job_id"]
            with anyio.fail_after(60):
                while True:
                    job = payload(await client.call_tool("job_status", {"job_id": job_id}))
                    if job["status"] == JobStatus.SUCCEEDED:
                        break
                    assert job["status"] in (JobStatus.QUEUED, JobStatus.RUNNING), job
                    await anyio.sleep(0.2)
            assert [r["memory"] for r in job["results"]] == ["I run on Sundays"]

    run(body)


def test_one_tenant_never_reaches_anothers_memories_or_jobs(
    connect: Callable[[str], Client], keys: dict[str, str]
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"  # the same user id in both tenants

    async def body() -> None:
        async with connect(keys["a"]) as alice:
            job = payload(
                await alice.call_tool(
                    "add_memory",
                    {
                        "messages": "The vault code is 4921",
                        "user_id": user,
                        "infer": False,
                        "wait_s": 60,
                    },
                )
            )
            memory_id = job["results"][0]["id"]
        async with connect(keys["b"]) as bob:
            found = payload(
                await bob.call_tool("search_memories", {"query": "vault code", "user_id": user})
            )
            assert found["results"] == []
            listed = payload(await bob.call_tool("get_memories", {"user_id": user}))
            assert listed["results"] == []
            for tool, args in (
                ("get_memory", {"memory_id": memory_id}),
                ("update_memory", {"memory_id": memory_id, "text": "taken over"}),
                ("delete_memory", {"memory_id": memory_id}),
                ("job_status", {"job_id": job["job_id"]}),
            ):
                result = await bob.call_tool(tool, args)
                assert result.is_error, tool
                assert "no memory" in text_of(result) or "no job" in text_of(result)
        async with connect(keys["a"]) as alice:
            still = payload(await alice.call_tool("get_memory", {"memory_id": memory_id}))
            assert still["memory"] == "The vault code is 4921"

    run(body)


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("add_memory", {"user_id": "u1"}, "messages"),
    ("add_memory", {"messages": "hi"}, "user_id, agent_id, run_id"),
    ("add_memory", {"messages": "hi", "user_id": "has space"}, "user_id"),
    ("add_memory", {"messages": [], "user_id": "u1"}, "messages"),
    ("add_memory", {"messages": [{"role": "robot", "content": "x"}], "user_id": "u1"}, "role"),
    ("add_memory", {"messages": "hi", "user_id": "u1", "wait_s": 9999}, "wait_s"),
    (
        "add_memory",
        {"messages": "hi", "user_id": "u1", "memory_type": "procedural_memory"},
        "needs an agent_id",
    ),
    ("search_memories", {"query": "x", "user_id": "u1", "top_k": "many"}, "top_k"),
    ("search_memories", {"query": "", "user_id": "u1"}, "query"),
    ("search_memories", {"query": "x", "user_id": "u1", "filters": {"a": {"near": 1}}}, "near"),
    ("get_memories", {"user_id": "u1", "cursor": "not-a-cursor"}, "cursor"),
    ("update_memory", {"memory_id": "m1"}, "nothing to update"),
    ("job_status", {"job_id": "no-such-job"}, "no job"),
    ("forget_everything", {}, "Unknown tool"),
]


def test_bad_arguments_are_tool_errors_and_the_session_carries_on(
    connect: Callable[[str], Client], keys: dict[str, str]
) -> None:
    async def body() -> None:
        async with connect(keys["a"]) as client:
            for tool, args, says in BAD_CALLS:
                result = await client.call_tool(tool, args)
                assert result.is_error, (tool, args)
                assert says in text_of(result), (tool, args, text_of(result))
                assert "Traceback" not in text_of(result)
            tools = await client.list_tools()
            assert len(tools.tools) == 7

    run(body)


def test_http_needs_a_valid_key(stack: ApiProcess, keys: dict[str, str]) -> None:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in (None, "Bearer mq_0123456789abcdef_notarealsecretatall", "Basic abc"):
        sent = headers | ({"Authorization": auth} if auth else {})
        response = httpx.post(f"{stack.url}/mcp", json=hello, headers=sent, timeout=30)
        assert response.status_code == 401, response.text
        assert response.headers["www-authenticate"] == "Bearer"
    ok = httpx.post(
        f"{stack.url}/mcp",
        json=hello,
        headers=headers | {"Authorization": f"Bearer {keys['a']}"},
        timeout=30,
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["result"]["serverInfo"]["name"] == "memq"


def test_stdio_refuses_a_missing_or_wrong_key(test_env: dict[str, str]) -> None:
    env = {k: v for k, v in test_env.items() if k != "MEMQ_MCP_KEY"}
    for extra, says in (
        ({}, "set MEMQ_MCP_KEY"),
        ({"MEMQ_MCP_KEY": "mq_0123456789abcdef_notarealsecretatall"}, "not a valid memq key"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "memq.cli", "mcp"],
            env=env | extra,
            input=b"",
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode != 0
        assert says in done.stderr.decode(), done.stderr.decode()
        assert b"Traceback" not in done.stderr


def test_stdio_serves_the_same_tools_for_the_keys_tenant(
    stack: ApiProcess, test_env: dict[str, str], keys: dict[str, str]
) -> None:
    connect = stdio_session(test_env)
    user = f"u-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        async with connect(keys["a"]) as alice:
            assert {t.name for t in (await alice.list_tools()).tools} == TOOLS
            stored = await remember(alice, user, "I keep bees in my garden")
            hits = payload(
                await alice.call_tool("search_memories", {"query": "bees", "user_id": user})
            )["results"]
            assert [h["id"] for h in hits] == [stored["id"]]
            for tool, args, says in BAD_CALLS:
                result = await alice.call_tool(tool, args)
                assert result.is_error and says in text_of(result), (tool, text_of(result))
            updated = payload(
                await alice.call_tool(
                    "update_memory", {"memory_id": stored["id"], "metadata": {"kind": "hobby"}}
                )
            )
            assert updated["metadata"] == {"kind": "hobby"}
        async with connect(keys["b"]) as bob:
            found = payload(
                await bob.call_tool("search_memories", {"query": "bees", "user_id": user})
            )
            assert found["results"] == []
            result = await bob.call_tool("delete_memory", {"memory_id": stored["id"]})
            assert result.is_error and "no memory" in text_of(result)
        async with connect(keys["a"]) as alice:
            gone = payload(await alice.call_tool("delete_memory", {"memory_id": stored["id"]}))
            assert gone == {"deleted": stored["id"]}

    run(body)


def test_an_add_that_waits_for_a_failed_job_is_a_tool_error_with_its_reason(
    connect: Callable[[str], Client], keys: dict[str, str], fake_llm: FakeLLMServer
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    fake_llm.reset()
    fake_llm.responder = lambda _request: "Sorry, I would rather chat about the weather."

    async def body() -> None:
        async with connect(keys["a"]) as client:
            args = {"messages": "I like green tea", "user_id": user, "wait_s": 60}
            result = await client.call_tool("add_memory", args)
            assert result.is_error, text_of(result)
            said = text_of(result)
            assert "not stored" in said and JobStatus.FAILED in said, said
            assert "chat about the weather" in said, "the job's reason, with the model's reply"
            job_id = said.split("job ", 1)[1].split()[0]
            job = payload(await client.call_tool("job_status", {"job_id": job_id}))
            assert job["status"] == JobStatus.FAILED, job

    try:
        run(body)
    finally:
        fake_llm.reset()


def mcp_call(stack: ApiProcess, key: str, tool: str, arguments: dict[str, Any]) -> Any:
    """One ``tools/call`` over stateless streamable HTTP, its body written as ASCII JSON (a
    lone surrogate as its escape, which the MCP client itself would not send)."""
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {key}",
        "MCP-Protocol-Version": "2025-06-18",
    }
    response = httpx.post(f"{stack.url}/mcp", content=json.dumps(call), headers=headers, timeout=60)
    assert response.status_code < 500, response.text
    return response


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("add_memory", {"messages": "caf\ud800", "user_id": "u1", "infer": False}),
        ("add_memory", {"messages": "hi", "user_id": "u1", "metadata": {"k": "\ud800"}}),
        ("search_memories", {"query": "\ud800", "user_id": "u1"}),
        ("search_memories", {"query": "tea", "user_id": "u1", "filters": {"k": "\udfff"}}),
        ("get_memories", {"user_id": "u1", "filters": {"k": "\ud800"}}),
        ("update_memory", {"memory_id": "m1", "text": "\ud800"}),
    ],
)
def test_a_lone_surrogate_is_refused_never_a_server_error(
    stack: ApiProcess, keys: dict[str, str], tool: str, arguments: dict[str, Any]
) -> None:
    """The MCP layer's JSON parser refuses the escape itself: a JSON-RPC parse error, before
    any tool runs."""
    answer = mcp_call(stack, keys["a"], tool, arguments).json()
    assert answer["error"]["code"] == -32700, answer
    assert "hex escape" in answer["error"]["message"], answer


def test_tools_count_against_the_tenants_limits(
    test_env: dict[str, str], es: Elasticsearch, indices: IndexNames
) -> None:
    """The same per-tenant limiter as the routes: 5 searches per 5 s, then a tool error that
    says when to come back (stdio: the process's settings set the limits)."""
    store = counted(es, indices)
    key = store.create(f"mcp-limits-{uuid.uuid4().hex[:6]}", "limits", datetime.now(UTC))[1]
    limited = {**test_env, "MEMQ_API_RATE_SEARCH_PER_S": "1", "MEMQ_API_RATE_WINDOW_S": "5"}

    async def body() -> None:
        async with stdio_session(limited)(key) as client:
            args = {"query": "bees", "user_id": "u1"}
            results = [await client.call_tool("search_memories", args) for _ in range(6)]
            assert [r.is_error for r in results] == [False] * 5 + [True]
            assert "over 5 search requests" in text_of(results[5])
            assert "try again in" in text_of(results[5])

    run(body)


def test_the_search_tool_is_charged_its_costly_search_work(
    test_env: dict[str, str], es: Elasticsearch, indices: IndexNames
) -> None:
    """The same budget of costly search work as the routes: 10 units per 5 s, so the third
    search with four substring conditions (4 units each) is a tool error that says why, and
    a plain search still runs."""
    store = counted(es, indices)
    key = store.create(f"mcp-cost-{uuid.uuid4().hex[:6]}", "cost", datetime.now(UTC))[1]
    limited = {**test_env, "MEMQ_API_SEARCH_COST_PER_S": "2", "MEMQ_API_RATE_WINDOW_S": "5"}
    scans = {
        "OR": [{f: {"icontains": "abc"}} for f in ("agent_id", "run_id", "actor_id", "job_id")]
    }

    async def body() -> None:
        async with stdio_session(limited)(key) as client:
            costly = {"query": "bees", "user_id": "u1", "filters": scans}
            results = [await client.call_tool("search_memories", costly) for _ in range(3)]
            assert [r.is_error for r in results] == [False, False, True]
            assert "over 10 units of costly search work" in text_of(results[2])
            assert "try again in" in text_of(results[2])
            plain = await client.call_tool("search_memories", {"query": "bees", "user_id": "u1"})
            assert not plain.is_error, text_of(plain)

    run(body)


def test_search_and_listing_answer_the_present_and_ask_for_the_past(
    connect: Callable[[str], Client], keys: dict[str, str], fake_llm: FakeLLMServer
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    lisbon, berlin = "Maria lives in Lisbon", "Maria lives in Berlin"
    facts = [{"text": lisbon}, {"text": berlin, "replaces_text": [lisbon]}]
    fake_llm.script_chat(*(json.dumps({"memory": [fact]}) for fact in facts))

    async def body() -> None:
        async with connect(keys["a"]) as client:
            for text, when in (("I live in Lisbon", "2023-03-01"), ("I moved", "2024-03-01")):
                await remember(client, user, text, infer=True, timestamp=f"{when}T10:00:00Z")
            now = payload(
                await client.call_tool("search_memories", {"query": "where", "user_id": user})
            )["results"]
            assert [h["memory"] for h in now] == [berlin]
            asked = {"query": "where", "user_id": user, "as_of": "2023-06-01T00:00:00Z"}
            then = payload(await client.call_tool("search_memories", asked))["results"]
            assert [h["memory"] for h in then] == [lisbon]
            listed = {"user_id": user, "include_replaced": True}
            both = payload(await client.call_tool("get_memories", listed))["results"]
            replaced = {m["memory"]: m.get("valid_until") for m in both}
            assert replaced[lisbon].startswith("2024-03-01") and replaced[berlin] is None

    run(body)
