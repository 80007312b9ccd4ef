"""``memq reindex``: move memq's indices onto another shard or replica count, or onto the
current schema, while memq keeps serving (how writes are kept: ``pipeline.store.reindex``)."""

from __future__ import annotations

import argparse
import sys

from pipeline.config import Settings
from pipeline.errors import InvalidInputError
from pipeline.store.indices import Kind

EXIT_BAD_INPUT = 2


def run_reindex(settings: Settings, args: argparse.Namespace) -> int:
    """Move each kind asked for (every kind by default), one after the other; one line per
    step on stderr. A bad count is refused before anything is touched."""
    from pipeline.store.client import make_client
    from pipeline.store.reindex import check_counts, reindex

    replicas = settings.es.replicas if args.replicas is None else args.replicas
    try:
        check_counts(args.shards, replicas)
    except InvalidInputError as exc:
        print(f"memq: {exc.reason}", file=sys.stderr)
        return EXIT_BAD_INPUT
    client = make_client(settings.es)
    for kind in [Kind(k) for k in args.kind] if args.kind else list(Kind):
        done = reindex(
            client,
            settings.es,
            settings.embedder.dims,
            kind,
            shards=args.shards,
            replicas=replicas,
            progress=lambda line: print(f"memq: {line}", file=sys.stderr),
            keep_old=args.keep_old,
        )
        kept = f" ({done.source} kept)" if args.keep_old else ""
        print(f"memq: {kind.value}: {done.target}, {args.shards} shards{kept}", file=sys.stderr)
    if settings.es.shards != args.shards:
        print(
            f"memq: set MEMQ_ES_SHARDS={args.shards} so that indices made later match",
            file=sys.stderr,
        )
    return 0


def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from exc


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reindex = sub.add_parser(
        "reindex", help="move the indices onto a new shard count without stopping memq"
    )
    reindex.add_argument("--shards", type=_count, required=True, help="primary shards (1..64)")
    reindex.add_argument(
        "--replicas", type=_count, help="replicas (0..8; default: MEMQ_ES_REPLICAS)"
    )
    reindex.add_argument(
        "--kind",
        action="append",
        choices=[k.value for k in Kind],
        help="only this kind (repeatable; default: every kind)",
    )
    reindex.add_argument(
        "--keep-old", action="store_true", help="keep each old index (out of the alias)"
    )
    reindex.set_defaults(handler=run_reindex)
