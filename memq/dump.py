"""``memq export`` and ``memq import``: a tenant's memories out to JSON lines and back.

Both talk to Elasticsearch directly with the process's Settings (an operator's tools, like
``memq backfill``); the API's ``GET /v1/export`` serves a tenant its own dump with its key.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from pipeline.adapters.embedding.versioned import spec_in_use
from pipeline.config import Settings
from pipeline.errors import InvalidInputError
from pipeline.features.export import ExportOptions, Selector, export_lines, restore

EXIT_BAD_INPUT = 2


def run_export(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    """Stream the dump to ``out`` (or ``--output``); one line on stderr says how it went."""
    from pydantic import ValidationError

    from workers.runtime import Runtime

    try:
        selector = Selector(
            tenant=args.tenant, user_id=args.user_id, agent_id=args.agent_id, run_id=args.run_id
        )
    except ValidationError as exc:
        print(f"memq: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}", file=sys.stderr)
        return EXIT_BAD_INPUT
    runtime = Runtime(settings)
    options = ExportOptions(
        selector=selector, history=args.history, vectors=args.vectors, sources=args.sources
    )
    embedder = spec_in_use(settings.embedder, runtime.store.embedder_meta())
    lines = export_lines(runtime.store, options, embedder.model, embedder.dims, runtime.clock())
    count = write_lines(lines, Path(args.output) if args.output else None, out)
    print(f"memq: exported {count} memories of {selector.fields()}", file=sys.stderr)
    return 0


def write_lines(lines: Iterator[str], path: Path | None, out: TextIO) -> int:
    """Write every line; returns the memories counted on the end line."""
    last = ""
    if path is None:
        for last in lines:
            out.write(last)
        out.flush()
    else:
        with path.open("w", encoding="utf-8") as target:
            for last in lines:
                target.write(last)
    count: int = json.loads(last)["memories"]
    return count


def run_import(settings: Settings, args: argparse.Namespace) -> int:
    """Check the dump, then restore it; bad input is one line on stderr and exit status 2."""
    from workers.runtime import Runtime

    path = Path(args.path)
    if not path.is_file():
        print(f"memq: no such file: {path}", file=sys.stderr)
        return EXIT_BAD_INPUT
    runtime = Runtime(settings)
    embedder = spec_in_use(settings.embedder, runtime.store.embedder_meta())
    try:
        report = restore(
            runtime.store,
            runtime.deps,
            lambda: read_lines(path),
            model=embedder.model,
            dims=embedder.dims,
            tenant=args.tenant,
        )
    except InvalidInputError as exc:
        print(f"memq: {path}: {exc.reason}", file=sys.stderr)
        return EXIT_BAD_INPUT
    vectors = "reused" if report.vectors_reused else f"computed with {embedder.model}"
    print(
        f"memq: imported {report.memories} memories into tenant {report.tenant} "
        f"({report.history} history rows, {report.messages} source messages, "
        f"{report.entities} entity links; vectors {vectors})",
        file=sys.stderr,
    )
    return 0


def read_lines(path: Path) -> Iterator[str]:
    """The file's lines; bytes that are not UTF-8 are bad input, not a crash."""
    try:
        with path.open(encoding="utf-8") as source:
            yield from source
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise InvalidInputError(f"cannot read it ({exc.strerror})") from exc


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = sub.add_parser("export", help="write a tenant's memories as JSON lines")
    export.add_argument("--tenant", required=True)
    export.add_argument("--user", dest="user_id", help="only this user's memories")
    export.add_argument("--agent", dest="agent_id", help="only this agent's memories")
    export.add_argument("--run", dest="run_id", help="only this run's memories")
    export.add_argument("--history", action="store_true", help="include each memory's history")
    export.add_argument(
        "--vectors", action="store_true", help="include vectors (the model is named)"
    )
    export.add_argument(
        "--sources", action="store_true", help="include the messages each memory came from"
    )
    export.add_argument("--output", "-o", help="a file instead of standard output")
    export.set_defaults(handler=lambda s, a: run_export(s, a, sys.stdout))

    restore_ = sub.add_parser("import", help="restore a dump made by memq export")
    restore_.add_argument("path", help="the JSON-lines dump")
    restore_.add_argument("--tenant", help="restore into this tenant (default: the dump's)")
    restore_.set_defaults(handler=run_import)
