"""The package picture holds: ``pipeline`` (the domain) imports neither Celery nor FastAPI,
and nothing under it reaches back up into ``workers``, ``api`` or ``memq``; ``api`` imports no
Elasticsearch client of its own (it reaches the node through the store) and no Celery, and
names ``workers`` in one place only: ``api.resources``, where its default intake is made. The
modules of ``workers`` import one another without a cycle, counting the imports made inside
functions, which would otherwise hide one. Inside ``pipeline``, the domain's types
(``pipeline.domain``) import nothing of the rest but the errors, and the adapters
(``pipeline.adapters``) nothing but the settings, the errors, the domain and the store's client
(where Elasticsearch errors are translated): neither reaches up into ingestion, serving or the
features."""

from __future__ import annotations

import ast
from graphlib import TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported(package: str) -> dict[str, set[str]]:
    """Top-level module names imported anywhere in each source file of ``package``."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("pipeline", {"celery", "kombu", "fastapi", "starlette", "workers", "api", "memq"}),
        ("api", {"elasticsearch", "celery", "kombu"}),
    ],
)
def test_a_package_imports_nothing_above_or_beside_its_layer(
    package: str, forbidden: set[str]
) -> None:
    offending = {f: sorted(n & forbidden) for f, n in imported(package).items() if n & forbidden}
    assert offending == {}


def test_the_api_names_the_workers_only_where_its_default_intake_is_made() -> None:
    naming = sorted(f for f, names in imported("api").items() if "workers" in names)
    assert naming == ["api/resources.py"]


def modules_imported(path: Path, package: str) -> set[str]:
    """The modules of ``package`` that the file at ``path`` imports, at its top or anywhere
    else (a function body, a ``TYPE_CHECKING`` block)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name.split(".")[0] == package}


def test_the_workers_modules_import_one_another_without_a_cycle() -> None:
    modules = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts): path
        for path in sorted((ROOT / "workers").rglob("*.py"))
        if path.stem != "__init__"
    }
    graph = {
        name: modules_imported(path, "workers") & modules.keys() - {name}
        for name, path in modules.items()
    }
    assert graph["workers.serving"] >= {"workers.app", "workers.intake", "workers.chat"}
    order = list(TopologicalSorter(graph).static_order())  # CycleError names the cycle
    assert set(order) == modules.keys()


@pytest.mark.parametrize(
    ("part", "allowed"),
    [
        ("domain", {"pipeline.domain", "pipeline.errors"}),
        (
            "adapters",
            {
                "pipeline.adapters",
                "pipeline.config",
                "pipeline.domain",
                "pipeline.errors",
                "pipeline.store.client",
            },
        ),
    ],
)
def test_a_lower_part_of_the_pipeline_imports_only_what_lies_below_it(
    part: str, allowed: set[str]
) -> None:
    paths = sorted((ROOT / "pipeline" / part).rglob("*.py"))
    assert paths, f"no pipeline/{part}"

    def permitted(name: str) -> bool:
        return name == "pipeline" or any(name == a or name.startswith(f"{a}.") for a in allowed)

    offending = {
        str(path.relative_to(ROOT)): sorted(
            name for name in modules_imported(path, "pipeline") if not permitted(name)
        )
        for path in paths
    }
    assert {f: names for f, names in offending.items() if names} == {}
