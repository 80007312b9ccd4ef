"""Property-based fuzzing of the live API from its own OpenAPI document (schemathesis): whatever
a generated request holds, the answer is never a 5xx.

Runs with a tenant key of its own against the API process of the ``api_url`` fixture.
``/v1/reset`` and ``/v1/admin/*`` are left out (they act on every tenant); the mem0 wire routes
are fuzzed in a test of their own.
A bounded number of examples per operation keeps the run within a few minutes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
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
MEMQ_ROUTES = r"^/(healthz|readyz|metrics|v1/(memories|jobs|batches)(/.*)?)$"
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
