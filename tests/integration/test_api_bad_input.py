"""Bad input over real HTTP: every case is a 4xx whose JSON body is
``{"error": {"type", "message", "field"}, "detail"}`` naming the problem — never a 500 — and
leaves nothing half-written.

"Nothing written" is checked with a sentinel: jobs of one scope run one at a time in acceptance
order, so once a valid job posted *after* the bad request has finished for the same user, any job
the bad request had queued has finished too; the listing must then show the sentinel alone.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.test_api import (
    Tenant,
    admin_key,
    create_tenant,
    http_client,
    remember,
    wait_listed,
)

pytestmark = pytest.mark.integration

MB = 1_000_000


def assert_error(
    response: httpx.Response,
    statuses: tuple[int, ...] = (422,),
    field: str | None = None,
    mentions: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A JSON error answer with one of ``statuses``, naming ``field`` (when given) and
    mentioning one of ``mentions`` (case-insensitive, when given)."""
    assert response.status_code in statuses, (response.status_code, response.text[:500])
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "detail"}, body
    assert set(body["error"]) == {"type", "message", "field"}, body
    assert body["error"]["type"] and body["error"]["message"], body
    assert body["detail"] == body["error"]["message"], body
    if field is not None:
        assert body["error"]["field"] == field, body
    if mentions:
        message = body["error"]["message"].lower()
        assert any(word.lower() in message for word in mentions), body
    return body


def assert_only_sentinel(tenant: Tenant, user_id: str) -> None:
    """Nothing but a valid job posted after the bad request exists in the user's scope."""
    sentinel = remember(tenant, user_id, f"sentinel {uuid.uuid4().hex}")
    items = wait_listed(tenant, user_id, 1)
    assert [item["id"] for item in items] == [sentinel["id"]], items


@pytest.fixture(scope="module")
def base_url(api_url: str) -> str:
    return api_url


@pytest.fixture(scope="module")
def admin(base_url: str) -> Iterator[httpx.Client]:
    with http_client(base_url, admin_key()) as client:
        yield client


@pytest.fixture(scope="module")
def keys(admin: httpx.Client, base_url: str) -> Iterator[tuple[Tenant, Tenant]]:
    first = create_tenant(admin, base_url, "bad-a")
    second = create_tenant(admin, base_url, "bad-b")
    first.http.close()
    second.http.close()
    yield first, second
    for tenant in (first, second):
        admin.delete(f"/v1/admin/keys/{tenant.key_id}")


def fresh(base_url: str, tenant: Tenant) -> Tenant:
    """The tenant with a connection of its own (a server error must not break the next test)."""
    return Tenant(tenant.name, tenant.key_id, tenant.key, http_client(base_url, tenant.key))


@pytest.fixture
def a(keys: tuple[Tenant, Tenant], base_url: str) -> Iterator[Tenant]:
    tenant = fresh(base_url, keys[0])
    with tenant.http:
        yield tenant


@pytest.fixture
def b(keys: tuple[Tenant, Tenant], base_url: str) -> Iterator[Tenant]:
    tenant = fresh(base_url, keys[1])
    with tenant.http:
        yield tenant


@pytest.fixture
def uid(a: Tenant) -> Iterator[str]:
    user_id = f"bad-{uuid.uuid4().hex[:12]}"
    yield user_id
    a.http.delete("/v1/memories", params={"user_id": user_id})


def nested(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        node = {"k": node}
    return node


def deep_filter(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"role": "user"}
    for _ in range(depth - 1):
        node = {"AND": [node]}
    return node


# --- adding ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "field", "mentions"),
    [
        pytest.param({"messages": []}, "messages", ("empty",), id="empty-list"),
        pytest.param({"messages": ""}, "messages", ("empty",), id="empty-string"),
        pytest.param(
            {"messages": [{"role": "user", "content": "  "}]},
            "messages",
            ("empty",),
            id="blank-content",
        ),
        pytest.param(
            {"memory_type": "dream_memory"}, "memory_type", ("semantic",), id="memory-type"
        ),
        pytest.param({"colour": "red"}, "colour", ("extra", "unknown"), id="unknown-key"),
        pytest.param(
            {"metadata": {f"k{i}": i for i in range(10_000)}},
            "metadata",
            ("keys",),
            id="metadata-10000-keys",
        ),
        pytest.param({"metadata": nested(100)}, "metadata", ("nested",), id="metadata-deep"),
        pytest.param({"timestamp": "yesterday"}, "timestamp", ("date",), id="timestamp"),
        pytest.param({"infer": "perhaps"}, "infer", ("bool",), id="infer"),
    ],
)
def test_bad_add_is_refused(
    a: Tenant, uid: str, extra: dict[str, Any], field: str, mentions: tuple[str, ...]
) -> None:
    body = {"messages": "a valid message", "user_id": uid, "infer": False, **extra}
    assert_error(a.http.post("/v1/memories", json=body), field=field, mentions=mentions)
    assert_only_sentinel(a, uid)


def test_add_needs_a_scope_id(a: Tenant, uid: str) -> None:
    body = {"messages": "whose is this?", "infer": False}
    assert_error(a.http.post("/v1/memories", json=body), field="user_id", mentions=("user_id",))
    body = {"messages": "whose is this?", "infer": False, "user_id": None, "run_id": None}
    assert_error(a.http.post("/v1/memories", json=body), field="user_id")


def test_a_malformed_image_url_is_refused(a: Tenant, uid: str) -> None:
    part = {"type": "image_url", "image_url": {"url": "not a url at all"}}
    text = {"type": "text", "text": "look at this"}
    body = {
        "messages": [{"role": "user", "content": [text, part]}],
        "user_id": uid,
        "infer": False,
    }
    error = assert_error(a.http.post("/v1/memories", json=body))["error"]
    assert "image_url" in (error["field"] or "") or "url" in error["message"].lower(), error
    assert_only_sentinel(a, uid)


def test_a_10_mb_message_is_refused(a: Tenant, uid: str) -> None:
    body = {"messages": "x" * (10 * MB), "user_id": uid, "infer": False}
    assert_error(a.http.post("/v1/memories", json=body), (413, 422), mentions=("bytes", "large"))
    assert_only_sentinel(a, uid)


def test_a_message_over_the_length_limit_is_refused(a: Tenant, uid: str) -> None:
    body = {"messages": "x" * 200_000, "user_id": uid, "infer": False}
    assert_error(a.http.post("/v1/memories", json=body), mentions=("100000", "at most"))
    assert_only_sentinel(a, uid)


def test_invalid_utf8_is_refused(a: Tenant, uid: str) -> None:
    raw = b'{"messages": "caf\xe9 \xff\xfe", "user_id": "' + uid.encode() + b'", "infer": false}'
    response = a.http.post(
        "/v1/memories", content=raw, headers={"Content-Type": "application/json"}
    )
    assert_error(response, (400, 422), mentions=("utf", "decode", "pars", "json"))
    assert_only_sentinel(a, uid)


@pytest.mark.parametrize(
    "raw", [b'{"messages": "hi", "user_id": ', b"not json", b"", b"{'single': 'quotes'}"]
)
def test_invalid_json_is_refused(a: Tenant, uid: str, raw: bytes) -> None:
    response = a.http.post(
        "/v1/memories", content=raw, headers={"Content-Type": "application/json"}
    )
    body = assert_error(response, (400, 422), mentions=("json", "body"))
    assert body["error"]["field"] in (None, "body"), "a JSON error names no field of the body"
    assert_only_sentinel(a, uid)


def test_a_body_that_is_not_an_object_is_refused(a: Tenant) -> None:
    for body in ([1, 2], "text", 3, None):
        assert_error(a.http.post("/v1/memories", json=body))


def test_a_batch_with_one_bad_item_queues_nothing(a: Tenant, uid: str) -> None:
    good = {"messages": "a good item of a bad batch", "user_id": uid, "infer": False}
    response = a.http.post("/v1/batches", json={"items": [good, {**good, "messages": []}]})
    assert_error(response, field="messages", mentions=("empty",))
    response = a.http.post(
        "/v1/batches", json={"items": [good, {**good, "memory_type": "dream_memory"}]}
    )
    assert_error(response, field="items.1.memory_type")
    assert_error(a.http.post("/v1/batches", json={"items": []}), field="items")
    assert_only_sentinel(a, uid)


def test_wait_s_out_of_range_is_refused(a: Tenant, uid: str) -> None:
    body = {"messages": "waiting", "user_id": uid, "infer": False}
    for wait_s in ("0", "301", "soon"):
        response = a.http.post("/v1/memories", params={"wait": "true", "wait_s": wait_s}, json=body)
        assert_error(response, field="wait_s")
    assert_only_sentinel(a, uid)


# --- keys -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="missing"),
        pytest.param({"Authorization": "Bearer"}, id="empty"),
        pytest.param({"Authorization": "Basic dXNlcjpwYXNz"}, id="basic"),
        pytest.param({"Authorization": "Bearer mq_0000000000000000_" + "x" * 40}, id="unknown"),
    ],
)
def test_no_valid_key_is_401(base_url: str, headers: dict[str, str]) -> None:
    calls = [
        ("GET", "/v1/memories?user_id=u", None),
        ("POST", "/v1/memories", {"messages": "hi", "user_id": "u", "infer": False}),
        ("POST", "/v1/memories/search", {"query": "hi", "user_id": "u"}),
        ("GET", f"/v1/jobs/{uuid.uuid4()}", None),
        ("GET", f"/v1/memories/{uuid.uuid4()}", None),
        ("POST", "/v1/reset", None),
        ("GET", "/v1/admin/keys", None),
        ("GET", "/v1/ping/", None),
    ]
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
        for method, path, body in calls:
            response = client.request(method, path, json=body)
            assert_error(response, (401,), mentions=("key",))


# --- ids ------------------------------------------------------------------------------------


def test_another_tenants_memory_is_404(a: Tenant, b: Tenant, uid: str) -> None:
    memory_id = remember(a, uid, "a memory of tenant A")["id"]
    assert_error(b.http.get(f"/v1/memories/{memory_id}"), (404,))
    assert_error(b.http.put(f"/v1/memories/{memory_id}", json={"text": "B was here"}), (404,))
    assert_error(b.http.delete(f"/v1/memories/{memory_id}"), (404,))
    assert_error(b.http.get(f"/v1/memories/{memory_id}/history"), (404,))
    assert a.http.get(f"/v1/memories/{memory_id}").json()["memory"] == "a memory of tenant A"


@pytest.mark.parametrize(
    "bad_id", [pytest.param("has space", id="whitespace"), pytest.param("x" * 129, id="129-chars")]
)
def test_malformed_scope_ids_are_422(a: Tenant, bad_id: str) -> None:
    add = {"messages": "hi", "user_id": bad_id, "infer": False}
    assert_error(a.http.post("/v1/memories", json=add), field="user_id")
    assert_error(a.http.post("/v1/memories", json={**add, "user_id": "u", "agent_id": bad_id}))
    assert_error(a.http.get("/v1/memories", params={"user_id": bad_id}), field="user_id")
    search = {"query": "hi", "user_id": bad_id}
    assert_error(a.http.post("/v1/memories/search", json=search), field="user_id")
    assert_error(a.http.delete("/v1/memories", params={"run_id": bad_id}), field="run_id")


@pytest.mark.parametrize(
    "bad_id", [pytest.param("has space", id="whitespace"), pytest.param("x" * 129, id="129-chars")]
)
def test_malformed_memory_ids_are_422(a: Tenant, bad_id: str) -> None:
    answers = {
        "GET": a.http.get(f"/v1/memories/{bad_id}"),
        "PUT": a.http.put(f"/v1/memories/{bad_id}", json={"text": "x"}),
        "DELETE": a.http.delete(f"/v1/memories/{bad_id}"),
        "history": a.http.get(f"/v1/memories/{bad_id}/history"),
    }
    codes = {name: response.status_code for name, response in answers.items()}
    assert codes == dict.fromkeys(answers, 422), codes
    for response in answers.values():
        assert_error(response, field="memory_id")


# --- search and filters ---------------------------------------------------------------------


@pytest.mark.parametrize("top_k", [0, -1, 1001, 10**12, "many", 2.5])
def test_top_k_out_of_range_is_422(a: Tenant, top_k: Any) -> None:
    body = {"query": "tea", "user_id": "u", "top_k": top_k}
    assert_error(a.http.post("/v1/memories/search", json=body), field="top_k")
    batch = {"queries": [{"query": "tea", "user_id": "u"}, body]}
    assert_error(a.http.post("/v1/memories/search/batch", json=batch), field="queries.1.top_k")


def test_search_names_a_missing_or_empty_query(a: Tenant) -> None:
    response = a.http.post("/v1/memories/search", json={"user_id": "u"})
    assert_error(response, field="query")
    response = a.http.post("/v1/memories/search", json={"query": "", "user_id": "u"})
    assert_error(response, field="query")


@pytest.mark.parametrize(
    ("filters", "field", "mentions"),
    [
        pytest.param({"role": {"regex": "u.*"}}, "role.regex", ("operator",), id="operator"),
        pytest.param(
            {"AND": [{"role": "user"}, {"metadata.x": {"between": [1, 2]}}]},
            "AND.1.metadata.x.between",
            ("operator",),
            id="nested-operator",
        ),
        pytest.param(
            {"text": {"contains": ".*tea.*"}},
            "text.contains",
            ("regular expression",),
            id="regex-text",
        ),
        pytest.param(
            {"role": {"contains": "^(us|er)+$"}},
            "role.contains",
            ("regular expression",),
            id="regex-keyword",
        ),
        pytest.param(
            {"metadata.topic": {"icontains": "[a-z]+"}},
            "metadata.topic.icontains",
            ("regular expression",),
            id="regex-metadata",
        ),
        pytest.param({"OR": []}, "OR", ("OR",), id="empty-or"),
        pytest.param({"created_at": {"gt": "last week"}}, "created_at.gt", ("date",), id="date"),
        pytest.param({"tenant": "other"}, "tenant", ("tenant",), id="tenant"),
        pytest.param(deep_filter(20), None, ("nested deeper",), id="deep"),
    ],
)
def test_bad_filters_are_422(
    a: Tenant, filters: dict[str, Any], field: str | None, mentions: tuple[str, ...]
) -> None:
    body = {"query": "tea", "user_id": "u", "filters": filters}
    assert_error(a.http.post("/v1/memories/search", json=body), field=field, mentions=mentions)
    params = {"user_id": "u", "filters": json.dumps(filters)}
    assert_error(a.http.get("/v1/memories", params=params), field=field, mentions=mentions)


def test_a_cursor_memq_never_gave_is_422(a: Tenant) -> None:
    for cursor in ("garbage", "x" * 5000, "eyJ0IjogMX0="):
        response = a.http.get("/v1/memories", params={"user_id": "u", "cursor": cursor})
        assert_error(response, field="cursor")


# --- updates --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"text": ""}, id="empty-text"),
        pytest.param({"text": "x" * 20_001}, id="long-text"),
        pytest.param({"metadata": nested(100)}, id="deep-metadata"),
        pytest.param({"metadata": {f"k{i}": i for i in range(10_000)}}, id="many-keys"),
        pytest.param({"metadata": {"_private": 1}}, id="underscore-key"),
        pytest.param({"text": 5}, id="text-not-a-string"),
        pytest.param({"metadata": "not an object"}, id="metadata-not-an-object"),
        pytest.param({"colour": "red"}, id="unknown-key"),
    ],
)
def test_bad_updates_change_nothing(a: Tenant, uid: str, body: dict[str, Any]) -> None:
    memory = remember(a, uid, "unchanged text", metadata={"kept": True})
    for path in (f"/v1/memories/{memory['id']}", f"/v1/memories/{memory['id']}/"):
        assert_error(a.http.put(path, json=body))
    got = a.http.get(f"/v1/memories/{memory['id']}").json()
    assert (got["memory"], got["metadata"]) == ("unchanged text", {"kept": True})
    history = a.http.get(f"/v1/memories/{memory['id']}/history").json()
    assert [row["event"] for row in history] == ["ADD"]


@pytest.mark.parametrize(
    "bad_item",
    [
        pytest.param({"text": 5}, id="text-not-a-string"),
        pytest.param({"text": ""}, id="empty-text"),
        pytest.param({"metadata": nested(100)}, id="deep-metadata"),
    ],
)
def test_a_mem0_batch_update_with_one_bad_item_changes_nothing(
    a: Tenant, uid: str, bad_item: dict[str, Any]
) -> None:
    first = remember(a, uid, "first unchanged")
    second = remember(a, uid, "second unchanged")
    memories = [
        {"memory_id": first["id"], "text": "first changed"},
        {"memory_id": second["id"], **bad_item},
    ]
    assert_error(a.http.put("/v1/batch/", json={"memories": memories}))
    texts = [a.http.get(f"/v1/memories/{m['id']}").json()["memory"] for m in (first, second)]
    assert texts == ["first unchanged", "second unchanged"]


# --- the mem0 wire routes -------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({"top_k": "abc"}, id="top_k-text"),
        pytest.param({"top_k": [1]}, id="top_k-list"),
        pytest.param({"top_k": -5}, id="top_k-negative"),
        pytest.param({"top_k": 5000}, id="top_k-large"),
        pytest.param({"threshold": "high"}, id="threshold"),
        pytest.param({"query": ""}, id="empty-query"),
        pytest.param({"query": "x" * 5000}, id="long-query"),
    ],
)
def test_bad_mem0_search_is_4xx(a: Tenant, extra: dict[str, Any]) -> None:
    body = {"query": "tea", "filters": {"user_id": "u"}, **extra}
    assert_error(a.http.post("/v3/memories/search/", json=body))


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"filters": {"user_id": 5}}, id="user_id-number"),
        pytest.param({"filters": "user_id=u"}, id="filters-string"),
        pytest.param({}, id="no-filters"),
    ],
)
def test_bad_mem0_listing_is_4xx(a: Tenant, body: dict[str, Any]) -> None:
    assert_error(a.http.post("/v3/memories/", json=body), field="user_id")


def test_bad_mem0_add_is_4xx(a: Tenant, uid: str) -> None:
    base = {"messages": "hi", "user_id": uid, "infer": False}
    assert_error(a.http.post("/v3/memories/add/", json={**base, "messages": []}))
    assert_error(a.http.post("/v3/memories/add/", json={**base, "user_id": None}))
    assert_error(a.http.post("/v3/memories/add/", json={**base, "metadata": nested(100)}))
    assert_error(a.http.post("/v3/memories/add/", json={**base, "colour": "red"}))
    assert_only_sentinel(a, uid)


# --- text that is not Unicode, filters that would blow up a parser -----------------------------

LONE = "\ud800"  # a UTF-16 surrogate alone: JSON can spell it, no UTF-8 encoder takes it


def post_raw(tenant: Tenant, method: str, path: str, body: Any) -> httpx.Response:
    """``body`` sent as ASCII JSON (a lone surrogate as its ``\\ud800`` escape)."""
    return tenant.http.request(
        method, path, content=json.dumps(body), headers={"Content-Type": "application/json"}
    )


def surrogate_cases(uid: str, memory_id: str) -> list[tuple[str, str, Any, str]]:
    """(method, path, body, field named) for every route that takes text."""
    add = {"messages": "hi", "user_id": uid, "infer": False}
    said = [{"role": "user", "content": f"caf{LONE}"}]
    return [
        ("POST", "/v1/memories", {**add, "messages": f"hi {LONE}"}, "messages"),
        ("POST", "/v1/memories", {**add, "messages": said}, "messages.0.content"),
        ("POST", "/v1/memories", {**add, "metadata": {"topic": LONE}}, "metadata.topic"),
        ("POST", "/v1/memories", {**add, "metadata": {LONE: 1}}, "metadata"),
        ("POST", "/v1/batches", {"items": [{**add, "messages": LONE}]}, "items.0.messages"),
        ("PUT", f"/v1/memories/{memory_id}", {"text": f"new {LONE}"}, "text"),
        ("POST", "/v1/memories/search", {"query": LONE, "user_id": uid}, "query"),
        (
            "POST",
            "/v1/memories/search",
            {"query": "tea", "user_id": uid, "filters": {"topic": LONE}},
            "filters.topic",
        ),
        ("POST", "/v3/memories/add/", {**add, "messages": said}, "messages.0.content"),
        ("POST", "/v3/memories/search/", {"query": LONE, "user_id": uid}, "query"),
        ("POST", "/v3/memories/", {"filters": {"user_id": uid, "topic": LONE}}, "filters.topic"),
        ("PUT", f"/v1/memories/{memory_id}/", {"text": LONE}, "text"),
        (
            "PUT",
            "/v1/batch/",
            {"memories": [{"memory_id": memory_id, "text": LONE}]},
            "memories.0.text",
        ),
    ]


def test_a_lone_surrogate_is_refused_on_every_route_that_takes_text(a: Tenant, uid: str) -> None:
    stored = remember(a, uid, "the original text")
    for method, path, body, field in surrogate_cases(uid, stored["id"]):
        response = post_raw(a, method, path, body)
        assert_error(response, field=field, mentions=("surrogate",))
    assert [m["memory"] for m in wait_listed(a, uid, 1)] == ["the original text"]
    assert_only_memories(a, uid, [stored["id"]])


def assert_only_memories(tenant: Tenant, user_id: str, ids: list[str]) -> None:
    """Nothing the refused requests could have queued is stored (the sentinel's job ran after
    any they queued)."""
    sentinel = remember(tenant, user_id, f"sentinel {uuid.uuid4().hex}")
    items = wait_listed(tenant, user_id, len(ids) + 1)
    assert sorted(item["id"] for item in items) == sorted([*ids, sentinel["id"]]), items


def test_a_surrogate_pair_is_a_character_and_is_kept(a: Tenant, uid: str) -> None:
    text = "a smile \U0001f600"  # json.dumps writes it as the pair \ud83d\ude00
    response = post_raw(
        a, "POST", "/v1/memories?wait=true", {"messages": text, "user_id": uid, "infer": False}
    )
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["memory"] == text


@pytest.mark.parametrize(
    ("filters", "mentions"),
    [
        pytest.param("{{}}", ("neither JSON nor",), id="set-of-dict"),
        pytest.param("{[]}", ("neither JSON nor",), id="set-of-list"),
        pytest.param("[" * 20_000, ("longer than",), id="long-brackets"),
        pytest.param("[" * 5_000 + "]" * 5_000, ("nested deeper",), id="deep-list"),
        pytest.param("{'a': " * 40 + "1" + "}" * 40, ("nested deeper",), id="deep-literal"),
        pytest.param("-" * 1_999 + "1", ("neither JSON nor",), id="unary-chain"),
        pytest.param("1" + "+1" * 4_000, ("python literal is read up to",), id="long-literal"),
        pytest.param("__import__('os')", ("neither JSON nor",), id="a-call"),
    ],
)
def test_mem0_delete_all_bounds_its_filters(
    a: Tenant, uid: str, filters: str, mentions: tuple[str, ...]
) -> None:
    stored = remember(a, uid, "still here")
    response = a.http.delete("/v1/memories/", params={"filters": filters})
    assert_error(response, field="filters", mentions=mentions)
    assert [m["id"] for m in wait_listed(a, uid, 1)] == [stored["id"]]


@pytest.mark.parametrize("style", [json.dumps, repr])
def test_mem0_delete_all_reads_its_clients_filters(a: Tenant, uid: str, style: Any) -> None:
    """The mem0 client writes a dict parameter as its repr; JSON is read as well."""
    remember(a, uid, "to be deleted")
    response = a.http.delete("/v1/memories/", params={"filters": style({"user_id": uid})})
    assert response.status_code == 200, response.text
    assert response.json()["deleted"] == 1


def test_mem0_delete_all_with_an_empty_filter_needs_an_id(a: Tenant) -> None:
    assert_error(a.http.delete("/v1/memories/", params={"filters": "{}"}), field="user_id")


@pytest.mark.parametrize(
    "filters", ["[" * 5_000 + "]" * 5_000, "x" * 20_000, "{'user_id': 'u'}"], ids=str.__len__
)
def test_listing_filters_are_bounded_json(a: Tenant, uid: str, filters: str) -> None:
    response = a.http.get("/v1/memories", params={"user_id": uid, "filters": filters})
    assert_error(response, field="filters")
