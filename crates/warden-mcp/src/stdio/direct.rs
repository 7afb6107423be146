//! The direct path: plain `tools/call`s answered by the stdio reader itself, beside rmcp.
//!
//! A plain `tools/call` (no `_meta`, a tool that needs no review, in a session opened by
//! `initialize` with a protocol version before 2026-07-28) is answered by the reader, which
//! runs it until it first waits and hands it to a task of its own only then; the call writes
//! its answer itself, the bytes rmcp would write. rmcp's service loop hands each request to a
//! task, its answer back through a channel and on to a third task, and those hand-offs cost
//! about a quarter of the server's CPU a call. A `notifications/cancelled` naming a call
//! answered here stops it, as rmcp would; at the end of input its calls get the same 5 s to
//! answer as rmcp's, then are cancelled.
//!
//! [`route`] is the one place that decides which path a request takes. The path is on unless
//! `WARDEN_MCP_DIRECT=0` (read once, when the first session opens): off, rmcp answers every
//! request, which is how to tell whether a difference in an answer comes from this path.
//!
//! When this path can go: once rmcp's service loop answers a call for about what this path
//! costs, that is, when `scripts/bench-guard`'s `warden serve` rows marked "direct path off"
//! (round trip and CPU a call) are within 5 % of those with it on. Then this file goes, with
//! the switch, the stages of `scripts/test` that run with it off and the test that compares
//! the two paths' answers (`serve_answers_alike_with_the_direct_path_on_and_off`), and the
//! reader hands every message to rmcp.

use super::plain::PlainCall;
use super::write_line;
use crate::calls::Place;
use crate::convert::Answered;
use crate::handler::{Handler, Reviewing, Text};
use crate::trace::{self, Incoming};
use rmcp::model::{RequestId, ServerJsonRpcMessage, ServerResult};
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, LazyLock};
use std::task::Poll;
use std::time::Duration;
use tokio::io::AsyncWrite;
use tokio::sync::{Mutex, Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use warden_core::ToolError;
use warden_core::after_answer::Deferred;

/// How long calls still running when input ends may take to answer: rmcp's own drain.
const DRAIN: Duration = Duration::from_secs(5);

/// How many calls' leftovers may wait for the finishing task; past that, the reader waits
/// for it.
const FINISHING_AHEAD: usize = 16;

/// The switch: the direct path is on unless `WARDEN_MCP_DIRECT` is `0`. Read once for the
/// process: every session of a server takes the same path.
fn switched_on() -> bool {
    static ON: LazyLock<bool> =
        LazyLock::new(|| std::env::var_os("WARDEN_MCP_DIRECT").is_none_or(|v| v != "0"));
    *ON
}

/// Which path a line of an open session takes: the direct path and the call it answers, or
/// `None` when rmcp answers the line. `direct` is the path when it is switched on; `legacy`,
/// that the session was opened by `initialize` with a version before 2026-07-28.
pub(super) fn route<'d, 'l>(
    direct: Option<&'d Direct>,
    legacy: bool,
    line: &'l [u8],
) -> Option<(&'d Direct, PlainCall<'l>)> {
    // A newer session's results take rmcp's shaping for its version, which this path does not
    // write.
    let direct = direct.filter(|_| legacy)?;
    let call = PlainCall::read(line)?;
    // `_meta` asks for what rmcp's request context carries (progress, trace context, ...),
    // and review asks the client through rmcp's peer.
    let plain = call.params.meta.is_none() && !direct.handler.needs_peer(&call.params.name);
    plain.then_some((direct, call))
}

/// The plain calls answered beside rmcp's loop, by id while they run.
#[derive(Clone)]
pub(super) struct Direct {
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

impl Direct {
    /// The direct path for one connection, `None` when it is switched off.
    pub(super) fn when_on(handler: &Handler) -> Option<Self> {
        switched_on().then(|| Self::new(handler.clone()))
    }

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
        warden_core::lock(&self.running)
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
    pub(super) async fn start<W>(
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
        let id = call.id.clone();
        let mut answer = Box::pin(self.answer(call, place, token.clone(), out.clone()));
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

    /// Runs `call` until it has answered (or `cancelled` stopped it) and writes its answer;
    /// what it left for after its answer is the output.
    fn answer<W>(
        &self,
        call: PlainCall<'_>,
        place: Result<Place, ToolError>,
        cancelled: CancellationToken,
        out: Arc<Mutex<W>>,
    ) -> impl Future<Output = Deferred> + Send + 'static
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
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
        let handler = self.handler.clone();
        let traced = span.clone();
        async move {
            let (answered, deferred) = warden_core::after_answer::answering(handler.call_text(
                call,
                Reviewing::Nobody,
                cancelled.cancelled(),
                &place,
            ))
            .await;
            match &answered {
                Some(a) if a.is_error() => trace::failed(&span, "tool_error"),
                Some(_) => {}
                None => trace::failed(&span, "cancelled"),
            }
            if let Some(answered) = answered {
                let written = match legacy_response(&answered, &id) {
                    Ok(line) => write_line(&out, line).await,
                    Err(e) => Err(io::Error::other(e)),
                };
                if let Err(e) = written {
                    tracing::error!("cannot answer call {id}: {e}");
                }
            }
            // The answer is out: the call leaves those in flight.
            drop(place);
            deferred
        }
        .instrument(traced)
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
    pub(super) fn cancel(&self, id: &RequestId) -> bool {
        self.running()
            .get(id)
            .map(CancellationToken::cancel)
            .is_some()
    }

    /// Waits until every call has answered, cancelling those still running after [`DRAIN`].
    pub(super) async fn drain(&self) {
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
