//! A batch: each call in a task of its own, answered in the order of the calls whatever
//! happens to each (refused by a check, panicked, aborted by `fail_fast`).

use super::span::CallSpan;
use super::{Dispatcher, panicked, parse_arguments};
use crate::message::{ErrorKind, Status, ToolCall, ToolError, ToolMessage};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Instant;
use tokio::task::{Id, JoinError, JoinSet};

/// A batch while it runs: its answers so far, by the position of their calls, and the tasks
/// of the calls still running.
struct Running<'a> {
    calls: &'a [ToolCall],
    start: Instant,
    answers: Vec<Option<ToolMessage>>,
    tasks: JoinSet<ToolMessage>,
    /// The position of each task's call.
    index_of: HashMap<Id, usize>,
    /// The position of the first call that failed.
    failed: Option<usize>,
}

impl Running<'_> {
    /// Keeps the answer of the call at `i`; the first failure aborts the rest under
    /// `fail_fast`.
    fn answered(&mut self, i: usize, message: ToolMessage, fail_fast: bool) {
        if message.status == Status::Error && self.failed.is_none() {
            self.failed = Some(i);
            if fail_fast {
                self.tasks.abort_all();
            }
        }
        self.answers[i] = Some(message);
    }
}

impl Dispatcher {
    /// The answers to `calls`, in their order, each call a child of `batch`.
    pub(super) async fn dispatch_in(
        &self,
        calls: Vec<ToolCall>,
        batch: &tracing::Span,
    ) -> Vec<ToolMessage> {
        let mut running = self.start_batch(&calls, batch);
        let refused =
            |a: &Option<ToolMessage>| a.as_ref().is_some_and(|m| m.status == Status::Error);
        running.failed = running.answers.iter().position(refused);
        if self.fail_fast && running.failed.is_some() {
            running.tasks.abort_all();
        }
        while let Some(joined) = running.tasks.join_next_with_id().await {
            if let Some((i, message)) = self.joined(&running, joined) {
                running.answered(i, message, self.fail_fast);
            }
        }
        self.unanswered(running)
    }

    /// Starts each call of `calls` in a task of its own, and answers at once those refused
    /// by a check that needs no task: a reused id, an unknown tool, a run limit.
    fn start_batch<'a>(&self, calls: &'a [ToolCall], batch: &tracing::Span) -> Running<'a> {
        let start = Instant::now();
        let mut running = Running {
            calls,
            start,
            answers: vec![None; calls.len()],
            tasks: JoinSet::new(),
            index_of: HashMap::new(),
            failed: None,
        };
        let mut seen = HashSet::new();
        for (i, call) in calls.iter().enumerate() {
            let span = CallSpan::new(call, Some(batch));
            if !seen.insert(call.id.as_str()) {
                // Logged but not told to the observer: it knows calls by id, and this id is
                // the earlier call's, which may still be running.
                let tool = self.toolbox.get(&call.name);
                let error = ToolError::reused_id(&call.id);
                let took = start.elapsed();
                running.answers[i] = Some(self.log_early(&span, call, tool, error, took));
                continue;
            }
            if let Err((tool, error)) = self.admit_call(call) {
                let took = start.elapsed();
                running.answers[i] = Some(self.answer_early(&span, call, tool, error, took));
                continue;
            }
            let handle = running
                .tasks
                .spawn(self.call_task(call.clone(), span, start));
            running.index_of.insert(handle.id(), i);
        }
        running
    }

    /// The task of a call that passed the batch's checks. Its arguments are parsed in it, so
    /// a batch's parsing spreads over the runtime's threads like the rest of its work.
    fn call_task(
        &self,
        call: ToolCall,
        span: CallSpan,
        start: Instant,
    ) -> impl Future<Output = ToolMessage> + Send + 'static {
        let this = self.clone();
        async move {
            let checked = this
                .tool_for(&call)
                .map_err(|e| (None, e))
                .and_then(|tool| {
                    parse_arguments(&call.arguments)
                        .map(|a| (tool, a))
                        .map_err(|e| (Some(tool), e))
                });
            match checked {
                Ok((tool, arguments)) => this.run(&span, &call, tool, arguments, None).await,
                Err((tool, error)) => this.answer_early(&span, &call, tool, error, start.elapsed()),
            }
        }
    }

    /// The position and answer of a task that ended: its own answer, or a panic's. None for
    /// a task that `fail_fast` aborted (answered at the end) or one not of this batch.
    fn joined(
        &self,
        running: &Running<'_>,
        joined: Result<(Id, ToolMessage), JoinError>,
    ) -> Option<(usize, ToolMessage)> {
        match joined {
            Ok((id, message)) => running.index_of.get(&id).map(|&i| (i, message)),
            Err(e) if e.is_cancelled() => None,
            Err(e) => {
                let &i = running.index_of.get(&e.id())?;
                let call = &running.calls[i];
                tracing::error!(call = %call.id, "the executor panicked: {e}");
                let tool = self.toolbox.get(&call.name);
                // The call's span ended with the task, saying it failed.
                let took = running.start.elapsed();
                let message = self.answer_early(&CallSpan::none(), call, tool, panicked(), took);
                Some((i, message))
            }
        }
    }

    /// The answers in the order of the calls: a call without one was aborted by `fail_fast`
    /// (or, were it ever so, lost), and its answer says so.
    fn unanswered(&self, running: Running<'_>) -> Vec<ToolMessage> {
        let took = running.start.elapsed();
        let calls = running.calls;
        let failed = running.failed;
        running
            .answers
            .into_iter()
            .zip(calls)
            .map(|(answer, call)| {
                answer.unwrap_or_else(|| {
                    let error = match failed {
                        Some(f) if self.fail_fast => ToolError::new(
                            ErrorKind::Unavailable,
                            format!(
                                "not run: call `{}` of this batch failed first, and fail_fast \
                                 is on",
                                calls[f].id
                            ),
                        ),
                        _ => ToolError::new(ErrorKind::Internal, "no answer was produced"),
                    };
                    // An aborted task's span ended with it.
                    let tool = self.toolbox.get(&call.name);
                    self.answer_early(&CallSpan::none(), call, tool, error, took)
                })
            })
            .collect()
    }
}
