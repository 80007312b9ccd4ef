"""Process logging: one line per event, carrying the request, job, tenant, phase and batch it
belongs to.

Every memq process calls ``configure_logging`` once at start (``memq.cli`` does, before any
subcommand runs). Lines are JSON (python-json-logger) when stderr is not a terminal, as in a log
file or a container, and ``key=value`` text on a terminal; either way the time is ISO 8601 in
UTC with its offset, and a JSON line carries no terminal colour codes (uvicorn puts a coloured
copy of some messages on its records; it is left out). Code that works for a request or a job
wraps the work in ``log_context(request_id=..., job_id=..., tenant=...)``; every line logged
inside it, by memq or by a library, carries those fields. With tracing on
(``pipeline.telemetry``), a line logged inside a span also carries its ``trace_id`` and
``span_id``.
"""

from __future__ import annotations

import contextvars
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from pipeline.config import LogConfig

CONTEXT_FIELDS = ("request_id", "job_id", "tenant", "phase", "batch", "trace_id", "span_id")
# uvicorn's coloured copy of its message (an ``extra`` of its records): never written out
COLOURED_EXTRAS = ("color_message",)
# an ANSI escape sequence (CSI, such as a colour, or a two-character one), or a lone ESC
ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[0-~])?")
# Client libraries that log every request at INFO: quiet unless the level is DEBUG.
CHATTY_LOGGERS = (
    "elastic_transport",
    "httpx",
    "httpx2",  # the openai SDK's HTTP client
    "httpcore",
    "httpcore2",
    "urllib3",
    "openai",
)
_CONTEXT: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("memq_log_context")


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Add ``fields`` (those not None) to every line logged inside the block, in this thread or
    task; nested blocks add to the outer one."""
    current = _CONTEXT.get({})
    token = _CONTEXT.set({**current, **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


class ContextFilter(logging.Filter):
    """Puts the current ``log_context`` fields on each record (an explicit ``extra`` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _CONTEXT.get({}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


# path segments that name a person: the segment after one of these is never written out
_PERSON_SEGMENTS = frozenset({"users", "user"})


def redacted_path(path: str) -> str:
    """``path`` as a log line may show it: no query string (it holds user ids, filters and
    search text), and no user id in the path (``/v1/users/…``)."""
    bare, query = path.partition("?")[::2]
    parts = bare.split("/")
    for i in range(1, len(parts)):
        if parts[i - 1] in _PERSON_SEGMENTS and parts[i]:
            parts[i] = "…"
    return "/".join(parts) + ("?…" if query else "")


class AccessRedaction(logging.Filter):
    """Redacts the path of uvicorn's access lines (``redacted_path``): a log file holds no
    user id and no text a tenant sent."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            record.args = (*args[:2], redacted_path(str(args[2])), *args[3:])
        return True


def iso_time(created: float) -> str:
    """A record's time as ISO 8601 in UTC, to the millisecond: 2026-12-03T16:20:01.123+00:00."""
    return datetime.fromtimestamp(created, tz=UTC).isoformat(timespec="milliseconds")


def without_ansi(text: str) -> str:
    """``text`` without its ANSI escape sequences (colours, cursor moves)."""
    return ANSI_ESCAPE.sub("", text) if "\x1b" in text else text


class JsonLineFormatter(JsonFormatter):
    """One JSON object per line: ``time`` (``iso_time``), ``level``, ``logger``, ``message``,
    the process kind, then the context fields and any ``extra``; no string in it carries an
    ANSI escape."""

    def __init__(self, process: str) -> None:
        super().__init__(
            "{asctime}{levelname}{name}{message}",
            style="{",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            static_fields={"process_kind": process},
            reserved_attrs=[*RESERVED_ATTRS, *COLOURED_EXTRAS],
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return iso_time(record.created)

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        return {k: without_ansi(v) if isinstance(v, str) else v for k, v in log_data.items()}


class TextFormatter(logging.Formatter):
    """``time level logger message key=value…`` for a person at a terminal."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return iso_time(record.created)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(
            f"{key}={getattr(record, key)}" for key in CONTEXT_FIELDS if hasattr(record, key)
        )
        return f"{line} {fields}" if fields else line


def json_lines(config: LogConfig) -> bool:
    """Whether ``config`` asks for JSON lines (``auto``: when stderr is not a terminal)."""
    return config.format == "json" or (config.format == "auto" and not sys.stderr.isatty())


def configure_logging(config: LogConfig, process: str) -> None:
    """Send every logger's lines, and Python's warnings, to stderr, formatted per ``config``;
    replaces what was set."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    handler.addFilter(AccessRedaction())
    if json_lines(config):
        handler.setFormatter(JsonLineFormatter(process))
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.level)
    logging.captureWarnings(True)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel("DEBUG" if config.level == "DEBUG" else "WARNING")
