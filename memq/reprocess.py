"""``memq reprocess``: rebuild the memories into a new index version while memq keeps serving.

``--reembed`` keeps every memory as it is and makes its vector again with another embedder
(any size), then swaps the new version in (``pipeline.store.reprocess``). The embedder is the
index version's: once the aliases move, the API and the workers embed with it, whatever their
``MEMQ_EMBEDDER_*`` say (``pipeline.embedding.versioned``). A stopped run resumes where it
was when started again with the same embedder. ``--drop-old`` deletes the versions left out
of the aliases (with ``--reembed``: the one it replaced, once the swap is done).

``--reextract`` makes the memories again from the stored conversations, replaying each
recorded job through the phases with the LLM of ``MEMQ_LLM_*`` and the prompts memq ships, for
one tenant (``--tenant``) or all (``pipeline.reextract``); the embedder stays the one in use.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import TypeAdapter, ValidationError

from pipeline.config import Settings
from pipeline.embedding.versioned import EmbedderSpec, settings_models
from pipeline.errors import InvalidInputError, MemqError, TransientError
from pipeline.models import Identifier, utcnow

if TYPE_CHECKING:
    from pipeline.store.indices import Kind

EXIT_BAD_INPUT = 2


def say(line: str) -> None:
    print(f"memq: {line}", file=sys.stderr, flush=True)


def run_reprocess(settings: Settings, args: argparse.Namespace) -> int:
    """Re-embed or re-extract (or plan it, or only drop old versions); one line per step on
    stderr. Exit 2: bad options; 1: stopped (a rerun resumes)."""
    try:
        return rebuild(settings, args)
    except InvalidInputError as exc:
        say(exc.reason)
        return EXIT_BAD_INPUT
    except TransientError as exc:
        say(f"stopped, run it again to resume: {exc.reason}")
        return 1
    except MemqError as exc:
        say(f"stopped: {exc.reason}")
        return 1


def rebuild(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline.store.client import make_client
    from pipeline.store.indices import IndexNames
    from pipeline.store.reprocess import drop_old

    check_options(args)
    if args.reextract:
        return reextract_now(settings, args)
    if args.reembed:
        return reembed_now(settings, args)
    client = make_client(settings.es)
    say(f"dropped {', '.join(drop_old(client, IndexNames(settings.es.index_prefix))) or 'nothing'}")
    return 0


def check_options(args: argparse.Namespace) -> None:
    if args.reembed and args.reextract:
        raise InvalidInputError("choose one mode: --reembed or --reextract")
    if not (args.reembed or args.reextract or args.drop_old):
        raise InvalidInputError(
            "name a mode (--reembed or --reextract), or --drop-old alone to delete old versions"
        )
    if args.tenant is not None:
        if not args.reextract:
            raise InvalidInputError(
                "--tenant goes with --reextract (a re-embedding is of every tenant at once)"
            )
        try:
            TypeAdapter(Identifier).validate_python(args.tenant)
        except ValidationError as exc:
            raise InvalidInputError(f"--tenant {args.tenant!r} is not a tenant id") from exc


def reextract_now(settings: Settings, args: argparse.Namespace) -> int:
    """Re-extract (or plan it) with the LLM of ``MEMQ_LLM_*`` and the shipped prompts."""
    from pipeline.reextract import Extraction, plan, reextract
    from pipeline.services import build_deps
    from pipeline.store.client import make_client
    from pipeline.store.indices import IndexNames

    client = make_client(settings.es)
    extraction = Extraction.current(settings.llm.model, settings.llm.base_url)
    whose = f"tenant {args.tenant}" if args.tenant else "every tenant"
    if args.dry_run:
        cost = plan(client, IndexNames(settings.es.index_prefix), args.tenant)
        unknown = f" ({cost.uncounted} of them recorded no count)" if cost.uncounted else ""
        say(
            f"dry run: {cost.jobs} jobs of {whose} ({cost.messages} messages) to replay with "
            f"{extraction.describe()}: {cost.llm_calls} LLM calls and {cost.llm_tokens} LLM "
            f"tokens when they were last extracted{unknown}"
        )
        return 0
    if not settings.llm_configured():
        raise InvalidInputError(
            "re-extraction needs an LLM: set MEMQ_LLM_BASE_URL or OPENAI_API_KEY"
        )
    started = time.monotonic()
    done = reextract(
        client,
        settings.es,
        lambda store: build_deps(settings, store, utcnow),
        extraction,
        EmbedderSpec.of(settings.embedder),
        tenant=args.tenant,
        rate_per_s=args.rate,
        progress=say,
        drop_old=args.drop_old,
    )
    failed = f", {len(done.failed)} jobs carried over unreplayed" if done.failed else ""
    say(
        f"re-extracted {done.jobs} jobs of {whose} into {done.memories} memories in "
        f"{time.monotonic() - started:.1f} s{failed}{kept(done.dropped, done.sources)}"
    )
    return 0


def reembed_now(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline.store.client import make_client
    from pipeline.store.indices import IndexNames
    from pipeline.store.reprocess import plan, reembed

    spec = spec_of(settings, args)
    client = make_client(settings.es)
    if args.dry_run:
        names = IndexNames(settings.es.index_prefix)
        cost = plan(client, names, spec.config(settings.embedder).batch_size)
        say(
            f"dry run: {cost.memories} memories and {cost.entities} entities to embed with "
            f"{spec.describe()}: {cost.embedding_calls} embedding calls, "
            f"{cost.llm_calls} LLM calls, {cost.llm_tokens} LLM tokens"
        )
        return 0
    embedder = settings_models(settings)(spec).embedder
    started = time.monotonic()
    done = reembed(
        client,
        settings.es,
        spec,
        embedder,
        rate_per_s=args.rate,
        progress=say,
        drop_old=args.drop_old,
    )
    embedded = sum(s.embedded for s in done.synced.values())
    elapsed = time.monotonic() - started
    say(
        f"re-embedded {embedded} documents in {elapsed:.1f} s with {spec.describe()}"
        f"{kept(done.dropped, done.sources)}"
    )
    return 0


def kept(dropped: bool, sources: Mapping[Kind, str]) -> str:
    return "" if dropped else f"; old versions kept: {', '.join(sources.values())}"


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
    command.add_argument(
        "--reextract",
        action="store_true",
        help="make the memories again from the stored conversations with the LLM in use",
    )
    command.add_argument("--tenant", help="with --reextract: only this tenant (default: all)")
    command.add_argument("--embedder-kind", choices=["local", "openai"])
    command.add_argument("--embedder-model", help="the new embedding model")
    command.add_argument("--embedder-dims", type=int, help="its vector size")
    command.add_argument("--embedder-base-url", help="its OpenAI-compatible endpoint")
    command.add_argument(
        "--rate",
        type=_positive,
        help="at most this many documents (--reembed) or jobs (--reextract) a second",
    )
    command.add_argument("--dry-run", action="store_true", help="report the cost, change nothing")
    command.add_argument(
        "--drop-old", action="store_true", help="delete the versions out of the aliases"
    )
    command.set_defaults(handler=run_reprocess)
