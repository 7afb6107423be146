//! The heart of warden: tool calls and tool messages, policies and the toolbox, the `Executor`
//! trait and the dispatcher. No sandbox technology lives here.

mod admission;
mod calllog;
pub mod command;
mod dispatch;
mod docker;
mod executor;
mod grants;
mod host;
mod limits;
mod message;
mod net;
mod policy;
mod redact;
mod review;
mod run;
mod session;
mod spec;
mod toolbox;
mod units;

pub use admission::{Admission, default_memory_budget};
pub use calllog::{CallLog, CallOutcome, CallRecord, DenialRecord, PolicyFacts, Record};
pub use command::Capped;
pub use dispatch::{CallObserver, Dispatcher};
pub use docker::{DEFAULT_NANO_CPUS, DEFAULT_PIDS, DEFAULT_TMP, DockerConfig, NetworkMode};
pub use executor::{
    Backend, BoxFuture, Denial, Denials, Executor, Invocation, LoadedTool, Output, SessionId,
};
pub use grants::{Access, FsGrant, Grants};
pub use host::{
    DEFAULT_FILE_SIZE, DEFAULT_OPEN_FILES, DEFAULT_PROCESSES, HostConfig, Isolation, NOBODY,
};
pub use limits::{Limits, LimitsSpec, cap_text, truncation_marker};
pub use message::{ErrorKind, Status, ToolCall, ToolError, ToolMessage, Violation};
pub use net::{Credential, HostGrant, HostPattern, NetGrants, is_public};
pub use policy::{ExecutorConfig, FunctionOverride, Located, Policy, PolicyError, WasmConfig};
pub use redact::Secrets;
pub use review::{Decision, Reviewer};
pub use run::{RunLimitHit, RunLimits};
pub use spec::{ToolSpec, is_valid_tool_name};
pub use toolbox::{Protected, Tool, Toolbox, ToolboxError};
pub use units::{ByteSize, HumanDuration};
