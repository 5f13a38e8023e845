"""The one module that imports OpenTelemetry (the ``[otel]`` extra); ``agents.tracing`` loads it only when
an ``OTEL_*`` variable turns tracing on, so a run without them never imports the SDK.

Configured only through the standard variables: the exporter (``OTEL_TRACES_EXPORTER``: ``otlp``, the default,
over HTTP/protobuf, or ``console``), its endpoint and headers (``OTEL_EXPORTER_OTLP_*``), the service name and
resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``; ``baton`` when unset) and the batch processor
(``OTEL_BSP_*``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract, inject
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Status, StatusCode

SCOPE = "baton"
FLUSH_MS = 5_000  # a worker process's last flush waits this long at most for a collector that is down


class ExporterError(ValueError):
    """An ``OTEL_*`` setting baton cannot honour (an exporter or protocol it does not ship)."""


def _exporter(env: Mapping[str, str]) -> SpanExporter:
    names = [n.strip().lower() for n in (env.get("OTEL_TRACES_EXPORTER") or "otlp").split(",") if n.strip()]
    if names == ["console"]:
        return ConsoleSpanExporter()
    if names != ["otlp"]:
        raise ExporterError(f"OTEL_TRACES_EXPORTER={env.get('OTEL_TRACES_EXPORTER')!r}: baton ships the otlp "
                            "(HTTP/protobuf) and console exporters; set it to otlp or console")
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf")
    if protocol != "http/protobuf":
        raise ExporterError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: baton's [otel] extra exports over "
                            "http/protobuf; set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and the collector's HTTP "
                            "port (4318; Phoenix: 6006)")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout and compression from the OTEL_EXPORTER_OTLP_* variables


def provider_from_env(env: Mapping[str, str] | None = None) -> TracerProvider:
    env = os.environ if env is None else env
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or SCOPE})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(_exporter(env)))
    return provider


class Span:
    """A live span: what baton's code sets on it (attributes, an error) and nothing else."""

    def __init__(self, span: trace.Span):
        self._span = span

    def set(self, attributes: Mapping[str, Any]) -> None:
        self._span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def fail(self, reason: str) -> None:
        self._span.set_status(Status(StatusCode.ERROR, reason))


class Backend:
    """Spans on one tracer provider (the environment's, or a test's own)."""

    def __init__(self, provider: TracerProvider):
        self.provider = provider
        self._tracer = provider.get_tracer(SCOPE)

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any], parent: Mapping[str, str] | None) -> Iterator[Span]:
        context = extract(dict(parent)) if parent else None
        with self._tracer.start_as_current_span(name, context=context) as span:
            handle = Span(span)
            handle.set(attributes)
            yield handle

    def mark(self, name: str, attributes: Mapping[str, Any], parent: Mapping[str, str] | None) -> dict[str, str]:
        """A span that ends at once, for what outlives any process (a run, an iteration): its context, to
        keep on disk and hang later spans from."""
        with self.span(name, attributes, parent):
            return self.carrier()

    @staticmethod
    def carrier() -> dict[str, str]:
        headers: dict[str, str] = {}
        inject(headers)
        return headers

    @staticmethod
    @contextmanager
    def attached(carrier: Mapping[str, str]) -> Iterator[None]:
        token = otel_context.attach(extract(dict(carrier)))
        try:
            yield
        finally:
            otel_context.detach(token)

    def flush(self) -> None:
        self.provider.force_flush(FLUSH_MS)
