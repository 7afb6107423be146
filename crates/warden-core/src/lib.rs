//! The heart of warden: tool calls and tool messages, policies and the toolbox, the `Executor`
//! and `Backend` traits, the capability check and the dispatcher. No sandbox technology lives
//! here: each executor kind's `[executor]` table is its backend's to parse.

#![forbid(unsafe_code)]

mod admission;
pub mod after_answer;
mod backend;
mod call_id;
mod calllog;
mod capability;
pub mod changes;
mod dispatch;
mod executor;
mod grants;
mod limits;
mod located;
mod lock;
mod message;
mod net;
mod output;
pub mod owner;
mod pipe;
mod policy;
mod program;
mod redact;
mod review;
mod run;
mod session;
pub use call_id::next as next_call_id;
pub use session::ClientChoices;
pub mod shown;
mod spec;
mod table;
mod toolbox;
mod units;
mod whole;

pub use admission::Admission;
pub use backend::{Backend, Loaded, LoadedTool, Probe, ProbeError, Reach, Report, ReportLine};
pub use calllog::{CallLog, CallOutcome, Rotation, Seals};
pub use capability::{Capabilities, ExecutorKind, NetHosts, Support};
pub use changes::{ChangesToReview, HeldChanges, PendingChanges};
pub use dispatch::{
    CallObserver, CallTelemetry, Dispatcher, EndedCall, FILE_DETAIL, SUSPECT_DETAIL, base64_lines,
    clean_command, decode_lines, export_calls, quoted,
};
pub use executor::{
    BoxFuture, Denial, Denials, Executor, Held, Invocation, Meter, Output, Reached, SHELL_DETAIL,
    Sample, SessionId, ShellFifo, Usage,
};
pub use grants::{Access, CallerEnv, FsGrant, GrantLines, Grants, Paths};
pub use limits::{Capped, Limits, LimitsSpec, MARKER_MAX, shorten, split_marker};
pub use located::{Located, PolicyError};
pub use lock::lock;
pub use message::{ErrorKind, Rendered, Status, ToolCall, ToolError, ToolMessage, Violation};
pub use net::{Credential, GrantFault, HostGrant, HostPattern, NetGrantError, NetGrants};
pub use output::{OutputSink, OutputStream};
pub use pipe::{Pipe, PipeInput, Piped, Piping, Stream};
pub use policy::{FunctionOverride, Origin, Policy};
pub use program::{Exit, Finished, Input, Program, Sink, WindowSize};
pub use redact::StreamRedactor;
pub use review::{Asked, Decision, Reviewer, Verdict, call_digest};
pub use run::{RunLimitHit, RunLimits, RunUsage};
pub use spec::{ToolSpec, is_valid_tool_name};
pub use table::ExecutorTable;
pub use toolbox::{Broken, Keep, LoadedPolicy, Loading, Protected, Tool, Toolbox, ToolboxError};
pub use units::{ByteSize, HumanDuration, UnitError, millis, serialize_ms};
pub use whole::{Temporary, write_whole};
