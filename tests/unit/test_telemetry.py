"""Tracing is off unless OpenTelemetry's own endpoint variable is set (the traces themselves are
tested end to end in tests/integration/test_tracing.py)."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from pipeline.config import Settings
from pipeline.telemetry import configure_tracing


@pytest.fixture(autouse=True)
def _no_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


def test_without_an_endpoint_nothing_is_installed() -> None:
    before = trace.get_tracer_provider()

    assert configure_tracing(Settings(), "memq-test") is False

    assert trace.get_tracer_provider() is before


@pytest.mark.parametrize(
    "name", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
)
def test_the_standard_variables_turn_it_on(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "http://127.0.0.1:4318")

    assert Settings().otel_endpoint == "http://127.0.0.1:4318"
