//! MCP over stdio: one JSON-RPC message per line.
//!
//! rmcp's own stdio transport drops lines that are not JSON without a word; this one answers
//! them as JSON-RPC 2.0 asks (`-32700 Parse error`, `-32600 Invalid Request`,
//! `-32602 Invalid params`, with the request's id when it can be read) and reads on.

use crate::handler::Handler;
use crate::state::Server;
use crate::{Error, watch};
use bytes::Bytes;
use futures::StreamExt;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestMethod, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, GetMeta,
    JsonObject, JsonRpcRequest, JsonRpcVersion2_0, MetaObject, Request, RequestId,
    RequestMetaObject, ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use serde::Deserialize;
use serde_json::{Value, json};
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, FramedRead};

/// The longest message read; a longer line is refused and skipped.
const MAX_LINE: usize = 64 << 20;

impl Server {
    /// Serves one client on stdin and stdout until stdin closes.
    pub async fn serve_stdio(self) -> Result<(), Error> {
        let (read, write) = rmcp::transport::stdio_pipes();
        self.serve_io(read, write).await
    }

    /// Serves one client on a pair of byte streams, one JSON-RPC message per line.
    pub async fn serve_io<R, W>(self, read: R, write: W) -> Result<(), Error>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let watcher = watch::spawn(self.shared.clone());
        let handler = Handler::new(self.shared.clone());
        let session = handler.session.clone();
        let served = match rmcp::serve_server(handler, LineTransport::new(read, write)).await {
            Ok(running) => running
                .waiting()
                .await
                .map(|_| ())
                .map_err(|e| Error::Stopped(e.to_string())),
            Err(e) => Err(Error::Initialize(e.to_string())),
        };
        if let Some(w) = watcher {
            w.abort();
        }
        // The connection is over: so is its session (a Docker shell, say).
        session.close().await;
        served
    }
}

pub(crate) struct LineTransport<R, W> {
    lines: FramedRead<R, AnyDelimiterCodec>,
    out: Arc<Mutex<W>>,
    /// rmcp ends the session on anything but a request before `initialize`; until then,
    /// stray notifications and responses are dropped here.
    initialized: bool,
}

impl<R: AsyncRead, W> LineTransport<R, W> {
    pub(crate) fn new(read: R, write: W) -> Self {
        let codec = AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), Vec::new(), MAX_LINE);
        Self {
            lines: FramedRead::new(read, codec),
            out: Arc::new(Mutex::new(write)),
            initialized: false,
        }
    }
}

async fn write_line<W: AsyncWrite + Unpin>(out: &Mutex<W>, mut line: Vec<u8>) -> io::Result<()> {
    line.push(b'\n');
    let mut out = out.lock().await;
    out.write_all(&line).await?;
    out.flush().await
}

impl<R, W> LineTransport<R, W>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// Sends a refusal from its own task, so a `receive` dropped midway loses nothing.
    fn refuse(&self, reply: Value) {
        let out = self.out.clone();
        tokio::spawn(async move {
            if let Err(e) = write_line(&out, reply.to_string().into_bytes()).await {
                tracing::debug!("cannot answer a malformed message: {e}");
            }
        });
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        let out = self.out.clone();
        async move {
            let line = serde_json::to_vec(&item).map_err(io::Error::other)?;
            write_line(&out, line).await
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let line: Bytes = match self.lines.next().await? {
                Ok(line) => line,
                Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => {
                    let message =
                        format!("Invalid Request: a message is longer than {MAX_LINE} bytes");
                    self.refuse(error_reply(-32600, &message, Value::Null));
                    continue;
                }
                Err(AnyDelimiterCodecError::Io(e)) => {
                    tracing::error!("cannot read stdin: {e}");
                    return None;
                }
            };
            let line = line.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&line);
            if line.trim_ascii().is_empty() {
                continue;
            }
            match read(line) {
                Ok(message) if self.initialized => return Some(message),
                Ok(ClientJsonRpcMessage::Request(request)) => {
                    // `initialize`, or a request of the inline lifecycle (2026-07-28), which
                    // names its protocol version itself, opens the session.
                    let inline = request.request.get_meta().protocol_version().is_some();
                    if inline || matches!(request.request, ClientRequest::InitializeRequest(_)) {
                        self.initialized = true;
                    }
                    return Some(ClientJsonRpcMessage::Request(request));
                }
                Ok(_) => tracing::debug!("ignoring a notification or response before initialize"),
                Err(Some(reply)) => self.refuse(reply),
                Err(None) => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        self.out.lock().await.flush().await
    }
}

/// One line as a message, or the answer to send instead (`None`: stay silent).
fn read(line: &[u8]) -> Result<ClientJsonRpcMessage, Option<Value>> {
    if let Ok(call) = serde_json::from_slice::<PlainCall>(line) {
        return Ok(call.into_message());
    }
    match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
        Ok(ClientJsonRpcMessage::Request(request)) if is_misshapen(&request.request) => {
            Err(Some(misshapen_reply(&request.request, request.id)))
        }
        Ok(message) => Ok(message),
        Err(e) => Err(refusal(line, &e)),
    }
}

/// A `tools/call` of the usual shape, read in one pass. rmcp reads any message by trying
/// each kind and each request in turn over a buffered copy, about a sixth of a call's cost
/// on this path; a line with anything more (another field, `inputResponses`) takes that way.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainCall {
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    method: CallToolRequestMethod,
    params: PlainCallParams,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainCallParams {
    name: String,
    #[serde(default)]
    arguments: Option<JsonObject>,
    #[serde(rename = "_meta", default)]
    meta: Option<JsonObject>,
}

impl PlainCall {
    /// The message rmcp's own reading makes of the same line: `_meta` in the extensions.
    fn into_message(self) -> ClientJsonRpcMessage {
        let mut params = CallToolRequestParams::new(self.params.name);
        params.arguments = self.params.arguments;
        let mut request = Request::new(params);
        request.method = self.method;
        if let Some(meta) = self.params.meta {
            request
                .extensions
                .insert(RequestMetaObject(MetaObject(meta)));
        }
        ClientJsonRpcMessage::Request(JsonRpcRequest {
            jsonrpc: self.jsonrpc,
            id: self.id,
            request: ClientRequest::CallToolRequest(request),
        })
    }
}

/// Methods of MCP that rmcp reads as a custom request when their params do not fit.
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
];

/// A request of a known method whose params do not fit it: rmcp would answer "method not
/// found", which misleads; it is "invalid params".
fn is_misshapen(request: &ClientRequest) -> bool {
    matches!(request, ClientRequest::CustomRequest(c) if KNOWN_METHODS.contains(&c.method.as_str()))
}

fn misshapen_reply(request: &ClientRequest, id: RequestId) -> Value {
    let ClientRequest::CustomRequest(custom) = request else {
        return error_reply(-32602, "Invalid params", id.into_json_value());
    };
    let params = custom.params.clone().unwrap_or(Value::Null);
    let why = match custom.method.as_str() {
        "tools/call" => serde_json::from_value::<CallToolRequestParams>(params)
            .err()
            .map(|e| format!(": {e}")),
        _ => None,
    };
    let message = format!(
        "Invalid params for `{}`{}",
        custom.method,
        why.unwrap_or_default()
    );
    error_reply(-32602, &message, id.into_json_value())
}

fn error_reply(code: i32, message: &str, id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The answer to a line that is not a message warden understands; `None` when JSON-RPC says
/// to stay silent (a notification, or a response to a request of ours).
fn refusal(line: &[u8], e: &serde_json::Error) -> Option<Value> {
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        tracing::debug!("a line that is not JSON: {e}");
        return Some(error_reply(
            -32700,
            &format!("Parse error: {e}"),
            Value::Null,
        ));
    };
    let Some(object) = value.as_object() else {
        let message = "Invalid Request: a message is one JSON-RPC 2.0 object";
        return Some(error_reply(-32600, message, Value::Null));
    };
    let id = object
        .get("id")
        .filter(|id| id.is_string() || id.is_i64())
        .cloned();
    let version_ok = object.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
    match (object.get("method").and_then(Value::as_str), id) {
        (Some(method), Some(id)) if version_ok => Some(error_reply(
            -32602,
            &format!("Invalid params for `{method}`: {e}"),
            id,
        )),
        (Some(_), None) if !object.contains_key("id") => {
            tracing::debug!("ignoring a malformed notification: {e}");
            None
        }
        (None, _) if object.contains_key("result") || object.contains_key("error") => {
            tracing::debug!("ignoring a malformed response: {e}");
            None
        }
        (_, id) => Some(error_reply(
            -32600,
            &format!("Invalid Request: not a JSON-RPC 2.0 request ({e})"),
            id.unwrap_or(Value::Null),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::GetExtensions;

    fn answer(line: &str) -> Option<Value> {
        read(line.as_bytes()).expect_err("not a message")
    }

    /// The one-pass reading of a plain `tools/call` makes what rmcp's reading makes, `_meta`
    /// included; a line with more in it is left to rmcp.
    #[test]
    fn a_plain_call_reads_as_rmcp_reads_it() {
        let lines = [
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"noop"}}"#,
            r#"{"params":{"_meta":{"progressToken":7},"name":"add","arguments":null},"method":"tools/call","id":4,"jsonrpc":"2.0"}"#,
        ];
        for line in lines {
            let plain = serde_json::from_slice::<PlainCall>(line.as_bytes())
                .unwrap()
                .into_message();
            let rmcp = serde_json::from_str::<ClientJsonRpcMessage>(line).unwrap();
            assert_eq!(
                serde_json::to_value(&plain).unwrap(),
                serde_json::to_value(&rmcp).unwrap(),
                "{line}"
            );
            let (ClientJsonRpcMessage::Request(a), ClientJsonRpcMessage::Request(b)) =
                (plain, rmcp)
            else {
                panic!("not requests: {line}");
            };
            assert_eq!(
                a.request.extensions().get::<RequestMetaObject>(),
                b.request.extensions().get::<RequestMetaObject>(),
                "{line}"
            );
        }
        for more in [
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","requestState":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"add"},"extra":1}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#,
        ] {
            assert!(serde_json::from_str::<PlainCall>(more).is_err(), "{more}");
            assert!(read(more.as_bytes()).is_ok(), "rmcp reads it: {more}");
        }
    }

    #[test]
    fn malformed_lines_get_json_rpc_errors() {
        let garbage = answer("this is not json").unwrap();
        assert_eq!(garbage["error"]["code"], -32700);
        assert_eq!(garbage["id"], Value::Null);
        let array = answer("[1, 2]").unwrap();
        assert_eq!(array["error"]["code"], -32600);
        let params = answer(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}"#);
        let params = params.unwrap();
        assert_eq!(params["error"]["code"], -32602);
        assert_eq!(params["id"], 7);
        assert!(
            params["error"]["message"]
                .as_str()
                .unwrap()
                .contains("name")
        );
        let version = answer(r#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#).unwrap();
        assert_eq!(version["error"]["code"], -32600);
        assert_eq!(version["id"], "a");
        let unknown = r#"{"jsonrpc":"2.0","id":1,"method":"no/such/method"}"#;
        assert!(
            read(unknown.as_bytes()).is_ok(),
            "rmcp answers it: method not found"
        );
    }

    #[test]
    fn malformed_notifications_and_responses_are_not_answered() {
        for line in [
            r#"{"jsonrpc":"1.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":[]}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":[]}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":"nope"}"#,
        ] {
            assert!(!matches!(read(line.as_bytes()), Err(Some(_))), "{line}");
        }
    }
}
