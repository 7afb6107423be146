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
//! A plain `tools/call` (no `_meta`, a tool that needs no review, in a session opened by
//! `initialize` with a protocol version before 2026-07-28) is answered by that reader, which
//! runs it until it first waits and hands it to a task of its own only then; the call writes
//! its answer itself. rmcp's service loop hands each request to a task, its answer back
//! through a channel and on to a third task, and those hand-offs cost about a quarter of the
//! server's CPU a call. Everything else, and every call of a newer session, goes through rmcp.
//! A `notifications/cancelled` naming a call answered here stops it, as rmcp would; at the end
//! of input its calls get the same 5 s to answer as rmcp's, then are cancelled.
//!
//! Every `tools/call` the reader reads waits there for its place among the server's calls in
//! flight ([`crate::calls`]): while every place is taken the reader reads nothing more, and
//! the client's pipe holds the rest of its burst. When the server stops, the reader reads
//! on (refusing new calls) until the drain is over; then the input ends, as at the end of
//! stdin.

use crate::calls::{Place, Reserved};
use crate::convert::Answered;
use crate::handler::{Handler, Text};
use crate::jsonrpc::{self, error_reply};
use crate::state::Server;
use crate::trace::{self, Incoming};
use crate::{Error, watch};
use bytes::Bytes;
use futures::StreamExt;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, GetMeta, JsonObject,
    JsonRpcRequest, JsonRpcVersion2_0, MetaObject, Request, RequestId, RequestMetaObject,
    ServerJsonRpcMessage,
};
use rmcp::model::{ClientNotification, ErrorCode, ProtocolVersion, ServerResult};
use rmcp::transport::Transport;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Mutex, Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, FramedRead};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument as _;
use warden_core::ToolError;
use warden_core::after_answer::Deferred;

/// The longest message read; a longer line is refused and skipped.
const MAX_LINE: usize = 64 << 20;

/// How long calls still running when input ends may take to answer: rmcp's own drain.
const DRAIN: Duration = Duration::from_secs(5);

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
        let direct = Direct::new(handler.clone());
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
        let transport = LineTransport::new(read, write, direct.clone(), closing.clone());
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
        direct.drain().await;
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
    /// Answers plain calls, once a session of an older protocol version has opened.
    direct: Direct,
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
    fn new(read: R, write: W, direct: Direct, closing: CancellationToken) -> Self {
        let codec = AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), Vec::new(), MAX_LINE);
        Self {
            input: Input::Opening(FramedRead::new(read, codec)),
            out: Arc::new(Mutex::new(write)),
            direct,
            legacy: false,
            closing,
        }
    }
}

/// The plain calls answered beside rmcp's loop, by id while they run.
#[derive(Clone)]
struct Direct {
    handler: Handler,
    running: Arc<std::sync::Mutex<HashMap<RequestId, CancellationToken>>>,
    ended: Arc<Notify>,
    /// What the calls answered on the reader left for after their answers, to a task that
    /// finishes it in order: waking one task costs less than spawning one a call.
    finishing: mpsc::Sender<Leftovers>,
    /// One for each call started here and not yet finished, as many as the dispatcher runs
    /// at once. Each such call holds its WebAssembly store, and with it one of the engine's
    /// stacks, until its leftovers are finished: it may be waiting to write its answer (to a
    /// stdout still busy with the last one), or its leftovers waiting for the finishing task.
    /// Unbounded, a reader that ran ahead of them (10,000 pipelined calls) held every stack,
    /// and the calls past them were refused; bounded, it waits.
    unfinished: Arc<Semaphore>,
}

/// What a call answered here left, and its place among the unfinished.
struct Leftovers {
    deferred: Deferred,
    unfinished: Option<OwnedSemaphorePermit>,
}

impl Leftovers {
    async fn finish(self) {
        self.deferred.finish().await;
        drop(self.unfinished);
    }
}

/// How many calls' leftovers may wait for the finishing task; past that, the reader waits
/// for it.
const FINISHING_AHEAD: usize = 16;

impl Direct {
    fn new(handler: Handler) -> Self {
        let (finishing, mut queue) = mpsc::channel::<Leftovers>(FINISHING_AHEAD);
        tokio::spawn(async move {
            while let Some(leftovers) = queue.recv().await {
                leftovers.finish().await;
            }
        });
        let unfinished = handler.shared.options.admission.global_concurrency.max(1);
        Self {
            handler,
            running: Arc::default(),
            ended: Arc::default(),
            finishing,
            unfinished: Arc::new(Semaphore::new(unfinished)),
        }
    }

    /// Finishes what a call answered on the reader left, on the finishing task; waits while
    /// [`FINISHING_AHEAD`] calls' leftovers wait for it.
    async fn finish(&self, leftovers: Leftovers) {
        if let Err(gone) = self.finishing.send(leftovers).await {
            // The finishing task only ends with the server; finish them here.
            gone.0.finish().await;
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, CancellationToken>> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `call`, which writes the answer to `out` (none when the call is cancelled, as
    /// JSON-RPC's cancellation asks): here, until it first waits, then on a task of its own.
    /// A call that never waits (a small WebAssembly call) is answered without a task's
    /// hand-off; one that computes for longer holds the reading of the next line back until
    /// its guest's first yield, at most a tick of the WebAssembly epoch (10 ms). What it
    /// leaves for after its answer runs elsewhere either way (the finishing task, or the
    /// call's own), so the next line is not read behind it. Only a call that waits is
    /// registered by its id: one answered in its first poll is over before a cancellation
    /// naming it can be read. `place` is the call's among those in flight, held until its
    /// answer is written, or why it has none (it is then refused). While as many calls as the
    /// dispatcher runs are unfinished here, this waits for one to finish.
    async fn start<W>(
        &self,
        call: PlainCall<'_>,
        place: Result<Place, ToolError>,
        out: &Arc<Mutex<W>>,
    ) where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let unfinished = match self.unfinished.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            // Never closed: a permit is all it gives.
            Err(_) => self.unfinished.clone().acquire_owned().await.ok(),
        };
        let token = CancellationToken::new();
        let id = call.id;
        let name = call.params.name.into_owned();
        let span = trace::request_span(&Incoming {
            method: "tools/call",
            tool: Some(&name),
            id: &id,
            session: None,
            http: false,
            meta: None,
        });
        let call = Text {
            name,
            arguments: call.params.arguments.map_or("{}", RawValue::get).to_owned(),
            output: None,
        };
        let (handler, out, cancelled) = (self.handler.clone(), out.clone(), token.clone());
        let answering_id = id.clone();
        let traced = span.clone();
        let mut answer =
            Box::pin(
                async move {
                    let (answered, deferred) = warden_core::after_answer::answering(
                        handler.call_text(call, None, cancelled.cancelled(), &place),
                    )
                    .await;
                    match &answered {
                        Some(a) if a.is_error() => trace::failed(&span, "tool_error"),
                        Some(_) => {}
                        None => trace::failed(&span, "cancelled"),
                    }
                    if let Some(answered) = answered {
                        let written = match legacy_response(&answered, &answering_id) {
                            Ok(line) => write_line(&out, line).await,
                            Err(e) => Err(io::Error::other(e)),
                        };
                        if let Err(e) = written {
                            tracing::error!("cannot answer call {answering_id}: {e}");
                        }
                    }
                    // The answer is out: the call leaves those in flight.
                    drop(place);
                    deferred
                }
                .instrument(traced),
            );
        let first = std::future::poll_fn(|cx| Poll::Ready(answer.as_mut().poll(cx))).await;
        match first {
            // The call is over: its sandbox ends, and its function's next one is prepared.
            Poll::Ready(deferred) => {
                self.finish(Leftovers {
                    deferred,
                    unfinished,
                })
                .await;
            }
            Poll::Pending => {
                self.running().insert(id.clone(), token);
                let this = self.clone();
                drop(tokio::spawn(async move {
                    let deferred = answer.await;
                    this.answered(&id);
                    Leftovers {
                        deferred,
                        unfinished,
                    }
                    .finish()
                    .await;
                }));
            }
        }
    }

    /// The registered call `id` has answered (or was cancelled).
    fn answered(&self, id: &RequestId) {
        let mut running = self.running();
        running.remove(id);
        if running.is_empty() {
            self.ended.notify_waiters();
        }
    }

    /// Stops the call `id` if it runs here; whether it did.
    fn cancel(&self, id: &RequestId) -> bool {
        self.running()
            .get(id)
            .map(CancellationToken::cancel)
            .is_some()
    }

    /// Waits until every call has answered, cancelling those still running after [`DRAIN`].
    async fn drain(&self) {
        if tokio::time::timeout(DRAIN, self.idle()).await.is_err() {
            tracing::warn!("calls still running {DRAIN:?} after the input ended: cancelling");
            self.running().values().for_each(CancellationToken::cancel);
            self.idle().await;
        }
    }

    async fn idle(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.running().is_empty() {
                return;
            }
            ended.await;
        }
    }
}

/// The response line to call `id` for a session before 2026-07-28, as rmcp writes it.
fn legacy_response(answered: &Answered, id: &RequestId) -> serde_json::Result<Vec<u8>> {
    let mut line = Vec::with_capacity(256);
    if answered.write_response(id, &mut line).is_some() {
        return Ok(line);
    }
    // What rmcp does to every result for such a session.
    let mut result = ServerResult::CallToolResult(answered.result());
    result.strip_result_type_for_legacy_peer();
    result.strip_non_object_output_for_legacy_peer();
    serde_json::to_vec(&ServerJsonRpcMessage::response(result, id.clone()))
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

/// The open session's lines, read on a task of their own: plain calls of a legacy session
/// answered by [`Direct`], cancellations of those stopped, refusals written, and everything
/// else handed to rmcp in order.
struct Reader<R, W> {
    lines: Lines<R>,
    out: Arc<Mutex<W>>,
    direct: Direct,
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
            if self.legacy
                && let Some(call) = PlainCall::read(&line)
                && call.params.meta.is_none()
                && !self.direct.handler.needs_peer(&call.params.name)
            {
                // No place: the pipe holds the rest of the burst until a call has answered.
                let place = self.direct.handler.shared.calls.wait_to_enter().await;
                self.direct.start(call, place, &self.out).await;
                continue;
            }
            let mut message = match read(&line) {
                Ok(ClientJsonRpcMessage::Notification(n)) => {
                    if let ClientNotification::CancelledNotification(c) = &n.notification
                        && let Some(id) = &c.params.request_id
                        && self.direct.cancel(id)
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
                && let Ok(place) = self.direct.handler.shared.calls.wait_to_enter().await
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

/// A `tools/call` of the usual shape, read in one pass. rmcp reads any message by trying
/// each kind and each request in turn over a buffered copy, about a sixth of a call's cost
/// on this path; a line with anything more (another field, `inputResponses`) takes that way.
/// The arguments stay the client's text: the dispatcher parses them once, where reading them
/// into a map here and writing them out again for it cost a parse and a print a call. What
/// can be is borrowed from the line (a `jsonrpc` or `method` written with escapes is not
/// plain, and takes rmcp's way).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainCall<'a> {
    jsonrpc: &'a str,
    id: RequestId,
    method: &'a str,
    #[serde(borrow)]
    params: PlainCallParams<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainCallParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow, deserialize_with = "object_text")]
    arguments: Option<&'a RawValue>,
    #[serde(rename = "_meta", default)]
    meta: Option<JsonObject>,
}

/// The text of `arguments` when it is an object, none when it is null; anything else is not a
/// plain call (rmcp's reading answers it as invalid params).
fn object_text<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<&'a RawValue>, D::Error> {
    let raw = Option::<&'a RawValue>::deserialize(d)?;
    match raw {
        Some(raw) if !raw.get().starts_with('{') => {
            Err(serde::de::Error::custom("arguments are not an object"))
        }
        raw => Ok(raw),
    }
}

impl<'a> PlainCall<'a> {
    /// `line` as a plain call, when it is one.
    fn read(line: &'a [u8]) -> Option<Self> {
        let call: Self = serde_json::from_slice(line).ok()?;
        (call.jsonrpc == "2.0" && call.method == "tools/call").then_some(call)
    }

    /// The message rmcp's own reading makes of the same line: `_meta` in the extensions.
    fn into_message(self) -> serde_json::Result<ClientJsonRpcMessage> {
        let mut params = CallToolRequestParams::new(self.params.name.into_owned());
        params.arguments = self
            .params
            .arguments
            .map(|raw| serde_json::from_str::<JsonObject>(raw.get()))
            .transpose()?;
        let mut request = Request::new(params);
        if let Some(meta) = self.params.meta {
            request
                .extensions
                .insert(RequestMetaObject(MetaObject(meta)));
        }
        Ok(ClientJsonRpcMessage::Request(JsonRpcRequest {
            jsonrpc: JsonRpcVersion2_0,
            id: self.id,
            request: ClientRequest::CallToolRequest(request),
        }))
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
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"a\u0064d","arguments":{"a":"\u00e9"}}}"#,
        ];
        for line in lines {
            let plain = PlainCall::read(line.as_bytes())
                .unwrap()
                .into_message()
                .unwrap();
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
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/lis\u0074","params":{"name":"add"}}"#,
            r#"{"jsonrpc":"2.0","id":10,"method":"prompts/get","params":{"name":"add"}}"#,
        ] {
            assert!(PlainCall::read(more.as_bytes()).is_none(), "{more}");
            assert!(read(more.as_bytes()).is_ok(), "rmcp reads it: {more}");
        }
        // Another version of JSON-RPC: not plain, and refused as rmcp's reading refuses it.
        let version = r#"{"jsonrpc":"1.0","id":9,"method":"tools/call","params":{"name":"add"}}"#;
        assert!(PlainCall::read(version.as_bytes()).is_none());
        assert_eq!(answer(version).unwrap()["error"]["code"], -32600);
        // Arguments that are not an object: not plain, and rmcp's reading refuses them.
        let scalar = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"add","arguments":5}}"#;
        assert!(PlainCall::read(scalar.as_bytes()).is_none());
        assert_eq!(answer(scalar).unwrap()["error"]["code"], -32602);
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
