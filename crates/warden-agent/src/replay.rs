//! Reading a transcript back: the conversation so far, the calls counted, and the turn whose
//! calls were not all answered when the last process stopped.

use crate::limits::{Limits, StopReason};
use crate::transcript::{Event, Line};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use warden_core::{Decision, RunLimitHit, ToolCall, ToolError};

/// A run as its transcript tells it.
#[derive(Debug, Clone)]
pub(crate) struct Replay {
    pub run_id: String,
    pub task: String,
    pub model: String,
    pub base_url: String,
    pub limits: Limits,
    pub messages: Vec<Value>,
    pub steps: u32,
    pub model_calls: u32,
    /// The tool of each call the dispatcher counted against the run's limits, to count them
    /// again in the process that carries the run on.
    pub counted: Vec<String>,
    /// The last assistant turn, when some of its calls have no answer in the conversation.
    pub open: Option<OpenTurn>,
    /// The reason of the last stop, when nothing happened after it.
    pub stopped: Option<StopReason>,
}

/// An assistant turn cut short: what happened to each of its calls.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpenTurn {
    pub calls: Vec<ToolCall>,
    /// Full ToolMessages (the transcript's `answered`) by call id.
    pub answered: HashMap<String, Value>,
    /// Calls that entered their sandbox.
    pub started: HashSet<String>,
    /// Decisions already made.
    pub decisions: HashMap<String, Decision>,
    /// Calls whose model-facing answer is already in the conversation.
    pub in_conversation: HashSet<String>,
}

impl Replay {
    /// Rebuilds a run; `None` when the lines do not start with a run header.
    pub(crate) fn read(lines: &[Line]) -> Option<Replay> {
        let Some(Event::Run {
            run_id,
            task,
            model,
            base_url,
            limits,
            ..
        }) = lines.first().map(|l| &l.event)
        else {
            return None;
        };
        let mut r = Replay {
            run_id: run_id.clone(),
            task: task.clone(),
            model: model.clone(),
            base_url: base_url.clone(),
            limits: limits.clone(),
            messages: Vec::new(),
            steps: 0,
            model_calls: 0,
            counted: Vec::new(),
            open: None,
            stopped: None,
        };
        let mut turn: Option<OpenTurn> = None;
        for line in &lines[1..] {
            if !matches!(line.event, Event::Stop { .. }) {
                r.stopped = None;
            }
            match &line.event {
                Event::Run { .. } => {}
                Event::Resume {
                    model,
                    base_url,
                    limits,
                } => {
                    r.model = model.clone();
                    r.base_url = base_url.clone();
                    r.limits = limits.clone();
                }
                Event::Message { message } => {
                    if message["role"] == "assistant" {
                        if let Some(done) = turn.take() {
                            r.count(&done);
                        }
                        r.steps += 1;
                        let calls = calls_of(message);
                        if !calls.is_empty() {
                            turn = Some(OpenTurn {
                                calls,
                                ..OpenTurn::default()
                            });
                        }
                    } else if message["role"] == "tool"
                        && let (Some(t), Some(id)) = (&mut turn, message["tool_call_id"].as_str())
                    {
                        t.in_conversation.insert(id.to_owned());
                    }
                    r.messages.push(message.clone());
                }
                Event::ModelCall { .. } => r.model_calls += 1,
                Event::Decision {
                    call_id, decision, ..
                } => {
                    if let Some(t) = &mut turn {
                        t.decisions.insert(call_id.clone(), decision.clone());
                    }
                }
                Event::Pending { .. } | Event::ChangesDecision { .. } => {}
                Event::Started { call_id, .. } => {
                    if let Some(t) = &mut turn {
                        t.started.insert(call_id.clone());
                    }
                }
                Event::Answered { message } => {
                    if let (Some(t), Some(id)) = (&mut turn, message["tool_call_id"].as_str()) {
                        t.answered.insert(id.to_owned(), message.clone());
                    }
                }
                Event::Stop { reason, .. } => r.stopped = Some(reason.clone()),
            }
        }
        if let Some(t) = turn {
            r.count(&t);
            let unique: HashSet<&str> = t.calls.iter().map(|c| c.id.as_str()).collect();
            if unique.iter().any(|id| !t.in_conversation.contains(*id)) {
                r.open = Some(t);
            }
        }
        Some(r)
    }

    /// The calls of a turn the dispatcher counted: each first use of an id, unless a run limit
    /// refused it. A call of the open turn that neither started nor has an answer is left out:
    /// it runs when the run is carried on, and counts then.
    fn count(&mut self, turn: &OpenTurn) {
        let mut seen = HashSet::new();
        for call in &turn.calls {
            if !seen.insert(call.id.as_str()) {
                continue;
            }
            let answer = turn.answered.get(&call.id);
            let refused = answer
                .and_then(|m| serde_json::from_value::<ToolError>(m["error"].clone()).ok())
                .is_some_and(|e| RunLimitHit::of(&e).is_some());
            let runs_again = answer.is_none()
                && !turn.started.contains(&call.id)
                && !turn.in_conversation.contains(&call.id);
            if !refused && !runs_again {
                self.counted.push(call.name.clone());
            }
        }
    }
}

/// The calls of an assistant message, as the transcript wrote them (ids already filled in).
pub(crate) fn calls_of(message: &Value) -> Vec<ToolCall> {
    let Some(calls) = message["tool_calls"].as_array() else {
        return Vec::new();
    };
    calls
        .iter()
        .map(|c| ToolCall {
            id: c["id"].as_str().unwrap_or_default().to_owned(),
            name: c["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            arguments: c["function"]["arguments"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(event: Event) -> Line {
        Line { ts_ms: 0, event }
    }

    fn message(v: Value) -> Line {
        line(Event::Message { message: v })
    }

    fn header() -> Line {
        line(Event::Run {
            run_id: "r".into(),
            task: "t".into(),
            system: None,
            model: "m".into(),
            base_url: "u".into(),
            tools: vec![],
            limits: Limits::default(),
            warden: "0".into(),
        })
    }

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "add", "arguments": "{}"}})
    }

    #[test]
    fn finds_the_turn_that_was_cut_short() {
        let lines = vec![
            header(),
            message(json!({"role": "user", "content": "t"})),
            line(Event::ModelCall {
                step: 1,
                attempt: 1,
                status: Some(200),
                ms: 1.0,
                error: None,
                retry_in_ms: None,
                usage: None,
            }),
            message(json!({"role": "assistant", "content": null, "tool_calls": [call("a")]})),
            message(json!({"role": "tool", "tool_call_id": "a", "content": "1"})),
            message(
                json!({"role": "assistant", "content": null, "tool_calls": [call("b"), call("c"), call("d")]}),
            ),
            line(Event::Started {
                call_id: "b".into(),
                tool: "add".into(),
                arguments: json!({}),
            }),
            line(Event::Started {
                call_id: "c".into(),
                tool: "add".into(),
                arguments: json!({}),
            }),
            line(Event::Answered {
                message: json!({"role": "tool", "tool_call_id": "b", "content": "2"}),
            }),
        ];
        let r = Replay::read(&lines).unwrap();
        // `d` neither started nor was answered: it runs on resume, and is counted then.
        assert_eq!((r.steps, r.model_calls, r.counted.len()), (2, 1, 3));
        assert_eq!(r.messages.len(), 4);
        let open = r.open.unwrap();
        assert_eq!(open.calls.len(), 3);
        assert!(open.answered.contains_key("b"));
        assert!(open.started.contains("c") && !open.answered.contains_key("c"));
        assert!(!open.started.contains("d"));
        assert!(Replay::read(&lines[1..]).is_none());
    }

    #[test]
    fn counts_the_calls_the_dispatcher_counted() {
        let refusal = json!({"role": "tool", "tool_call_id": "c", "content": "…",
            "error": {"kind": "limit_exceeded", "message": "…",
                      "details": {"run_limit": "max_calls", "limit": 2}}});
        let lines = vec![
            header(),
            message(
                json!({"role": "assistant", "content": null, "tool_calls": [call("a"), call("a"), call("b"), call("c")]}),
            ),
            line(Event::Answered { message: refusal }),
            message(json!({"role": "tool", "tool_call_id": "a", "content": "1"})),
            message(json!({"role": "tool", "tool_call_id": "a", "content": "reused"})),
            message(json!({"role": "tool", "tool_call_id": "b", "content": "2"})),
            message(json!({"role": "tool", "tool_call_id": "c", "content": "refused"})),
        ];
        let r = Replay::read(&lines).unwrap();
        assert!(r.open.is_none());
        assert_eq!(
            r.counted,
            ["add", "add"],
            "`a` once and `b`; not the reused id, not the refused call"
        );
    }
}
