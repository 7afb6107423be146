//! The MCP methods: `tools/list` and `tools/call` over the toolbox in force.

use crate::calls::{Place, Reserved};
use crate::choices;
use crate::convert::Answered;
use crate::progress::Progress;
use crate::session::{SESSION_ID_HEADER, Session, read_idle_limit};
use crate::state::Shared;
use crate::stateless_review::{self, Round};
use crate::trace::{self, Incoming};
use rmcp::Peer;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CustomRequest, CustomResult,
    Implementation, InitializeRequestParams, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument as _;
use warden_core::{ErrorKind, OutputSink, Reviewer, ToolCall, ToolError};

const INSTRUCTIONS: &str = "Each tool runs in its own sandbox with only the files and \
    environment its policy grants. A failed call answers isError with the error's kind and a \
    message saying what to do about it.";

/// A `tools/call` as the dispatcher takes it: the tool's name, its arguments as a JSON
/// object's text (the stdio transport hands on the client's own), and where its output goes
/// as it is written, if the client asked for progress.
pub(crate) struct Text {
    pub name: String,
    pub arguments: String,
    pub output: Option<OutputSink>,
}

/// Who reviews a call whose tool needs review.
pub(crate) enum Reviewing<'a> {
    /// No one: such a call is rejected.
    Nobody,
    /// The client that sent it, through elicitation (sessions before 2026-07-28).
    Client(&'a Peer<RoleServer>),
    /// A reviewer of its own, which judges what a stateless call's retry carried.
    Stateless(Arc<dyn Reviewer>),
}

/// One session's view of the shared server.
#[derive(Clone)]
pub(crate) struct Handler {
    pub shared: Arc<Shared>,
    pub session: Arc<Session>,
}

impl Handler {
    /// A handler for a new MCP connection: a session of its own.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            session: Arc::default(),
        }
    }
}

impl Handler {
    /// Whether a call of `name` needs the client (a reviewer asks through it).
    pub(crate) fn needs_peer(&self, name: &str) -> bool {
        let snapshot = self.shared.snapshot();
        let tool = snapshot.dispatcher.toolbox().get(name);
        tool.is_some_and(|t| t.review_required || t.review_changes)
    }

    /// Runs one `tools/call` through this session's dispatcher, in the place among the calls
    /// in flight `reserved` for it, else one it finds now; `None` when `cancelled` resolved
    /// first (the call was stopped, its sandbox freed, and it is logged as cancelled).
    pub(crate) async fn call(
        &self,
        request: CallToolRequestParams,
        reviewing: Reviewing<'_>,
        cancelled: impl Future<Output = ()>,
        reserved: Option<Place>,
        output: Option<OutputSink>,
    ) -> Option<CallToolResult> {
        let place = reserved.map_or_else(|| self.shared.calls.enter(), Ok);
        let arguments = Value::Object(request.arguments.unwrap_or_default()).to_string();
        let call = Text {
            name: request.name.into(),
            arguments,
            output,
        };
        let answered = self.call_text(call, reviewing, cancelled, &place);
        answered.await.map(|a| a.result())
    }

    /// [`Handler::call`] of the tool `name` with its arguments as a JSON object's text, which
    /// the dispatcher parses: the stdio transport hands on the text as the client wrote it.
    /// `place` is the call's place among those in flight, which the caller holds until the
    /// answer is written, or why there is none: then the call is answered with that error,
    /// and logged, without running. A call still running when a stopping server's drain
    /// ends is cancelled and answered.
    pub(crate) async fn call_text(
        &self,
        Text {
            name,
            arguments,
            output,
        }: Text,
        reviewing: Reviewing<'_>,
        cancelled: impl Future<Output = ()>,
        place: &Result<Place, ToolError>,
    ) -> Option<Answered> {
        let snapshot = self.shared.snapshot();
        let call = ToolCall {
            id: self.shared.next_call_id(),
            name,
            arguments,
        };
        let mut dispatcher = self.session.dispatcher(&snapshot.dispatcher);
        let tool = snapshot.dispatcher.toolbox().get(&call.name);
        let spec = tool.map(|t| &t.spec);
        if let Err(refused) = place {
            let message = dispatcher.answer_cancelled(&call, refused.clone(), Duration::ZERO);
            return Some(Answered::new(message, spec));
        }
        let reviewed = tool.is_some_and(|t| t.review_required || t.review_changes);
        // A reviewer of the server's (the console) decides whatever the client could.
        let reviewing = match self.shared.options.reviewer {
            Some(_) => Reviewing::Nobody,
            None => reviewing,
        };
        let _review = match reviewing {
            Reviewing::Client(peer) if reviewed => {
                Some(self.shared.reviewer.register(&call.id, peer.clone()))
            }
            Reviewing::Stateless(reviewer) => {
                dispatcher = dispatcher.reviewer(reviewer);
                None
            }
            _ => None,
        };
        let start = Instant::now();
        tokio::select! {
            // The call first: one that answers at once never polls (so never registers with)
            // the cancellations, and no random order is drawn.
            biased;
            message = async {
                match output {
                    Some(output) => dispatcher.call_streaming(call.clone(), output).await,
                    None => dispatcher.call(call.clone()).await,
                }
            } => Some(Answered::new(message, spec)),
            () = cancelled => {
                // Dropping the dispatcher's future above stopped the call and freed its sandbox;
                // the answer goes nowhere but the log.
                dispatcher.answer_cancelled(&call, self::cancelled(), start.elapsed());
                None
            }
            () = self.shared.calls.cut() => {
                let error = self.shared.calls.cut_error();
                let message = dispatcher.answer_cancelled(&call, error, start.elapsed());
                Some(Answered::new(message, spec))
            }
        }
    }

    /// The review round of a call on protocol 2026-07-28 whose tool needs review; `None`
    /// for any other call (a session's client is asked by elicitation).
    fn stateless_round(
        &self,
        request: &mut CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<Round>, stateless_review::AskError> {
        if self.shared.options.reviewer.is_some()
            || !stateless_review::is_stateless(context.protocol_version().as_ref())
        {
            return Ok(None);
        }
        let snapshot = self.shared.snapshot();
        let tool = snapshot.dispatcher.toolbox().get(&request.name);
        let Some(tool) = tool.filter(|t| t.review_required || t.review_changes) else {
            return Ok(None);
        };
        let client = context.client_capabilities();
        let stateless = &self.shared.stateless;
        stateless.round(tool, request, client.as_ref()).map(Some)
    }
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new("warden", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let meta = request.meta.as_deref().unwrap_or(&context.meta);
        let choices = choices::read(meta, &self.shared.snapshot().dispatcher)
            .map_err(|e| ErrorData::invalid_params(e, None))?;
        let idle = read_idle_limit(meta).map_err(|e| ErrorData::invalid_params(e, None))?;
        self.session.set_choices(choices);
        self.session.set_idle_limit(idle);
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let _span = request_span("tools/list", None, &context).entered();
        let snapshot = self.shared.snapshot();
        Ok(ListToolsResult::with_all_items(snapshot.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let snapshot = self.shared.snapshot();
        snapshot.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let span = request_span("tools/call", Some(&request.name), &context);
        let reviewing = match self.stateless_round(&mut request, &context) {
            Ok(Some(Round::Ask(input))) => return Ok(CallToolResponse::InputRequired(*input)),
            Ok(Some(Round::Run(reviewer))) => Reviewing::Stateless(reviewer),
            Ok(None) => Reviewing::Client(&context.peer),
            Err(e) => {
                tracing::error!("cannot ask for review: {e}");
                return Err(ErrorData::internal_error(e.to_string(), None));
            }
        };
        // Over HTTP the session may not be known by its id yet (its `initialized` is handled
        // apart): the call itself keeps it from being idle.
        let _busy = self.session.busy();
        let reserved = context
            .extensions
            .get::<Reserved>()
            .and_then(Reserved::take);
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| Progress::start(context.peer.clone(), token));
        let answered = self
            .call(
                request,
                reviewing,
                context.ct.cancelled(),
                reserved,
                progress.as_ref().map(Progress::sink),
            )
            .instrument(span.clone())
            .await;
        if let Some(progress) = progress {
            progress.finish().await;
        }
        match answered {
            Some(result) => {
                if result.is_error == Some(true) {
                    trace::failed(&span, "tool_error");
                }
                Ok(result.into())
            }
            None => {
                trace::failed(&span, "cancelled");
                Err(ErrorData::internal_error("the call was cancelled", None))
            }
        }
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method = request.method.as_str();
        if [
            crate::read::METHOD,
            crate::write::METHOD,
            crate::start::METHOD,
        ]
        .contains(&method)
        {
            let snapshot = self.shared.snapshot();
            let dispatcher = self.session.dispatcher(&snapshot.dispatcher);
            return match method {
                crate::read::METHOD => crate::read::answer(&dispatcher, &request).await,
                crate::write::METHOD => crate::write::answer(&dispatcher, &request).await,
                _ => crate::start::answer(&dispatcher, &request).await,
            };
        }
        if crate::snapshot::handles(&request.method) {
            let snapshot = self.shared.snapshot();
            let serving = crate::snapshot::Serving {
                snapshots: self.shared.options.snapshots.as_deref(),
                loader: self.shared.options.policy_loader.as_ref(),
                session: &self.session,
                base: &snapshot.dispatcher,
            };
            return crate::snapshot::answer(serving, &request).await;
        }
        let store = self.shared.options.transactions.as_deref();
        crate::undo::answer(store, &request).unwrap_or_else(|| {
            Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            ))
        })
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // Over HTTP the notification carries the session's id (rmcp hands on the request's
        // head): a DELETE naming it ends this session.
        let id = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|head| head.headers.get(SESSION_ID_HEADER))
            .and_then(|id| id.to_str().ok());
        if let Some(id) = id {
            self.session.touch();
            self.shared.add_session(id, &self.session);
        }
        self.shared.add_peer(context.peer);
    }
}

/// The span of a request rmcp hands warden.
fn request_span(
    method: &'static str,
    tool: Option<&str>,
    context: &RequestContext<RoleServer>,
) -> tracing::Span {
    let head = context.extensions.get::<http::request::Parts>();
    trace::request_span(&Incoming {
        method,
        tool,
        id: &context.id,
        session: head
            .and_then(|h| h.headers.get(SESSION_ID_HEADER))
            .and_then(|id| id.to_str().ok()),
        http: head.is_some(),
        meta: Some(&context.meta.0.0),
    })
}

/// A call the client cancelled. `unavailable`, as for the calls of a batch that fail_fast
/// stopped: the call did not finish, through no fault of its own, and may be made again.
fn cancelled() -> ToolError {
    ToolError::new(
        ErrorKind::Unavailable,
        "cancelled: the MCP client cancelled the call or went away; its sandbox was stopped",
    )
    .with_detail("cancelled", true)
}
