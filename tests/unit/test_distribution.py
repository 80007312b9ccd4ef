"""``pip install memq`` is the SDK: its requirements are httpx and pydantic only, and using the
SDK imports none of the server's packages, nor memq's own server side (``pipeline``, ``api``,
``workers``); the server is the ``server`` extra."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import requires

import pytest
from packaging.requirements import Requirement

from memq.types import TERMINAL_STATUSES
from pipeline.domain.jobs import TERMINAL_STATUSES as SERVER_TERMINAL_STATUSES

SERVER_MODULES = ("celery", "elasticsearch", "onnxruntime", "fastapi", "redis", "openai")
SERVER_SIDE = ("pipeline", "api", "workers")


def test_the_sdk_requires_only_httpx_and_pydantic() -> None:
    reqs = [Requirement(r) for r in requires("memq") or []]
    base = {r.name for r in reqs if r.marker is None}
    server = {
        r.name for r in reqs if r.marker is not None and r.marker.evaluate({"extra": "server"})
    }
    assert base == {"httpx", "pydantic"}
    assert {"celery", "elasticsearch", "onnxruntime", "fastapi", "flower"} <= server


def test_using_the_sdk_imports_no_server_package() -> None:
    probe = (
        "import json, sys, memq\n"
        "client = memq.Client('http://127.0.0.1:1', 'mq_x_y')\n"
        "client.close()\n"
        "print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(json.loads(done.stdout))
    assert loaded.isdisjoint(SERVER_MODULES), loaded & set(SERVER_MODULES)


@pytest.mark.parametrize(
    "use",
    [
        "import memq",
        "from memq import Client, AsyncClient, Job, MemqAPIError",
        "import memq.client, memq.types\nmemq.Client('http://127.0.0.1:1', 'mq_x_y').close()",
    ],
)
def test_the_sdk_loads_no_module_of_the_server_side(use: str) -> None:
    probe = f"import json, sys\n{use}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = {m for m in json.loads(done.stdout) if m.split(".")[0] in SERVER_SIDE}
    assert loaded == set()


def test_the_sdk_and_the_server_agree_on_which_statuses_end_a_job() -> None:
    assert {str(status) for status in SERVER_TERMINAL_STATUSES} == TERMINAL_STATUSES
