//! The MCP methods: `tools/list` and `tools/call` over the toolbox in force.

use crate::convert;
use crate::state::Shared;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;
use warden_core::ToolCall;

const INSTRUCTIONS: &str = "Each tool runs in its own sandbox with only the files and \
    environment its policy grants. A failed call answers isError with the error's kind and a \
    message saying what to do about it.";

/// One session's view of the shared server.
#[derive(Clone)]
pub(crate) struct Handler {
    pub shared: Arc<Shared>,
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

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let snapshot = self.shared.snapshot();
        Ok(ListToolsResult::with_all_items(snapshot.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let snapshot = self.shared.snapshot();
        snapshot.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let snapshot = self.shared.snapshot();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let call = ToolCall::new(self.shared.next_call_id(), request.name, &arguments);
        let tool = snapshot.dispatcher.toolbox().get(&call.name);
        let _review = tool.filter(|t| t.review_required).map(|_| {
            self.shared
                .reviewer
                .register(&call.id, context.peer.clone())
        });
        let start = Instant::now();
        tokio::select! {
            message = snapshot.dispatcher.call(call.clone()) => {
                Ok(convert::call_result(&message, tool).into())
            }
            () = context.ct.cancelled() => {
                // Dropping the dispatcher's future above stopped the call and freed its sandbox.
                self.shared.log_cancelled(&call, start.elapsed());
                Err(ErrorData::internal_error("the call was cancelled", None))
            }
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.shared.add_peer(context.peer);
    }
}
