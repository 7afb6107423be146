//! What warden's command executors (docker, host) share: the argv template that a call's
//! arguments fill, the start of every call ([`CommandCall`]), the outcome the model reads,
//! the `[executor]` knobs both take, and the session driver with its contract ([`session`]).

#![forbid(unsafe_code)]

mod call;
pub mod cgroup;
mod knobs;
mod outcome;
pub mod program;
pub mod session;
pub mod spares;
mod template;

pub use call::CommandCall;
pub use knobs::{
    NetworkMode, User, UserError, capabilities, command_line, count, session_shell, tmp_size,
    tool_name, transfer_line, transfer_size,
};
pub use outcome::{Cause, Deadline, answer, render, shell, timed_out};
pub use template::{Request, Template, TemplateError};
