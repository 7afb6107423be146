"""The `tools/call` request, carrying the caller's trace: when the application uses
OpenTelemetry and a span is current, its W3C trace context goes in `params._meta`
(`traceparent`, `tracestate`), and warden's spans for the call continue that trace (when warden
exports: docs/telemetry.md). Without OpenTelemetry installed, or without a current span, the
request is the plain one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    from opentelemetry import propagate, trace
except ImportError:  # OpenTelemetry is the application's choice, not a dependency
    propagate = None
    trace = None


def call_params(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The params of a `tools/call` of `name`."""
    params: dict[str, Any] = {"name": name, "arguments": dict(arguments)}
    meta = _trace_context()
    if meta:
        params["_meta"] = meta
    return params


def _trace_context() -> dict[str, str]:
    # Checked before injecting: most calls run outside any span, and injecting costs more.
    if trace is None or propagate is None:
        return {}
    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")}
