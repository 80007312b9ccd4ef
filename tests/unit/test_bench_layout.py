"""The benchmarks' layout holds (see ``ops/bench/benchlib/__init__.py``): a file under
``ops/bench`` imports the shared ``benchlib`` and memq's own packages, never another benchmark
script and nothing from ``tests`` (the scripted model and the private services run as processes
of their own), counting the imports made inside functions; no file touches ``sys.path``; and
every script answers ``--help`` as it is run, ``python ops/bench/NAME.py``."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "ops" / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))
SOURCES = sorted(BENCH.rglob("*.py"))


def imported(path: Path) -> set[str]:
    """Every module name ``path`` imports, at any depth of its code."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def touches_sys_path(path: Path) -> bool:
    tree = ast.parse(path.read_text(), str(path))
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
        for node in ast.walk(tree)
    )


def test_the_scripts_and_the_library_are_there() -> None:
    assert len(SCRIPTS) > 10
    assert (BENCH / "benchlib" / "__init__.py").exists()


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(BENCH)))
def test_a_bench_file_imports_no_script_and_nothing_from_the_tests(path: Path) -> None:
    scripts = {script.stem for script in SCRIPTS}
    wrong = {
        name
        for name in imported(path)
        if name.split(".")[0] in scripts | {"tests", "ops"} and name != path.stem
    }
    assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(BENCH)))
def test_no_bench_file_touches_sys_path(path: Path) -> None:
    assert not touches_sys_path(path), f"{path.relative_to(ROOT)} touches sys.path"


def test_the_rules_see_what_they_forbid(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import sys\nsys.path.insert(0, '.')\n"
        "def f():\n    from tests.fakellm import FakeLLMServer\n    import ingest_compare\n"
    )
    assert {"tests.fakellm", "ingest_compare"} <= imported(bad)
    assert touches_sys_path(bad)


def help_of(script: Path) -> subprocess.CompletedProcess[str]:
    # The checkout first, as the benchmarks' own command asks of a venv shared by checkouts.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_script_answers_help() -> None:
    with ThreadPoolExecutor(4) as pool:
        done = dict(zip(SCRIPTS, pool.map(help_of, SCRIPTS), strict=True))
    failed = {p.name: r.stderr[-400:] for p, r in done.items() if r.returncode != 0}
    assert not failed, failed
    assert all("usage:" in r.stdout for r in done.values())
