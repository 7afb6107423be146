//! The seam between the dispatcher and the sandboxes.

use crate::limits::Limits;
use crate::message::ToolError;
use crate::policy::Policy;
use crate::spec::ToolSpec;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed, sendable future, so `Executor` can be a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One checked call handed to an executor.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub call_id: String,
    /// The parsed arguments object (the executor checks it against its schema).
    pub arguments: Value,
    /// The limits in force for this call.
    pub limits: Limits,
}

/// What a tool produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    /// What the model reads.
    pub content: String,
    /// The structured result, when the tool has one.
    pub structured: Option<Value>,
    /// Captured standard output and error (already capped), when any.
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    /// Fuel burnt, when the call was metered.
    pub fuel_used: Option<u64>,
}

/// Runs one tool's calls, each in a fresh sandbox.
///
/// The dispatcher enforces the deadline by dropping the future: an executor must stop its work
/// and free its sandbox when its future is dropped.
pub trait Executor: Send + Sync {
    fn execute(&self, invocation: Invocation) -> BoxFuture<'_, Result<Output, ToolError>>;
}

/// One tool that a backend found in a policy.
pub struct LoadedTool {
    /// The function's name inside its sandbox (the key of `[functions.NAME]`).
    pub function: String,
    /// The spec, named without the policy's prefix.
    pub spec: ToolSpec,
    pub executor: Arc<dyn Executor>,
}

/// Turns policies of one executor kind into tools.
pub trait Backend: Send + Sync {
    /// The `kind` this backend serves (`"wasm"`).
    fn kind(&self) -> &'static str;
    /// Prepares every tool of one policy; an error names what cannot be honoured.
    fn load(&self, policy: &Arc<Policy>) -> Result<Vec<LoadedTool>, crate::PolicyError>;
}
