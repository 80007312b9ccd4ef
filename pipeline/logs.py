"""Process logging: one line per event, carrying the job, tenant, phase and batch it belongs to.

Every memq process calls ``configure_logging`` once at start (``memq.cli`` does, before any
subcommand runs). Lines are JSON (python-json-logger) when stderr is not a terminal, as in a log
file or a container, and ``key=value`` text on a terminal. Code that works for a job wraps the
work in ``log_context(job_id=..., tenant=...)``; every line logged inside it, by memq or by a
library, carries those fields.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from pythonjsonlogger.json import JsonFormatter

from pipeline.config import LogConfig

CONTEXT_FIELDS = ("job_id", "tenant", "phase", "batch")
# Client libraries that log every request at INFO: quiet unless the level is DEBUG.
CHATTY_LOGGERS = ("elastic_transport", "httpx", "httpcore", "urllib3", "openai")
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


class TextFormatter(logging.Formatter):
    """``time level logger message key=value…`` for a person at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(
            f"{key}={getattr(record, key)}" for key in CONTEXT_FIELDS if hasattr(record, key)
        )
        return f"{line} {fields}" if fields else line


def configure_logging(config: LogConfig, process: str) -> None:
    """Send every logger's lines to stderr, formatted per ``config``; replaces what was set."""
    as_json = config.format == "json" or (config.format == "auto" and not sys.stderr.isatty())
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    if as_json:
        handler.setFormatter(
            JsonFormatter(
                "{asctime}{levelname}{name}{message}",
                style="{",
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
                static_fields={"process_kind": process},
            )
        )
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.level)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel("DEBUG" if config.level == "DEBUG" else "WARNING")
