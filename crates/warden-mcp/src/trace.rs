//! An MCP request as a server span, under OpenTelemetry's MCP conventions: named
//! `{mcp.method.name} {target}`, continuing the client's trace when `params._meta` carries
//! its `traceparent`. The call's own `execute_tool` span is its child.

use rmcp::model::{JsonObject, RequestId};
use tracing::Span;
use tracing::field::Empty;

/// Where a request came from: its id, and over HTTP its session.
pub(crate) struct Incoming<'a> {
    pub(crate) method: &'static str,
    /// The tool a `tools/call` names.
    pub(crate) tool: Option<&'a str>,
    pub(crate) id: &'a RequestId,
    /// The `Mcp-Session-Id` of an HTTP request; `None` over stdio.
    pub(crate) session: Option<&'a str>,
    pub(crate) http: bool,
    pub(crate) meta: Option<&'a JsonObject>,
}

/// The request's span; a disabled one when nothing exports.
pub(crate) fn request_span(request: &Incoming<'_>) -> Span {
    let span = tracing::info_span!(
        "mcp.request",
        otel.name = %format_args!(
            "{}{}{}",
            request.method,
            if request.tool.is_some() { " " } else { "" },
            request.tool.unwrap_or_default()
        ),
        otel.kind = "server",
        otel.status_code = Empty,
        mcp.method.name = request.method,
        mcp.session.id = request.session,
        jsonrpc.request.id = %request.id,
        gen_ai.tool.name = request.tool,
        gen_ai.operation.name = request.tool.map(|_| "execute_tool"),
        network.transport = if request.http { "tcp" } else { "pipe" },
        error.type = Empty,
    );
    warden_telemetry::continue_trace(&span, request.meta);
    span
}

/// Marks the span of a request that ended in error: `tool_error` for a tool's error result,
/// as the conventions name it, or the JSON-RPC error's kind.
pub(crate) fn failed(span: &Span, kind: &str) {
    span.record("error.type", kind);
    span.record("otel.status_code", "ERROR");
}
