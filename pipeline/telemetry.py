"""OpenTelemetry traces, off unless an OTLP endpoint is configured.

``configure_tracing`` installs the SDK's tracer provider with an OTLP/HTTP exporter when
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set; the exporter
reads the other standard ``OTEL_*`` variables itself (headers, timeout, compression), and the
batch processor ``OTEL_BSP_*``. Without an endpoint nothing is installed and every tracer stays
OpenTelemetry's no-op. The Elasticsearch client emits its own spans through the global
provider, so once this ran, each request to Elasticsearch is a span under whatever span is
current (an API request, a task). The API and the workers add their frameworks'
instrumentation on top (``api.app.instrument``, ``workers.app.connect_tracing``). Once on, each
log line written inside a span carries the span's ``trace_id`` and ``span_id`` (``SpanIds``),
so a trace leads to its log lines and back.
"""

from __future__ import annotations

import logging

from pipeline.config import Settings

log = logging.getLogger("memq.telemetry")


class SpanIds(logging.Filter):
    """Puts the current span's ``trace_id`` and ``span_id`` (hex, as OTLP viewers show them)
    on each record logged inside one; outside a span, nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        if context.is_valid and not hasattr(record, "trace_id"):
            record.trace_id = trace.format_trace_id(context.trace_id)
            record.span_id = trace.format_span_id(context.span_id)
        return True


def log_span_ids() -> None:
    """Have the process's log handlers (``pipeline.logs.configure_logging``'s) mark each line
    with the span it was logged in; once per handler however often it is called."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, SpanIds) for f in handler.filters):
            handler.addFilter(SpanIds())


def configure_tracing(settings: Settings, service: str) -> bool:
    """Trace this process as ``service`` (the resource's ``service.name``, unless
    ``OTEL_SERVICE_NAME`` says otherwise) when an OTLP endpoint is configured. Returns whether
    tracing is on. Call once per process, after any fork: the batch processor's export thread
    does not survive one."""
    if settings.otel_endpoint is None:
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # ours first, then the environment's (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) on top
    resource = Resource.create({"service.name": service}).merge(OTELResourceDetector().detect())
    provider = TracerProvider(resource=resource)  # flushes its spans at exit
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    log_span_ids()
    log.info("tracing on: %s exports to %s", service, settings.otel_endpoint)
    return True
