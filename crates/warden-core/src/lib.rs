//! The heart of warden: tool calls and tool messages, policies and the toolbox, the `Executor`
//! trait and the dispatcher. No sandbox technology lives here.

mod dispatch;
mod executor;
mod grants;
mod limits;
mod message;
mod policy;
mod spec;
mod toolbox;
mod units;

pub use dispatch::{DEFAULT_GLOBAL_CONCURRENCY, Dispatcher};
pub use executor::{Backend, BoxFuture, Executor, Invocation, LoadedTool, Output};
pub use grants::{Access, FsGrant, Grants};
pub use limits::{Limits, LimitsSpec, cap_text, truncation_marker};
pub use message::{ErrorKind, Status, ToolCall, ToolError, ToolMessage, Violation};
pub use policy::{ExecutorConfig, FunctionOverride, Located, Policy, PolicyError, WasmConfig};
pub use spec::{ToolSpec, is_valid_tool_name};
pub use toolbox::{Protected, Tool, Toolbox, ToolboxError};
pub use units::{ByteSize, HumanDuration};
