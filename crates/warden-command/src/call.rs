//! What every call of a command tool (docker's, host's) starts with, in one session or in a
//! sandbox of its own: its arguments read against the tool's argv template, its variables
//! resolved, and its time derived from the invocation's deadline.

use crate::{Deadline, Request, Template};
use warden_core::{Grants, Invocation, ToolError};

/// One call of a command tool, checked and ready to run.
#[derive(Debug, Clone)]
pub struct CommandCall {
    /// What the arguments ask: the template's values, a `timeout`, a `restart`.
    pub request: Request,
    /// The variables the command runs with.
    pub env: Vec<(String, String)>,
    /// When the command is stopped, and the timeout its answer names.
    pub time: Deadline,
}

impl CommandCall {
    /// Call `inv` of a tool whose argv is `template` (in session mode when `session`) and
    /// whose grants are `grants`. Arguments that do not fit the template are
    /// `invalid_arguments`; a caller's variable the policy does not allow is refused.
    pub fn of(
        inv: &Invocation,
        template: &Template,
        grants: &Grants,
        session: bool,
    ) -> Result<CommandCall, ToolError> {
        let request = Request::parse(&inv.arguments, template, session)
            .map_err(ToolError::invalid_arguments)?;
        let time = Deadline::of(request.timeout, inv);
        let env = grants.resolve_env(&inv.caller_env)?;
        Ok(CommandCall { request, env, time })
    }
}
