"""``memq reprocess``: rebuild the memories into a new index version while memq keeps serving.

``--reembed`` keeps every memory as it is and makes its vector again with another embedder
(any size), then swaps the new version in (``pipeline.store.reprocess``). The embedder is the
index version's: once the aliases move, the API and the workers embed with it, whatever their
``MEMQ_EMBEDDER_*`` say (``pipeline.adapters.embedding.versioned``). A stopped run resumes where it
was when started again with the same embedder. ``--drop-old`` deletes the versions left out
of the aliases (with ``--reembed``: the one it replaced, once the swap is done).

``--reextract`` makes the memories again from the stored conversations, replaying each
recorded job through the phases with the LLM of ``MEMQ_LLM_*`` and the prompts memq ships, for
one tenant (``--tenant``) or all (``pipeline.features.reextract``); the embedder stays the one in
use.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from pydantic import TypeAdapter, ValidationError

from pipeline.adapters.embedding.versioned import EmbedderSpec
from pipeline.config import Settings
from pipeline.domain.models import Identifier
from pipeline.errors import InvalidInputError, MemqError, TransientError
from pipeline.features.reprocess import ReprocessRun, embedder_spec
from pipeline.store.reprocess import REEMBED, Reembedded

if TYPE_CHECKING:
    from workers.scheduler.state_store import RedisStateStore

EXIT_BAD_INPUT = 2


def say(line: str) -> None:
    print(f"memq: {line}", file=sys.stderr, flush=True)


def run_reprocess(settings: Settings, args: argparse.Namespace) -> int:
    """Re-embed or re-extract (or plan it, or only drop old versions, or show the status);
    one line per step on stderr. Exit 2: bad options or nothing to do; 1: stopped (a rerun
    resumes)."""
    from pipeline.store.client import make_client
    from pipeline.store.indices import IndexNames
    from pipeline.store.reprocess import drop_old

    if args.status:
        print_status(settings)
        return 0
    try:
        check_options(args)
    except InvalidInputError as exc:
        say(exc.reason)
        return EXIT_BAD_INPUT
    if not (args.reembed or args.reextract):
        names = IndexNames(settings.es.index_prefix)
        say(f"dropped {', '.join(drop_old(make_client(settings.es), names)) or 'nothing'}")
        return 0
    try:
        run = run_of(settings, args)
        if args.dry_run:
            say_plan(settings, run)
            return 0
    except InvalidInputError as exc:
        say(exc.reason)
        return EXIT_BAD_INPUT
    return rebuild_now(settings, run)


def check_options(args: argparse.Namespace) -> None:
    if args.reembed and args.reextract:
        raise InvalidInputError("choose one mode: --reembed or --reextract")
    if not (args.reembed or args.reextract or args.drop_old):
        raise InvalidInputError(
            "name a mode (--reembed or --reextract), --drop-old alone to delete old versions, "
            "or --status"
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


def run_of(settings: Settings, args: argparse.Namespace) -> ReprocessRun:
    """The run the options ask for; ``InvalidInputError`` for a bad embedder option, or a
    re-extraction with no LLM configured."""
    if args.reextract:
        from pipeline.features.reprocess import extraction_of, reextract_run
        from pipeline.store.client import make_client

        if not args.dry_run:
            extraction_of(settings)
        return reextract_run(
            settings,
            make_client(settings.es),
            tenant=args.tenant,
            rate_per_s=args.rate,
            drop_old=args.drop_old,
        )
    return ReprocessRun(spec_of(settings, args), args.rate, args.drop_old)


def say_plan(settings: Settings, run: ReprocessRun) -> None:
    from pipeline.features.reprocess import plan_of
    from pipeline.store.client import make_client

    cost = plan_of(settings, make_client(settings.es), run)
    if run.mode == REEMBED:
        say(
            f"dry run: {cost.memories} memories and {cost.entities} entities to embed with "
            f"{run.spec.describe()}: {cost.embedding_calls} embedding calls, "
            f"{cost.llm_calls} LLM calls, {cost.llm_tokens} LLM tokens"
        )
        return
    whose = f"tenant {run.tenant}" if run.tenant else "every tenant"
    unknown = f" ({cost.uncounted} of them recorded no count)" if cost.uncounted else ""
    say(
        f"dry run: {cost.jobs} jobs of {whose} ({cost.messages} messages) to replay with "
        f"{settings.llm.model}: {cost.llm_calls} LLM calls and {cost.llm_tokens} LLM tokens "
        f"when they were last extracted{unknown}"
    )


def print_status(settings: Settings) -> None:
    """The embedder in use, the active run, and the versions of the memories and entities
    with each build's progress, on stdout."""
    from pipeline.store.client import make_client
    from pipeline.store.indices import IndexNames, stored_embedder
    from pipeline.store.reprocess import versions_of
    from workers.reprocess import REPROCESS_LOCK

    client, names = make_client(settings.es), IndexNames(settings.es.index_prefix)
    in_use = stored_embedder(client, names.memories) or EmbedderSpec.of(settings.embedder).meta()
    print(f"embedder in use: {EmbedderSpec.model_validate(in_use).describe()}")
    print(f"active run: {states_of(settings).lock_owner(REPROCESS_LOCK) or 'none'}")
    found = versions_of(client, names)
    for kind, versions in found.items():
        for version in versions:
            line = f"{kind.value:9} {version.state:9} {version.index} {version.documents} docs"
            if (progress := version.progress) is not None:
                line += f"; {progress.mode} {progress.stage}"
                if progress.kind:
                    line += f" {progress.kind} {progress.done}/{progress.total}"
                line += f", updated {progress.updated_at}"
                line += f" ({progress.reason})" if progress.reason else ""
            print(line)


def rebuild_now(settings: Settings, run: ReprocessRun) -> int:
    """Run under the reprocess lock (``workers.reprocess``), as a worker's run does."""
    import uuid

    from pipeline.features.reprocess import run_reprocess as run_it
    from workers.reprocess import holding

    states = states_of(settings)
    started = time.monotonic()
    try:
        with holding(states, f"cli-{uuid.uuid4().hex}"):
            done = run_it(settings, run, progress=say)
    except InvalidInputError as exc:
        say(exc.reason)
        return EXIT_BAD_INPUT
    except TransientError as exc:
        say(f"stopped, run it again to resume: {exc.reason}")
        return 1
    except MemqError as exc:
        say(f"stopped: {exc.reason}")
        return 1
    elapsed = time.monotonic() - started
    kept = "" if done.dropped else f"; old versions kept: {', '.join(done.sources.values())}"
    if isinstance(done, Reembedded):
        embedded = sum(s.embedded for s in done.synced.values())
        say(f"re-embedded {embedded} documents in {elapsed:.1f} s with {run.spec.describe()}{kept}")
        return 0
    whose = f"tenant {run.tenant}" if run.tenant else "every tenant"
    failed = f", {len(done.failed)} jobs carried over unreplayed" if done.failed else ""
    say(
        f"re-extracted {done.jobs} jobs of {whose} into {done.memories} memories in "
        f"{elapsed:.1f} s{failed}{kept}"
    )
    return 0


def states_of(settings: Settings) -> RedisStateStore:
    """Where the reprocess lock is (``workers.reprocess``)."""
    import redis

    from workers.scheduler.state_store import RedisStateStore

    return RedisStateStore(redis.Redis.from_url(settings.redis.url), settings.es.index_prefix)


def spec_of(settings: Settings, args: argparse.Namespace) -> EmbedderSpec:
    """The embedder asked for: the flags given, the rest from ``MEMQ_EMBEDDER_*``."""
    return embedder_spec(
        settings,
        args.embedder_kind,
        args.embedder_model,
        args.embedder_dims,
        args.embedder_base_url,
        label="--embedder-",
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
    command.add_argument(
        "--status", action="store_true", help="show the versions and each build's progress"
    )
    command.set_defaults(handler=run_reprocess)
