"""``memq reprocess``: rebuild the memories into a new index version while memq keeps serving.

``--reembed`` keeps every memory as it is and makes its vector again with another embedder
(any size), then swaps the new version in (``pipeline.store.reprocess``). The embedder is the
index version's: once the aliases move, the API and the workers embed with it, whatever their
``MEMQ_EMBEDDER_*`` say (``pipeline.embedding.versioned``). A stopped run resumes where it
was when started again with the same embedder. ``--drop-old`` deletes the versions left out
of the aliases (with ``--reembed``: the one it replaced, once the swap is done).
"""

from __future__ import annotations

import argparse
import sys
import time

from pipeline.config import Settings
from pipeline.embedding.versioned import EmbedderSpec, settings_models
from pipeline.errors import InvalidInputError, MemqError, TransientError

EXIT_BAD_INPUT = 2


def say(line: str) -> None:
    print(f"memq: {line}", file=sys.stderr, flush=True)


def run_reprocess(settings: Settings, args: argparse.Namespace) -> int:
    """Re-embed (or plan it, or only drop old versions); one line per step on stderr."""
    from pipeline.store.client import make_client
    from pipeline.store.indices import IndexNames
    from pipeline.store.reprocess import drop_old, plan

    client = make_client(settings.es)
    names = IndexNames(settings.es.index_prefix)
    if not args.reembed:
        if not args.drop_old:
            say("name a mode (--reembed), or --drop-old alone to delete old versions")
            return EXIT_BAD_INPUT
        say(f"dropped {', '.join(drop_old(client, names)) or 'nothing'}")
        return 0
    try:
        spec = spec_of(settings, args)
    except InvalidInputError as exc:
        say(exc.reason)
        return EXIT_BAD_INPUT
    if args.dry_run:
        cost = plan(client, names, spec.config(settings.embedder).batch_size)
        say(
            f"dry run: {cost.memories} memories and {cost.entities} entities to embed with "
            f"{spec.describe()}: {cost.embedding_calls} embedding calls, "
            f"{cost.llm_calls} LLM calls, {cost.llm_tokens} LLM tokens"
        )
        return 0
    return reembed_now(settings, spec, args)


def reembed_now(settings: Settings, spec: EmbedderSpec, args: argparse.Namespace) -> int:
    from pipeline.store.client import make_client
    from pipeline.store.reprocess import reembed

    embedder = settings_models(settings)(spec).embedder
    started = time.monotonic()
    try:
        done = reembed(
            make_client(settings.es),
            settings.es,
            spec,
            embedder,
            rate_per_s=args.rate,
            progress=say,
            drop_old=args.drop_old,
        )
    except InvalidInputError as exc:
        say(exc.reason)
        return EXIT_BAD_INPUT
    except TransientError as exc:
        say(f"stopped, run it again to resume: {exc.reason}")
        return 1
    except MemqError as exc:
        say(f"stopped: {exc.reason}")
        return 1
    embedded = sum(s.embedded for s in done.synced.values())
    elapsed = time.monotonic() - started
    kept = "" if done.dropped else f"; old versions kept: {', '.join(done.sources.values())}"
    say(f"re-embedded {embedded} documents in {elapsed:.1f} s with {spec.describe()}{kept}")
    return 0


def spec_of(settings: Settings, args: argparse.Namespace) -> EmbedderSpec:
    """The embedder asked for: the flags given, the rest from ``MEMQ_EMBEDDER_*``."""
    base = EmbedderSpec.of(settings.embedder)
    kind = args.embedder_kind or base.kind
    if kind not in {"local", "openai"}:
        raise InvalidInputError("--embedder-kind must be local or openai", field="embedder_kind")
    dims = args.embedder_dims or base.dims
    if not 8 <= dims <= 4096:
        raise InvalidInputError("--embedder-dims must be 8..4096", field="embedder_dims")
    return EmbedderSpec(
        kind=kind,
        model=args.embedder_model or base.model,
        dims=dims,
        base_url=args.embedder_base_url or base.base_url,
    )


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from exc
    if value <= 0:
        raise argparse.ArgumentTypeError("must be above 0")
    return value


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = sub.add_parser(
        "reprocess", help="rebuild the memories into a new index version without stopping memq"
    )
    command.add_argument(
        "--reembed", action="store_true", help="embed every memory and entity again"
    )
    command.add_argument("--embedder-kind", choices=["local", "openai"])
    command.add_argument("--embedder-model", help="the new embedding model")
    command.add_argument("--embedder-dims", type=int, help="its vector size")
    command.add_argument("--embedder-base-url", help="its OpenAI-compatible endpoint")
    command.add_argument("--rate", type=_positive, help="documents a second at most")
    command.add_argument("--dry-run", action="store_true", help="report the cost, change nothing")
    command.add_argument(
        "--drop-old", action="store_true", help="delete the versions out of the aliases"
    )
    command.set_defaults(handler=run_reprocess)
