"""The SDK as a type checker sees it: README's own example, and ``add``'s answer by ``wait``,
pass ``mypy --strict`` (run through ``mypy.api`` on files written for the test), and a misuse
is caught, so the check cannot pass by checking nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api as mypy_api

ROOT = Path(__file__).resolve().parents[2]

ADD_BY_WAIT = """
from typing import assert_type

import memq


def sync(client: memq.Client, flag: bool) -> None:
    assert_type(client.add("hi", user_id="u1"), memq.JobAccepted)
    assert_type(client.add("hi", user_id="u1", wait=False), memq.JobAccepted)
    assert_type(client.add("hi", user_id="u1", wait=True, wait_timeout_s=5), memq.Job)
    assert_type(client.add("hi", user_id="u1", wait=flag), memq.JobAccepted | memq.Job)


async def asynchronous(client: memq.AsyncClient) -> None:
    assert_type(await client.add("hi", user_id="u1"), memq.JobAccepted)
    assert_type(await client.add("hi", user_id="u1", wait=True), memq.Job)
"""

MISUSED = """
import memq


def misuse(client: memq.Client) -> None:
    print(client.add("hi", user_id="u1").results)
    client.add("hi", user="u1", wait=True)
"""


def readme_example() -> str:
    """The first Python block of README's "Python SDK" section, with the ``KEY`` it uses."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Python SDK", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "README's Python SDK section has no python block"
    return 'KEY = "mq_example"\n' + match.group(1)


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """``mypy --strict``'s errors per file, for the three files checked in one run."""
    folder = tmp_path_factory.mktemp("typing")
    files = {"readme": readme_example(), "add_by_wait": ADD_BY_WAIT, "misused": MISUSED}
    for name, source in files.items():
        (folder / f"{name}.py").write_text(source)
    report, problems, _ = mypy_api.run(
        [
            "--strict",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(folder / "cache"),
            *(str(folder / f"{name}.py") for name in files),
        ]
    )
    assert not problems, problems
    errors: dict[str, list[str]] = {name: [] for name in files}
    for line in report.splitlines():
        name = Path(line.split(":", 1)[0]).stem
        if name in errors and ": error:" in line:
            errors[name].append(line)
    return errors


def test_readmes_sdk_example_passes_mypy_strict(mypy_errors: dict[str, list[str]]) -> None:
    assert mypy_errors["readme"] == []


def test_add_answers_a_job_when_it_waits_and_an_acceptance_else(
    mypy_errors: dict[str, list[str]],
) -> None:
    assert mypy_errors["add_by_wait"] == []


def test_a_misuse_of_add_is_caught(mypy_errors: dict[str, list[str]]) -> None:
    [results, unknown, *_] = mypy_errors["misused"]
    assert '"JobAccepted" has no attribute "results"' in results
    assert '"user"' in unknown
