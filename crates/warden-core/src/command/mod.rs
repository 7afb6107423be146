//! Tools that run a command line (docker, host): the argv template that the call's arguments
//! fill, and the outcome the model reads.

mod outcome;
mod template;

pub use outcome::{Capped, answer, effective_timeout, render, timed_out};
pub use template::{Request, Template};
