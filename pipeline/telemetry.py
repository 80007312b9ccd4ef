"""OpenTelemetry traces, off unless an OTLP endpoint is configured.

``configure_tracing`` installs the SDK's tracer provider with an OTLP/HTTP exporter when
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set; the exporter
reads the other standard ``OTEL_*`` variables itself (headers, timeout, compression), and the
batch processor ``OTEL_BSP_*``. Without an endpoint nothing is installed and every tracer stays
OpenTelemetry's no-op. The Elasticsearch client emits its own spans through the global
provider, so once this ran, each request to Elasticsearch is a span under whatever span is
current (an API request, a task). The API and the workers add their frameworks'
instrumentation on top (``api.app.instrument``, ``workers.app.connect_tracing``).
"""

from __future__ import annotations

import logging

from pipeline.config import Settings

log = logging.getLogger("memq.telemetry")


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
    log.info("tracing on: %s exports to %s", service, settings.otel_endpoint)
    return True
