"""The API's OpenAPI document and its documentation pages, built without any service running:
``memq openapi`` works offline, the document validates, every operation is typed and documents
memq's error body, and /docs and /redoc load nothing from another host."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest
from fastapi.testclient import TestClient
from openapi_spec_validator import validate

from api.app import create_app
from pipeline.config import Settings
from tests.processes import free_port

NOWHERE = f"http://127.0.0.1:{free_port()}"  # nothing listens there: no Elasticsearch, no Redis


OFFLINE = {"MEMQ_ES_URL": NOWHERE, "MEMQ_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "memq.cli", "openapi"],
        env={**os.environ, **OFFLINE},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    ]


def test_memq_openapi_is_valid_without_any_service(document: dict[str, Any]) -> None:
    validate(document)
    assert document["info"]["title"] == "memq"
    assert len(operations(document)) >= 30


def test_every_json_operation_has_a_typed_answer(document: dict[str, Any]) -> None:
    untyped = []
    for method, path, operation in operations(document):
        success = next(v for k, v in operation["responses"].items() if k.startswith("2"))
        content = success.get("content", {})
        if "application/json" in content and not content["application/json"].get("schema"):
            untyped.append(f"{method.upper()} {path}")
    assert untyped == []


def test_errors_are_documented_as_memqs_own_body(document: dict[str, Any]) -> None:
    error_ref = "#/components/schemas/ErrorResponse"
    for method, path, operation in operations(document):
        responses = operation["responses"]
        assert "422" not in responses, f"{method} {path} documents FastAPI's default 422"
        schema = responses["4XX"]["content"]["application/json"]["schema"]
        assert schema == {"$ref": error_ref}, (method, path)
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_bearer_and_token_schemes_are_declared(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["bearer"]["description"],
    }
    assert (schemes["token"]["type"], schemes["token"]["name"]) == ("apiKey", "Authorization")
    search = document["paths"]["/v1/memories/search"]["post"]
    assert {"bearer": []} in search["security"] and {"token": []} in search["security"]
    assert "security" not in document["paths"]["/healthz"]["get"]


def test_docs_pages_load_nothing_from_another_host(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    with TestClient(create_app(Settings())) as client:
        for page in ("/docs", "/redoc"):
            html = client.get(page)
            assert html.status_code == 200, page
            urls = re.findall(r"""(?:src|href|url)\s*[=:(]\s*['"]([^'"]+)['"]""", html.text)
            assert urls, page
            assert [u for u in urls if re.match(r"^(https?:)?//", u)] == [], page
            for url in urls:
                assert client.get(url).status_code == 200, f"{page} needs {url}"


READABLE_ID = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
PATH_PART = re.compile(r"_v\d|__|_$")


def test_operation_ids_are_unique_and_read_as_names(document: dict[str, Any]) -> None:
    ids = [operation["operationId"] for _, _, operation in operations(document)]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    for method, _, operation in operations(document):
        operation_id = operation["operationId"]
        assert READABLE_ID.fullmatch(operation_id), operation_id
        # no path or method pasted in (FastAPI's default is add_memories_v1_memories_post)
        assert not PATH_PART.search(operation_id), operation_id
        assert operation_id.startswith("mem0_") or not operation_id.endswith(f"_{method}")


def test_the_main_operations_have_stable_ids(document: dict[str, Any]) -> None:
    paths = document["paths"]
    assert paths["/v1/memories"]["post"]["operationId"] == "add_memories"
    assert paths["/v1/memories"]["get"]["operationId"] == "list_memories"
    assert paths["/v1/memories/search"]["post"]["operationId"] == "search_memories"
    assert paths["/v1/memories/{memory_id}"]["get"]["operationId"] == "get_memory"
    assert paths["/v1/jobs/{job_id}"]["get"]["operationId"] == "get_job"
    assert paths["/v3/memories/search/"]["post"]["operationId"] == "mem0_search"
    assert paths["/v1/entities/"]["get"]["operationId"] == "mem0_users"
