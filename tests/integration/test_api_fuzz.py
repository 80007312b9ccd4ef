"""Property-based fuzzing of the live API from its own OpenAPI document (schemathesis): whatever
a generated request holds, the answer is never a 5xx.

Runs with a tenant key of its own against the API process of the ``api_url`` fixture.
``/v1/reset``, ``/v1/admin/*`` and ``/metrics`` are left out (they act on, or show, every
tenant: a tenant key is refused there, which this test counts as a key that never reached the
server); the mem0 wire routes
are fuzzed in a test of their own, and their query ``filters`` (JSON, or the Python repr the
mem0 client sends) and their JSON bodies (text with lone surrogates) by hypothesis strategies.
A bounded number of examples per operation keeps the run within a few minutes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from api.app import create_app
from pipeline.config import Settings
from tests.integration.test_api import Tenant, admin_key, create_tenant

pytestmark = pytest.mark.integration

EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
MEMQ_ROUTES = r"^/(healthz|readyz|v1/(memories|jobs|batches)(/.*)?)$"  # /metrics: the admin's
MEM0_ROUTES = r"^/(v3/.*|v1/.*/)$"
TRAILING_SLASH = r"/$"


@pytest.fixture(scope="module")
def base_url(api_url: str) -> str:
    return api_url


@pytest.fixture(scope="module")
def fuzz_tenant(base_url: str) -> Iterator[Tenant]:
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {admin_key()}"}, timeout=30
    ) as admin:
        tenant = create_tenant(admin, base_url, "fuzz")
        tenant.http.close()
        yield tenant
        admin.delete(f"/v1/admin/keys/{tenant.key_id}")


@pytest.fixture(scope="module")
def session(fuzz_tenant: Tenant) -> Iterator[requests.Session]:
    with requests.Session() as http:
        http.headers["Authorization"] = f"Bearer {fuzz_tenant.key}"
        yield http


def code_schema() -> Any:
    """The OpenAPI document of this checkout's API, built at collection without any service
    (schemathesis builds one test per operation from it; the lazy
    ``schemathesis.pytest.from_fixture`` loader does not run on pytest 9). The examples are
    sent to the API process of the ``api_url`` fixture, which runs the same code."""
    return schemathesis.openapi.from_dict(create_app(Settings()).openapi())


schema = code_schema()


def call(case: Any, session: requests.Session, base_url: str) -> None:
    """Send the case; a 5xx fails. ``wait`` is dropped so no example blocks for up to
    ``wait_s`` (waiting is covered in test_api.py). A 401 or 403 would mean the key never
    reached the server, and every example would test the auth check only."""
    if isinstance(case.query, dict):
        case.query.pop("wait", None)
    response = case.call_and_validate(
        base_url=base_url, session=session, checks=[not_a_server_error], timeout=60
    )
    assert response.status_code not in (401, 403), response.text


@schema.include(path_regex=MEMQ_ROUTES).exclude(path_regex=TRAILING_SLASH).parametrize()
@EXAMPLES
def test_memq_routes_never_answer_5xx(case: Any, session: requests.Session, base_url: str) -> None:
    call(case, session, base_url)


@schema.include(path_regex=MEM0_ROUTES).parametrize()
@EXAMPLES
def test_mem0_routes_never_answer_5xx(case: Any, session: requests.Session, base_url: str) -> None:
    call(case, session, base_url)


# --- the mem0 routes' query parameters and bodies, beyond what the OpenAPI document says ------

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=40,
)
FILTER_CHARS = "{}[]()'\",:+-.0123456789 eEjTrueFalsNn_id\\"
# sizes about the parsers' and memq's limits (nesting 32, literal 2000, text 10000 characters)
SIZES = st.sampled_from([1, 2, 31, 33, 999, 1_001, 1_999, 2_001, 4_000, 9_999, 10_001])
FILTERS = st.one_of(
    st.builds(lambda v, python: repr(v) if python else json.dumps(v), VALUES, st.booleans()),
    st.text(alphabet=FILTER_CHARS, max_size=4000),
    st.builds(
        lambda c, n: c * n, st.sampled_from(["[", "{", "(", "-", "+1", "{{", "{'a':"]), SIZES
    ),
    st.builds(lambda v: "{" + repr(v) + "}", VALUES),  # a set of whatever: unhashable items
)
# any text, lone surrogates often (sent as their JSON escapes)
TEXT = st.lists(
    st.sampled_from(["\ud800", "\udfff", "\U0001f600", "a", "\u00e9", "\x00", " "])
    | st.characters(categories=["Cs", "L", "N", "P", "S", "Zs", "Cc"]),
    max_size=20,
).map("".join)


def mem0_bodies(text: str, key: str) -> list[tuple[str, str, dict[str, Any]]]:
    said = [{"role": "user", "content": text or "x"}]
    scope = {"user_id": "fuzz-user"}
    return [
        (
            "POST",
            "/v3/memories/add/",
            {
                "messages": said,
                **scope,
                "infer": False,
                "async_mode": True,
                "metadata": {key: text},
            },
        ),
        ("POST", "/v3/memories/search/", {"query": text or "x", "filters": {**scope, key: text}}),
        ("POST", "/v3/memories/", {"filters": {**scope, key: text}}),
        ("PUT", "/v1/memories/no-such-memory/", {"text": text, "metadata": {key: text}}),
        ("PUT", "/v1/batch/", {"memories": [{"memory_id": "no-such-memory", "text": text}]}),
    ]


@given(filters=FILTERS, user_id=st.sampled_from([None, "fuzz-user"]))
@EXAMPLES
def test_mem0_delete_all_filters_never_answer_5xx(
    session: requests.Session, base_url: str, filters: str, user_id: str | None
) -> None:
    params = {"filters": filters, **({"user_id": user_id} if user_id else {})}
    response = session.delete(f"{base_url}/v1/memories/", params=params, timeout=60)
    assert response.status_code < 500, (filters[:200], response.text[:500])
    listing = session.get(f"{base_url}/v1/memories", params={**params, "user_id": "u"}, timeout=60)
    assert listing.status_code < 500, (filters[:200], listing.text[:500])


@given(
    text=TEXT, key=st.sampled_from(["k", "\udc00", "a\ud800b"]) | st.text(min_size=1, max_size=8)
)
@EXAMPLES
def test_mem0_bodies_with_any_text_never_answer_5xx(
    session: requests.Session, base_url: str, text: str, key: str
) -> None:
    for method, path, body in mem0_bodies(text, key):
        response = session.request(
            method,
            f"{base_url}{path}",
            data=json.dumps(body),
            headers={"Content-Type": "application/json"},
            timeout=60,
        )
        assert response.status_code < 500, (method, path, body, response.text[:500])
