"""The log line formats (``pipeline.logs``) and the span ids tracing adds to them
(``pipeline.telemetry.SpanIds``): each test logs through a handler of its own, built like the
one ``configure_logging`` installs, and reads what it wrote."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from pipeline.config import LogConfig
from pipeline.logs import (
    ContextFilter,
    JsonLineFormatter,
    TextFormatter,
    json_lines,
    log_context,
    redacted_path,
    without_ansi,
)
from pipeline.telemetry import SpanIds

ISO_WITH_OFFSET = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00")


class Captured:
    """A logger whose lines go to a string, through ``formatter`` and memq's filters."""

    def __init__(self, formatter: logging.Formatter, *filters: logging.Filter) -> None:
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(formatter)
        for item in (ContextFilter(), *filters):
            self.handler.addFilter(item)
        self.logger = logging.getLogger(f"memq.test.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self.handler)

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text.splitlines()]

    def close(self) -> None:
        self.logger.removeHandler(self.handler)


@pytest.fixture
def as_json() -> Iterator[Captured]:
    captured = Captured(JsonLineFormatter("api"))
    yield captured
    captured.close()


def test_a_json_line_has_an_iso_time_in_utc_with_its_offset(as_json: Captured) -> None:
    before = datetime.now().astimezone()

    as_json.logger.warning("job %s failed", "j1")

    (line,) = as_json.lines()
    assert ISO_WITH_OFFSET.fullmatch(line["time"]), line
    logged = datetime.fromisoformat(line["time"])
    assert abs((logged - before).total_seconds()) < 5
    assert line["level"] == "WARNING"
    assert line["message"] == "job j1 failed"
    assert line["process_kind"] == "api"


def test_a_json_line_carries_no_colour_codes(as_json: Captured) -> None:
    # as uvicorn logs: a plain message, and its coloured copy as an extra
    as_json.logger.info(
        "Started server process [%d]",
        42,
        extra={"color_message": "Started server process [\x1b[36m%d\x1b[0m]"},
    )
    as_json.logger.info("\x1b[1mbold\x1b[0m and \x1b[31mred\x1b[0m", extra={"note": "\x1b[2Kcut"})

    first, second = as_json.lines()
    assert "color_message" not in first
    assert first["message"] == "Started server process [42]"
    assert second["message"] == "bold and red"
    assert second["note"] == "cut"
    assert "\x1b" not in as_json.text and "\\u001b" not in as_json.text


def test_a_json_line_carries_the_context_it_was_logged_in(as_json: Captured) -> None:
    with log_context(request_id="r-1", tenant="acme"):
        as_json.logger.info("accepted")
        with log_context(job_id="j-1", phase=None):
            as_json.logger.info("queued", extra={"tenant": "given"})
    as_json.logger.info("after")

    accepted, queued, after = as_json.lines()
    assert (accepted["request_id"], accepted["tenant"]) == ("r-1", "acme")
    assert "job_id" not in accepted and "phase" not in accepted
    assert (queued["request_id"], queued["job_id"]) == ("r-1", "j-1")
    assert queued["tenant"] == "given"  # an explicit extra wins over the context
    assert "request_id" not in after


def test_a_text_line_has_the_iso_time_and_the_context_as_key_value() -> None:
    captured = Captured(TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    try:
        with log_context(request_id="r-2", job_id="j-2"):
            captured.logger.info("done")
    finally:
        captured.close()

    time, level, _name, message, *fields = captured.text.split()
    assert ISO_WITH_OFFSET.fullmatch(time), captured.text
    assert (level, message) == ("INFO", "done")
    assert fields == ["request_id=r-2", "job_id=j-2"]


def test_ansi_sequences_are_removed_and_other_text_is_kept() -> None:
    assert without_ansi("\x1b[1;32mok\x1b[0m: 3 [x] \x1b7saved") == "ok: 3 [x] saved"
    assert without_ansi("a lone \x1b") == "a lone "
    assert without_ansi("plain [36m text") == "plain [36m text"


def test_the_format_follows_the_config() -> None:
    assert json_lines(LogConfig(format="json")) is True
    assert json_lines(LogConfig(format="text")) is False


def test_a_line_logged_inside_a_span_carries_its_trace_and_span_ids() -> None:
    captured = Captured(JsonLineFormatter("worker"), SpanIds())
    # a provider of the test's own: the process's global one stays as it was
    tracer = TracerProvider().get_tracer("memq-test")
    try:
        captured.logger.info("outside")
        with tracer.start_as_current_span("phase") as span:
            captured.logger.info("inside")
    finally:
        captured.close()

    outside, inside = captured.lines()
    assert "trace_id" not in outside and "span_id" not in outside
    context = span.get_span_context()
    assert inside["trace_id"] == trace.format_trace_id(context.trace_id)
    assert inside["span_id"] == trace.format_span_id(context.span_id)
    assert re.fullmatch(r"[0-9a-f]{32}", inside["trace_id"])


def test_access_paths_lose_their_query_and_user_ids() -> None:
    assert redacted_path("/v1/memories?user_id=alice&cursor=x") == "/v1/memories?…"
    assert redacted_path("/v1/users/alice") == "/v1/users/…"
    assert redacted_path("/v2/entities/user/alice/") == "/v2/entities/user/…/"
    assert redacted_path("/v1/memories/1234/history") == "/v1/memories/1234/history"
