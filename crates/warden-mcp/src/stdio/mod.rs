//! MCP over stdio: one JSON-RPC message per line.
//!
//! rmcp's own stdio transport drops lines that are not JSON without a word; this one answers
//! them as JSON-RPC 2.0 asks (`-32700 Parse error`, `-32600 Invalid Request`,
//! `-32602 Invalid params`, with the request's id when it can be read) and reads on.
//!
//! Until the session is open, rmcp pulls each line through [`Transport::receive`], as it
//! does with its own transport. Once it is, the lines are read on a task of warden's own,
//! which hands rmcp what it does not answer itself through a channel: waking rmcp's service
//! loop for each line cost a few microseconds a call.
//!
//! Two paths answer the requests of an open session: rmcp's, and the [direct path](direct),
//! which answers a plain `tools/call` on that reader without rmcp's hand-offs between tasks.
//! [`direct::route`] decides which one a request takes; `WARDEN_MCP_DIRECT=0` switches the
//! direct path off, and rmcp answers everything. A `tools/call` that is plain is read in one
//! pass on either path ([`plain`]).
//!
//! Every `tools/call` the reader reads waits there for its place among the server's calls in
//! flight ([`crate::calls`]): while every place is taken the reader reads nothing more, and
//! the client's pipe holds the rest of its burst. When the server stops, the reader reads
//! on (refusing new calls) until the drain is over; then the input ends, as at the end of
//! stdin.

mod direct;
mod plain;

use crate::calls::Reserved;
use crate::handler::Handler;
use crate::jsonrpc::{self, error_reply};
use crate::state::Server;
use crate::{Error, watch};
use bytes::Bytes;
use direct::Direct;
use futures::StreamExt;
use plain::PlainCall;
use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorCode, GetMeta, ProtocolVersion,
    ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use serde_json::Value;
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Mutex, mpsc};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, FramedRead};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

/// The longest message read; a longer line is refused and skipped.
const MAX_LINE: usize = 64 << 20;

/// Messages read ahead for rmcp, beyond which the reader waits for it.
const READ_AHEAD: usize = 32;

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
        self.shared.warm();
        let watcher = watch::spawn(self.shared.clone());
        let handler = Handler::new(self.shared.clone());
        let session = handler.session.clone();
        let direct = Direct::when_on(&handler);
        // Once a stop's drain is over, the input ends: rmcp then sends what its calls answered
        // and returns, as at the end of stdin.
        let closing = CancellationToken::new();
        let _stop = AbortOnDropHandle::new(tokio::spawn({
            let (shared, closing) = (self.shared.clone(), closing.clone());
            async move {
                shared.calls.drain().await;
                closing.cancel();
            }
        }));
        let transport = LineTransport::new(read, write, &handler, direct.clone(), closing.clone());
        let served = match rmcp::serve_server(handler, transport).await {
            Ok(running) => running
                .waiting()
                .await
                .map(|_| ())
                .map_err(|e| Error::Stopped(e.to_string())),
            // Stopped before a client opened the session: nothing was asked, nothing is owed.
            Err(_) if closing.is_cancelled() => Ok(()),
            Err(e) => Err(Error::Initialize(e.to_string())),
        };
        if let Some(direct) = direct {
            direct.drain().await;
        }
        if let Some(w) = watcher {
            w.abort();
        }
        // The connection is over: so is its session (a Docker shell, say).
        session.close().await;
        served
    }
}

type Lines<R> = FramedRead<R, AnyDelimiterCodec>;

pub(crate) struct LineTransport<R, W> {
    input: Input<R>,
    out: Arc<Mutex<W>>,
    handler: Handler,
    /// The direct path, when it is switched on.
    direct: Option<Direct>,
    /// The session was opened by `initialize` with a version before 2026-07-28.
    legacy: bool,
    /// Set when the server has stopped: the input ends there.
    closing: CancellationToken,
}

/// Where rmcp's next message comes from.
enum Input<R> {
    /// The lines, read as rmcp asks for them: rmcp ends the session on anything but a request
    /// before `initialize`, so until then stray notifications and responses are dropped here.
    Opening(Lines<R>),
    /// The last message rmcp took opened the session: the reading moves to a task of its own
    /// when rmcp asks for the next one, which is once it has answered that one (a call sent
    /// right behind `initialize` is answered after it, as rmcp's own transport has it).
    Opened(Lines<R>),
    /// The session is open: the reader task's messages. Dropping them stops the reader.
    Open {
        messages: mpsc::Receiver<ClientJsonRpcMessage>,
        _reader: AbortOnDropHandle<()>,
    },
    /// Between the two, while the reader starts.
    Handing,
}

impl<R: AsyncRead, W> LineTransport<R, W> {
    fn new(
        read: R,
        write: W,
        handler: &Handler,
        direct: Option<Direct>,
        closing: CancellationToken,
    ) -> Self {
        let codec = AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), Vec::new(), MAX_LINE);
        Self {
            input: Input::Opening(FramedRead::new(read, codec)),
            out: Arc::new(Mutex::new(write)),
            handler: handler.clone(),
            direct,
            legacy: false,
            closing,
        }
    }
}

async fn write_line<W: AsyncWrite + Unpin>(out: &Mutex<W>, mut line: Vec<u8>) -> io::Result<()> {
    line.push(b'\n');
    let mut out = out.lock().await;
    out.write_all(&line).await?;
    out.flush().await
}

/// Sends a refusal from its own task, so a `receive` dropped midway loses nothing.
fn refuse<W: AsyncWrite + Unpin + Send + 'static>(out: &Arc<Mutex<W>>, reply: Value) {
    let out = out.clone();
    tokio::spawn(async move {
        if let Err(e) = write_line(&out, reply.to_string().into_bytes()).await {
            tracing::debug!("cannot answer a malformed message: {e}");
        }
    });
}

/// The next line that holds something, BOM and blank lines skipped; a line too long is
/// refused and skipped. `None` at the end of input, or when it cannot be read.
async fn next_line<R, W>(lines: &mut Lines<R>, out: &Arc<Mutex<W>>) -> Option<Bytes>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    loop {
        let line: Bytes = match lines.next().await? {
            Ok(line) => line,
            Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => {
                let message = format!("Invalid Request: a message is longer than {MAX_LINE} bytes");
                refuse(
                    out,
                    error_reply(ErrorCode::INVALID_REQUEST, &message, Value::Null),
                );
                continue;
            }
            Err(AnyDelimiterCodecError::Io(e)) => {
                tracing::error!("cannot read stdin: {e}");
                return None;
            }
        };
        let start = usize::from(line.starts_with(b"\xef\xbb\xbf")) * 3;
        let line = line.slice(start..);
        if !line.trim_ascii().is_empty() {
            return Some(line);
        }
    }
}

/// The open session's lines, read on a task of their own: the calls [`direct::route`] sends
/// the direct path answered by it, cancellations of those stopped, refusals written, and
/// everything else handed to rmcp in order.
struct Reader<R, W> {
    lines: Lines<R>,
    out: Arc<Mutex<W>>,
    handler: Handler,
    /// The direct path, when it is switched on.
    direct: Option<Direct>,
    /// The session was opened by `initialize` with a version before 2026-07-28.
    legacy: bool,
    to_rmcp: mpsc::Sender<ClientJsonRpcMessage>,
    closing: CancellationToken,
}

impl<R, W> Reader<R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// Reads until the input ends, the server has stopped, or rmcp stops listening.
    async fn run(mut self) {
        while let Some(line) = self
            .closing
            .run_until_cancelled(next_line(&mut self.lines, &self.out))
            .await
            .flatten()
        {
            if let Some((direct, call)) = direct::route(self.direct.as_ref(), self.legacy, &line) {
                // No place: the pipe holds the rest of the burst until a call has answered.
                let place = self.handler.shared.calls.wait_to_enter().await;
                direct.start(call, place, &self.out).await;
                continue;
            }
            let mut message = match read(&line) {
                Ok(ClientJsonRpcMessage::Notification(n)) => {
                    if let ClientNotification::CancelledNotification(c) = &n.notification
                        && let Some(id) = &c.params.request_id
                        && self.direct.as_ref().is_some_and(|d| d.cancel(id))
                    {
                        continue;
                    }
                    ClientJsonRpcMessage::Notification(n)
                }
                Ok(message) => message,
                Err(Some(reply)) => {
                    refuse(&self.out, reply);
                    continue;
                }
                Err(None) => continue,
            };
            // A call rmcp answers waits for its place here too, and carries it to the handler.
            if let ClientJsonRpcMessage::Request(request) = &mut message
                && let ClientRequest::CallToolRequest(call) = &mut request.request
                && let Ok(place) = self.handler.shared.calls.wait_to_enter().await
            {
                call.extensions.insert(Reserved::new(place));
            }
            if self.to_rmcp.send(message).await.is_err() {
                return;
            }
        }
    }
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// Moves the reading of lines to a task of its own.
    fn open(&mut self) {
        let Input::Opened(lines) = std::mem::replace(&mut self.input, Input::Handing) else {
            return;
        };
        let (to_rmcp, messages) = mpsc::channel(READ_AHEAD);
        let reader = Reader {
            lines,
            out: self.out.clone(),
            handler: self.handler.clone(),
            direct: self.direct.clone(),
            legacy: self.legacy,
            to_rmcp,
            closing: self.closing.clone(),
        };
        let reader = AbortOnDropHandle::new(tokio::spawn(reader.run()));
        self.input = Input::Open {
            messages,
            _reader: reader,
        };
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
        if matches!(self.input, Input::Opened(_)) {
            self.open();
        }
        loop {
            let lines = match &mut self.input {
                Input::Open { messages, .. } => return messages.recv().await,
                Input::Opening(lines) => lines,
                Input::Opened(_) | Input::Handing => return None,
            };
            let line = self
                .closing
                .run_until_cancelled(next_line(lines, &self.out))
                .await
                .flatten()?;
            match read(&line) {
                Ok(ClientJsonRpcMessage::Request(request)) => {
                    // `initialize`, or a request of the inline lifecycle (2026-07-28), which
                    // names its protocol version itself, opens the session.
                    let inline = request.request.get_meta().protocol_version().is_some();
                    if let ClientRequest::InitializeRequest(init) = &request.request {
                        // The version rmcp settles on is at most the one asked for.
                        self.legacy = !inline
                            && init.params.protocol_version.as_str()
                                < ProtocolVersion::V_2026_07_28.as_str();
                    }
                    if (inline || matches!(request.request, ClientRequest::InitializeRequest(_)))
                        && let Input::Opening(lines) =
                            std::mem::replace(&mut self.input, Input::Handing)
                    {
                        self.input = Input::Opened(lines);
                    }
                    return Some(ClientJsonRpcMessage::Request(request));
                }
                Ok(_) => tracing::debug!("ignoring a notification or response before initialize"),
                Err(Some(reply)) => refuse(&self.out, reply),
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
    if let Some(call) = PlainCall::read(line)
        && let Ok(message) = call.into_message()
    {
        return Ok(message);
    }
    jsonrpc::read(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Option<Value> {
        read(line.as_bytes()).expect_err("not a message")
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
