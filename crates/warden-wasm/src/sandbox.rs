//! One call's sandbox: a fresh `Store` with exactly the granted WASI context, its limits, and
//! the translation of whatever stopped it into a `ToolError`.

use crate::capture::CappedPipe;
use crate::http::Hooks;
use crate::net::{NetGate, NetView};
use crate::roots::{Roots, RootsView};
use std::time::Instant;
use warden_core::{Access, ErrorKind, Grants, Invocation, Limits, ToolError};
use warden_tx::View;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime::{Engine, PoolConcurrencyLimitError, ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::p2::bindings::filesystem::types::Descriptor;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// How much of stderr a failure message quotes.
const STDERR_TAIL: usize = 2048;

/// Per-call state: the WASI context, the HTTP gate and the memory accounting.
pub(crate) struct CallState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    hooks: Hooks,
    table: ResourceTable,
    limiter: Limiter,
    roots: Roots,
}

impl NetView for CallState {
    fn net(&self) -> &NetGate {
        &self.hooks.gate
    }
}

impl RootsView for CallState {
    fn note_root(&self, fd: &Resource<Descriptor>) {
        self.roots.note(&self.table, fd);
    }

    fn learn_roots(&mut self, dirs: &[(Resource<Descriptor>, String)]) {
        self.roots.learn(&self.table, dirs);
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Caps the sum of all linear memories of the call, and remembers a refusal: a refused
/// `memory.grow` makes Rust guests abort through `unreachable`, and only this record tells
/// that trap apart from a bug.
struct Limiter {
    limit: usize,
    used: usize,
    /// The most `used` has been: the call's peak memory.
    peak: usize,
    refused: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let after = self.used - current.min(self.used) + desired;
        if after > self.limit {
            self.refused = true;
            return Ok(false);
        }
        self.used = after;
        self.peak = self.peak.max(after);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// What a command's call gets besides its grants.
pub(crate) struct CallIo<'a> {
    pub args: &'a [String],
    pub stdin: Option<&'a str>,
}

impl CallIo<'_> {
    /// A function's: no arguments, empty stdin.
    pub(crate) const NONE: CallIo<'static> = CallIo {
        args: &[],
        stdin: None,
    };
}

impl Sandbox {
    /// The high-water mark of the call's linear memories, in bytes.
    pub(crate) fn memory_peak(&self) -> u64 {
        self.store.data().limiter.peak as u64
    }
}

/// A store ready to instantiate into, and the pipes that capture its output.
pub(crate) struct Sandbox {
    pub store: Store<CallState>,
    pub stdout: CappedPipe,
    pub stderr: CappedPipe,
    /// The view its read-write roots are seen through, when its call is a transaction.
    pub view: Option<View>,
}

impl Sandbox {
    /// Ends the sandbox once the call's answer is out, when the caller writes it
    /// ([`warden_core::after_answer`]), else now: giving its instance slot back to the pool
    /// resets the slot's memory (a page-table scan and the clearing of written pages, about a
    /// tenth of a small call's CPU), which the answer need not wait for.
    pub(crate) fn release(self) {
        warden_core::after_answer::defer(self);
    }

    /// Builds the store for one call: env, preopens and network exactly as granted, nothing
    /// else; stopped at `deadline`. What the guest does is reported nowhere and its network
    /// stays shut until the sandbox is [bound](Sandbox::bind) to its call.
    pub(crate) fn new(
        engine: &Engine,
        grants: &Grants,
        env: &[(String, String)],
        limits: &Limits,
        net: NetGate,
        io: CallIo<'_>,
        deadline: Instant,
    ) -> Result<Sandbox, ToolError> {
        let stdout = CappedPipe::new(limits.output);
        let stderr = CappedPipe::new(limits.output);
        let mut b = WasiCtxBuilder::new();
        b.envs(env)
            .args(io.args)
            .stdout(stdout.clone())
            .stderr(stderr.clone());
        if let Some(text) = io.stdin {
            b.stdin(MemoryInputPipe::new(text.to_owned()));
        }
        for g in &grants.fs {
            let perms = match g.access {
                Access::ReadOnly => FsPerms::ReadOnly,
                Access::ReadWrite => FsPerms::ReadWrite,
            };
            b.preopened_dir(&g.host, &g.guest, perms).map_err(|e| {
                ToolError::new(
                    ErrorKind::Unavailable,
                    format!("the granted folder {} cannot be opened: {e}", g.guest),
                )
            })?;
        }
        net.configure_sockets(&mut b);
        let state = CallState {
            wasi: b.build(),
            http: WasiHttpCtx::new(),
            hooks: Hooks { gate: net },
            table: ResourceTable::new(),
            limiter: Limiter {
                limit: usize::try_from(limits.memory).unwrap_or(usize::MAX),
                used: 0,
                peak: 0,
                refused: false,
            },
            roots: Roots::default(),
        };
        let mut store = Store::new(engine, state);
        store.limiter(|s| &mut s.limiter);
        if let Some(fuel) = limits.fuel {
            store.set_fuel(fuel).map_err(internal)?;
            store
                .fuel_async_yield_interval(Some(10_000_000))
                .map_err(internal)?;
        }
        // The deadline must be set before instantiation: a new store's is 0.
        let mut sandbox = Sandbox {
            store,
            stdout,
            stderr,
            view: None,
        };
        sandbox.stop_at(deadline);
        Ok(sandbox)
    }

    /// Stops the guest at `deadline` instead of whenever it was to stop: a call's is the
    /// dispatcher's own ([`Invocation::deadline`]), not a little before it as a command's is.
    /// Stopping earlier would win nothing clean: the guest's network waits end at the same
    /// deadline (so that a slow server is the call's timeout, not an error the guest answers
    /// for), and a guest that sleeps or waits is never interrupted, only one that computes.
    pub(crate) fn stop_at(&mut self, deadline: Instant) {
        self.store.set_epoch_deadline(1);
        self.store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                Ok(UpdateDeadline::Interrupt)
            } else {
                // Yield so a looping guest never pins a runtime worker thread. tokio's
                // `yield_now` wakes the task only after the timer and I/O drivers ran, so the
                // deadlines and sleeps of other calls keep their time.
                Ok(UpdateDeadline::YieldCustom(
                    1,
                    Box::pin(tokio::task::yield_now()),
                ))
            }
        });
    }

    /// Serves the call `inv`, which ends at `deadline`: its refusals, destinations and roots
    /// are reported to it from now on, and the network opens.
    pub(crate) fn bind(&mut self, inv: &Invocation, deadline: Instant) {
        let state = self.store.data_mut();
        state
            .hooks
            .gate
            .bind(inv.denials.clone(), inv.usage.clone(), deadline);
        state.roots.bind(inv.usage.clone());
    }

    /// Whether the guest reached for the network before the sandbox was bound to its call.
    pub(crate) fn used_network_early(&self) -> bool {
        self.store.data().net().used_early()
    }

    /// Fuel burnt so far, when the call is metered.
    pub(crate) fn fuel_used(&self, limits: &Limits) -> Option<u64> {
        // Asking an unmetered store builds an error (and a backtrace): check the limit first.
        let fuel = limits.fuel?;
        let left = self.store.get_fuel().ok()?;
        Some(fuel.saturating_sub(left))
    }

    /// The answer for a call that asked for more memory than `limits` allow, if it did.
    pub(crate) fn out_of_memory(&self, limits: &Limits) -> Option<ToolError> {
        self.store.data().limiter.refused.then(|| {
            ToolError::new(
                ErrorKind::OutOfMemory,
                format!(
                    "the tool ran out of memory: it asked for more than its limit of {} MiB; \
                     try a smaller input",
                    limits.memory >> 20
                ),
            )
        })
    }

    /// Explains why the guest stopped, for the model first and for people in the details.
    pub(crate) fn failure(&self, err: wasmtime::Error, limits: &Limits) -> ToolError {
        let stderr = self.stderr.contents();
        let tail = tail(&stderr, STDERR_TAIL);
        let trap = err.downcast_ref::<Trap>().copied();
        let full = err
            .chain()
            .find_map(|c| c.downcast_ref::<PoolConcurrencyLimitError>());
        let mut e = if let Some(full) = full {
            // warden's capacity, not the tool's fault: the call never started.
            ToolError::new(
                ErrorKind::Unavailable,
                format!(
                    "warden is running as many WebAssembly calls at once as its engine holds \
                     ({full}); try again when some have finished"
                ),
            )
        } else if let Some(oom) = self.out_of_memory(limits) {
            oom
        } else {
            match trap {
                // Interrupted at the call's deadline, as the dispatcher's timer fires: whichever
                // comes first says the same.
                Some(Trap::Interrupt) => ToolError::timed_out(limits.timeout),
                Some(Trap::OutOfFuel) => ToolError::new(
                    ErrorKind::OutOfFuel,
                    format!(
                        "the tool used up its fuel ({} units of computation) and was stopped; \
                         try a smaller input",
                        limits.fuel.unwrap_or_default()
                    ),
                ),
                Some(Trap::StackOverflow) => ToolError::new(
                    ErrorKind::Trap,
                    "the tool crashed: stack overflow (recursion too deep)",
                ),
                Some(t) => {
                    let why = python_exception(&stderr)
                        .or_else(|| js_exception(&stderr))
                        .or_else(|| panic_message(&stderr))
                        .unwrap_or_else(|| t.to_string());
                    ToolError::new(ErrorKind::Trap, format!("the tool crashed: {why}"))
                }
                None => ToolError::new(
                    ErrorKind::Trap,
                    format!("the tool failed: {}", root_message(&err)),
                ),
            }
        };
        e = e.with_detail("error", format!("{err:?}"));
        if !tail.is_empty() {
            e = e.with_detail("stderr", tail);
        }
        e
    }
}

/// The exit code, if the guest called `exit`.
pub(crate) fn exit_code(err: &wasmtime::Error) -> Option<i32> {
    err.downcast_ref::<I32Exit>().map(|e| e.0)
}

fn internal(e: wasmtime::Error) -> ToolError {
    ToolError::new(
        ErrorKind::Internal,
        format!("cannot set up the sandbox: {e:#}"),
    )
}

fn root_message(err: &wasmtime::Error) -> String {
    err.chain()
        .last()
        .map(ToString::to_string)
        .unwrap_or_default()
}

/// componentize-py prints the traceback, then its runtime panics: the exception line (after
/// the last traceback) is the language's own message.
fn python_exception(stderr: &str) -> Option<String> {
    let start = stderr.rfind("Traceback (most recent call last):")?;
    stderr[start..]
        .lines()
        .skip(1)
        .find(|l| !l.starts_with(' ') && !l.trim().is_empty())
        .map(|l| l.trim().to_owned())
}

/// componentize-js prints an uncaught error's message, then `Stack:` and the frames.
fn js_exception(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().collect();
    let stack = lines.iter().rposition(|l| l.trim_end() == "Stack:")?;
    lines[..stack]
        .iter()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_owned())
}

/// Rust guests print `panicked at FILE:LINE:COL:\nMESSAGE` on stderr before aborting.
fn panic_message(stderr: &str) -> Option<String> {
    let start = stderr.rfind("panicked at ")?;
    let text: Vec<&str> = stderr[start..]
        .lines()
        .take_while(|l| !l.starts_with("note: "))
        .collect();
    Some(text.join(" ").trim().to_owned())
}

fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_messages_are_found() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:12:5:\nkaboom\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(
            panic_message(stderr).as_deref(),
            Some("panicked at src/lib.rs:12:5: kaboom")
        );
        assert_eq!(panic_message("nothing"), None);
        let py = "Traceback (most recent call last):\n  File \"/0/app.py\", line 11, in boom\nValueError: the guest raised this\n\nthread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:\nPython function threw an unexpected exception\n";
        assert_eq!(
            python_exception(py).as_deref(),
            Some("ValueError: the guest raised this")
        );
        assert_eq!(
            js_exception("title.normalize is not a function\nStack:\n  slugify@app.js:8:6\n")
                .as_deref(),
            Some("title.normalize is not a function")
        );
        assert_eq!(js_exception("just text: no error"), None);
        assert_eq!(tail("abcdef", 3), "…def");
    }
}
