"""The ``memq`` command: run the services and talk to a running stack.

Every subcommand builds ``Settings`` once from the environment and passes it down. Errors a user
can act on are printed as one line on stderr with exit status 2 (bad input) or 1 (a fault).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import ValidationError

from pipeline.adapters.embedding.cores import cores_file
from pipeline.config import Settings
from pipeline.errors import MemqError
from pipeline.logs import configure_logging, json_lines

Handler = Callable[[Settings, argparse.Namespace], int]


def _worker(settings: Settings, args: argparse.Namespace) -> int:
    settings = with_metrics_port(settings, args.metrics_port)
    # before anything imports prometheus_client, which reads the directory at import time
    metrics_dir = prepare_metrics_dir() if settings.worker.metrics_port else None
    from workers.app import connect_metrics_server, create_celery
    from workers.broker import TRANSPORT

    queues = settings.queues
    role = {
        "io": ([queues.io], "threads", settings.worker.io_concurrency),
        "cpu": ([queues.cpu, queues.backfill], "prefork", settings.worker.concurrency),
        "all": ([queues.io, queues.cpu, queues.backfill], "prefork", settings.worker.concurrency),
    }[args.role]
    names, pool, concurrency = role
    concurrency = args.concurrency or concurrency
    if pool == "prefork":
        settings = share_cores(settings, concurrency)
    argv = [
        "worker",
        f"--queues={args.queues or ','.join(names)}",
        f"--pool={pool}",
        f"--concurrency={concurrency}",
        f"--loglevel={args.loglevel}",
        f"--hostname={args.hostname or f'memq-{args.role}@%h'}",
        "--without-gossip",
        "--without-mingle",
    ]
    if json_lines(settings.log):  # a plain banner in a log file (an option of celery itself)
        argv.insert(0, "--no-color")
    app = create_celery(settings)
    # A task publishing while the broker is away (its own retry, the next phase) waits for the
    # broker instead of failing: Celery turns a failed publish of a retry into a reject without
    # requeue, which would drop the job's message. Workers only: the API answers 503 at once.
    app.conf.task_publish_retry_policy = WORKER_PUBLISH_RETRY
    # kombu's Redis transport, without the crash that stopped workers when the broker went
    # away under load (workers/broker.py). Workers only: Flower reads the broker URL's scheme.
    app.conf.broker_transport = TRANSPORT
    if metrics_dir is not None:
        connect_metrics_server(app, metrics_dir, (args.queues or ",".join(names)).split(","))
    app.worker_main(argv)


def with_metrics_port(settings: Settings, port: int | None) -> Settings:
    """``--metrics-port`` over ``MEMQ_WORKER_METRICS_PORT`` (two workers on one host need
    two ports)."""
    if port is None:
        return settings
    if not 0 <= port <= 65535:
        raise SystemExit(f"memq: --metrics-port {port}: expected 0..65535")
    worker = settings.worker.model_copy(update={"metrics_port": port})
    return settings.model_copy(update={"worker": worker})


def prepare_metrics_dir() -> str:
    """A fresh, empty directory for the worker's Prometheus multiprocess files, exported in
    ``PROMETHEUS_MULTIPROC_DIR`` for its pool's processes and removed when the worker exits
    (fresh: files of an earlier run would be added to this run's counts). Its name carries the
    worker's pid, so the directory of a worker that was killed (no exit handler ran) is
    removed by the next worker that starts."""
    remove_stale_metrics_dirs()
    path = tempfile.mkdtemp(prefix=f"memq-metrics-{os.getpid()}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def remove_stale_metrics_dirs() -> None:
    for stale in Path(tempfile.gettempdir()).glob("memq-metrics-*-*"):
        pid = stale.name.split("-")[2]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


# Up to about 8 minutes of broker outage: 0 s, 1 s, 2 s ... then every 5 s, 100 tries.
WORKER_PUBLISH_RETRY = {
    "max_retries": 100,
    "interval_start": 0,
    "interval_step": 1,
    "interval_max": 5,
}


def share_cores(settings: Settings, processes: int) -> Settings:
    """Give each of a worker's ``processes`` its share of the cores for the local model, unless
    ``MEMQ_EMBEDDER_THREADS`` says otherwise: oversubscribed model threads cost twice the CPU.
    With a share, the processes also lend each other the cores they are not using, through a
    file made here, before the fork (pipeline/adapters/embedding/cores.py)."""
    if settings.embedder.threads:
        return settings
    cores = os.cpu_count() or 1
    threads = max(1, cores // processes)
    update: dict[str, object] = {"threads": threads}
    if settings.embedder.kind == "local" and processes > 1:
        update["cores_file"] = str(cores_file(cores))
    embedder = settings.embedder.model_copy(update=update)
    return settings.model_copy(update={"embedder": embedder})


def _flower(settings: Settings, args: argparse.Namespace) -> int:
    from workers.app import create_celery

    if settings.flower.basic_auth is None:
        print(
            "memq: Flower can control the workers, so it needs a login: set "
            "MEMQ_FLOWER_BASIC_AUTH=user:password (ops/up keeps one in its state directory)",
            file=sys.stderr,
        )
        return 2
    # The credentials go to Flower inside this process: they never show on a command line.
    argv = [
        "flower",
        f"--address={settings.flower.host}",
        f"--port={settings.flower.port}",
        f"--basic-auth={settings.flower.basic_auth.get_secret_value()}",
    ]
    create_celery(settings).start(argv)


def _api(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from api.app import create_app, instrument

    app = create_app(settings)
    instrument(app, settings)
    # log_config=None: uvicorn's lines go through the logging memq configured at start (JSON
    # or text, no colours: pipeline.logs leaves out the coloured copy uvicorn puts on them)
    uvicorn.run(app, host=settings.api.host, port=settings.api.port, log_config=None)
    return 0


def _openapi(settings: Settings, args: argparse.Namespace) -> int:
    """The API's OpenAPI document as JSON on stdout; needs no running service."""
    from api.app import create_app

    print(json.dumps(create_app(settings).openapi(), indent=2))
    return 0


def _mcp(settings: Settings, args: argparse.Namespace) -> int:
    """The MCP server on stdio, for the tenant of ``MEMQ_MCP_KEY``."""
    if settings.mcp.key is None:
        print("memq: set MEMQ_MCP_KEY to the tenant key the MCP server acts with", file=sys.stderr)
        return 2
    from api.mcp import serve_stdio
    from api.resources import Resources

    serve_stdio(Resources(settings), settings.mcp.key.get_secret_value())
    return 0


def _init(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline.store.client import make_client
    from pipeline.store.indices import ensure_indices

    names = ensure_indices(make_client(settings.es), settings.es, settings.embedder.dims)
    print(f"indices ready under prefix '{names.prefix}' at {settings.es.url}")
    return 0


def _health(settings: Settings, args: argparse.Namespace) -> int:
    from celery.exceptions import TimeoutError as CeleryTimeout

    from workers.app import HEALTH_TASK, create_celery

    app = create_celery(settings)
    queue = getattr(settings.queues, args.queue)
    try:
        reply = app.send_task(HEALTH_TASK, queue=queue).get(timeout=args.timeout_s)
    except CeleryTimeout:
        print(f"memq: no worker answered on {queue} within {args.timeout_s:g}s", file=sys.stderr)
        return 1
    print(json.dumps(reply))
    return 0


def _demo(settings: Settings, args: argparse.Namespace) -> int:
    from memq.demo import run_demo

    return run_demo(settings, timeout_s=args.timeout_s)


def _status(settings: Settings, args: argparse.Namespace) -> int:
    from memq.status import run_status

    return run_status(settings, as_json=args.json)


def _settings(settings: Settings, args: argparse.Namespace) -> int:
    """Print what ops/ needs to know, as shell assignments (one source of truth for ports)."""
    es = urlsplit(settings.es.url)
    redis = urlsplit(settings.redis.url)
    values = {
        "MEMQ_ES_URL": settings.es.url,
        "ES_HOST": es.hostname or "127.0.0.1",
        "ES_PORT": str(es.port or 9200),
        "REDIS_HOST": redis.hostname or "127.0.0.1",
        "REDIS_PORT": str(redis.port or 6379),
        "API_HOST": settings.api.host,
        "API_PORT": str(settings.api.port),
        "FLOWER_HOST": settings.flower.host,
        "FLOWER_PORT": str(settings.flower.port),
    }
    for key, value in values.items():
        print(f"{key}={shlex.quote(value)}")
    return 0


# --- memq backfill (see memq/backfill.py, docs/BACKFILL.md) -----------------------------------


def _backfill(settings: Settings, args: argparse.Namespace) -> int:
    """Bad input (the archive, the options, the checkpoint) is one line and exit status 2."""
    from pathlib import Path

    from memq.backfill import EXIT_BAD_INPUT, Backfill, BackfillOptions, dry_run
    from pipeline.errors import InvalidInputError
    from pipeline.ingestion.backfill import ReaderOptions, reader_for

    try:
        reader = reader_for(
            args.format, Path(args.path), ReaderOptions(args.user_id, args.agent_id)
        )
        if args.dry_run:
            return dry_run(reader, sys.stdout)
        from workers.app import create_celery

        infer = settings.llm_configured() if args.infer is None else args.infer
        options = BackfillOptions(
            fmt=args.format,
            tenant=args.tenant,
            infer=infer,
            checkpoint=Path(args.checkpoint) if args.checkpoint else None,
            max_in_flight=args.max_in_flight,
            rate=args.rate,
            retry_failed=args.retry_failed,
            timeout_s=args.timeout_s,
        )
        return Backfill(create_celery(settings), reader, options).run()
    except InvalidInputError as exc:
        print(f"memq: {exc.reason}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _add_backfill(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pipeline.ingestion.backfill import READERS

    backfill = sub.add_parser("backfill", help="import a transcript archive (docs/BACKFILL.md)")
    backfill.add_argument("path", help="the archive: a file or a folder, by format")
    backfill.add_argument("--format", required=True, choices=sorted(READERS))
    backfill.add_argument("--user-id", help="whose memory (required for chatgpt)")
    backfill.add_argument("--agent-id")
    backfill.add_argument("--tenant", default="default")
    backfill.add_argument(
        "--infer",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="extract facts with the LLM (default: when an LLM is configured)",
    )
    backfill.add_argument("--checkpoint", help="JSON file of finished keys, to resume")
    backfill.add_argument("--max-in-flight", type=_positive_int, default=32)
    backfill.add_argument("--rate", type=float, default=5.0, help="jobs per second (0: no limit)")
    backfill.add_argument("--dry-run", action="store_true", help="only count")
    backfill.add_argument("--retry-failed", action="store_true", help="replay failed/dead jobs")
    backfill.add_argument(
        "--timeout-s", type=float, default=900.0, help="how long one job may stay unfinished"
    )
    backfill.set_defaults(handler=_backfill)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


# --- end of memq backfill ---------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memq", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"memq {version('memq')}")
    sub = parser.add_subparsers(dest="command", required=True)

    worker = sub.add_parser("worker", help="run a Celery worker")
    worker.add_argument(
        "--role",
        choices=["io", "cpu", "all"],
        default="all",
        help="io: LLM and Elasticsearch phases on threads; cpu: model phases and backfill "
        "on processes; all: every queue (default)",
    )
    worker.add_argument("--queues", help="comma-separated queue names (overrides --role's)")
    worker.add_argument(
        "--concurrency", type=int, help="processes (default: MEMQ_WORKER_CONCURRENCY)"
    )
    worker.add_argument("--loglevel", default="INFO")
    worker.add_argument("--hostname", help="default: memq-<role>@%%h")
    worker.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on this port (default: MEMQ_WORKER_METRICS_PORT; 0: off)",
    )
    worker.set_defaults(handler=_worker)

    sub.add_parser("flower", help="run the Flower dashboard").set_defaults(handler=_flower)
    sub.add_parser("api", help="run the HTTP API").set_defaults(handler=_api)
    sub.add_parser("openapi", help="print the API's OpenAPI document (JSON), offline").set_defaults(
        handler=_openapi
    )
    sub.add_parser(
        "mcp", help="run the MCP server on stdio (the tenant of MEMQ_MCP_KEY)"
    ).set_defaults(handler=_mcp)
    sub.add_parser("init", help="create index templates and indices").set_defaults(handler=_init)

    health = sub.add_parser("health", help="round-trip a task through a worker")
    health.add_argument("--timeout-s", type=float, default=30.0)
    health.add_argument("--queue", choices=["io", "cpu", "backfill"], default="io")
    health.set_defaults(handler=_health)

    sub.add_parser("settings", help="print resolved ports for ops/").set_defaults(handler=_settings)

    status = sub.add_parser("status", help="queue depths, jobs by status, dead jobs, workers")
    status.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    status.set_defaults(handler=_status)

    demo = sub.add_parser("demo", help="show the running stack doing its main job")
    demo.add_argument("--timeout-s", type=float, default=60.0)
    demo.set_defaults(handler=_demo)

    _add_backfill(sub)  # memq backfill
    from memq.dump import add_commands as add_dump_commands

    add_dump_commands(sub)  # memq export, memq import
    from memq.reindex import add_commands as add_reindex_commands

    add_reindex_commands(sub)  # memq reindex
    from memq.reprocess import add_commands as add_reprocess_commands

    add_reprocess_commands(sub)  # memq reprocess
    from memq.jobs import add_commands as add_jobs_commands

    add_jobs_commands(sub)  # memq jobs
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings()
    except ValidationError as exc:
        print(f"memq: invalid settings: {_first_error(exc)}", file=sys.stderr)
        return 2
    configure_logging(settings.log, args.command)
    handler: Handler = args.handler
    try:
        return handler(settings, args)
    except MemqError as exc:
        print(f"memq: {exc.reason}", file=sys.stderr)
        return 1


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = "_".join(str(part) for part in error["loc"]).upper()
    return f"MEMQ_{where}: {error['msg']} ({exc.error_count()} error(s))"


if __name__ == "__main__":
    sys.exit(main())
