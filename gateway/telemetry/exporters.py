"""Where spans go, from the standard ``OTEL_*`` variables.

* ``OTEL_SDK_DISABLED=true``: nowhere.
* ``OTEL_TRACES_EXPORTER``: a comma-separated list of ``otlp`` (the default), ``console``
  and ``none``.
* ``otlp`` exports only when an endpoint is set (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_ENDPOINT``), over ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` or
  ``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf`` (the default) or ``grpc``. Any other
  value stops the start with :class:`TelemetryConfigError`: a protocol the operator asked
  for is never swapped silently for another.
* ``console`` writes each finished span as one JSON line to standard output, apart from
  the log lines (standard error).

The exporter reads its own settings (headers, timeout, compression, certificates) from
the same variables.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # the SDK loads only where spans go somewhere
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

PROTOCOLS = ("http/protobuf", "grpc")


class TelemetryConfigError(ValueError):
    """The ``OTEL_*`` variables ask for something this gateway cannot do."""


def tracer_provider(
    exporter: SpanExporter | None = None,
    environ: Mapping[str, str] | None = None,
    console: IO[str] | None = None,
) -> TracerProvider | None:
    """The app's provider, ``None`` where spans go nowhere (then the SDK is not even
    loaded). ``exporter``: export there (synchronously, for tests) instead of where the
    environment says."""
    env = os.environ if environ is None else environ
    if exporter is None and env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporters = [exporter] if exporter is not None else exporters_from_env(env, console)
    if not exporters:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    service = env.get("OTEL_SERVICE_NAME", "shunter")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    for each in exporters:
        processor = SimpleSpanProcessor if exporter is not None else BatchSpanProcessor
        provider.add_span_processor(processor(each))
    return provider


def exporters_from_env(
    env: Mapping[str, str], console: IO[str] | None = None
) -> list[SpanExporter]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (empty: spans go nowhere)."""
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    found: list[SpanExporter] = []
    for name in filter(None, names):
        if name == "none":
            continue
        if name == "console":
            found.append(console_exporter(console))
        elif name == "otlp":
            otlp = otlp_exporter(env)
            if otlp is not None:
                found.append(otlp)
        else:
            raise TelemetryConfigError(
                f"OTEL_TRACES_EXPORTER={name!r} is not supported; use otlp, console or none."
            )
    return found


def otlp_exporter(env: Mapping[str, str]) -> SpanExporter | None:
    """The OTLP exporter over the configured protocol; ``None`` without an endpoint."""
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint:
        return None
    variable = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    protocol = env.get(variable, "").strip().lower()
    if not protocol:
        variable = "OTEL_EXPORTER_OTLP_PROTOCOL"
        protocol = env.get(variable, "http/protobuf").strip().lower() or "http/protobuf"
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HTTPExporter,
        )

        return HTTPExporter()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GRPCExporter,
            )
        except ImportError as exc:  # a trimmed install
            raise TelemetryConfigError(
                f"{variable}=grpc needs the package opentelemetry-exporter-otlp-proto-grpc."
            ) from exc
        return GRPCExporter()
    raise TelemetryConfigError(
        f"{variable}={protocol!r} is not supported; use one of {', '.join(PROTOCOLS)} "
        "(or leave it unset for http/protobuf)."
    )


def console_exporter(out: IO[str] | None = None) -> SpanExporter:
    """Spans as one compact JSON object per line on ``out`` (standard output)."""
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    return ConsoleSpanExporter(out=out or sys.stdout, formatter=_one_line)


def _one_line(span: ReadableSpan) -> str:
    text: str = span.to_json(indent=None)
    return text + "\n"
