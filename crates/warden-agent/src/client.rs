//! A Chat Completions client for any OpenAI-compatible endpoint, retrying what is transient.

use crate::retry::{RetryPolicy, retry_after};
use crate::trace;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tracing::Instrument as _;
use warden_core::{ToolCall, ToolSpec};

/// Where the model is and how to talk to it; the OpenAI SDKs' settings.
#[derive(Debug, Clone)]
pub struct ChatConfig {
    /// Such as `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1` (`OPENAI_BASE_URL`).
    pub base_url: String,
    /// Sent as a bearer token when set (`OPENAI_API_KEY`); local servers often need none.
    pub api_key: Option<String>,
    pub model: String,
    /// One request's limit, from connecting to the last byte of the reply.
    pub timeout: Duration,
    pub retry: RetryPolicy,
}

impl ChatConfig {
    /// The OpenAI SDKs' default endpoint.
    pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
    /// The OpenAI SDKs' default request timeout.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
}

/// Why a model call failed for good.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChatError {
    /// The provider answered and refused: a bad key, an unknown model, a context too long.
    #[error("the model provider refused the request (HTTP {status}{}): {message}", code.as_deref().map(|c| format!(", {c}")).unwrap_or_default())]
    Provider {
        status: u16,
        message: String,
        code: Option<String>,
    },
    /// Transient failures (429, 5xx, timeouts, lost connections) outlasted the retries.
    #[error("the model provider did not answer after {attempts} attempt(s); the last: {last}")]
    Exhausted { attempts: u32, last: String },
    /// The reply is not a chat completion.
    #[error("the model's reply is not a chat completion: {0}")]
    BadReply(String),
    /// No request could be made: a base URL that is not one, an HTTP client that cannot start.
    #[error("cannot send a request to the model: {0}")]
    Setup(String),
}

impl ChatError {
    /// A short name for the failure, as traces name errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Provider { .. } => "provider",
            Self::Exhausted { .. } => "exhausted",
            Self::BadReply(_) => "bad_reply",
            Self::Setup(_) => "setup",
        }
    }
}

/// One request to the model, as it went: for the transcript and the progress display.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// 1 for the first request of a model call.
    pub number: u32,
    pub status: Option<u16>,
    pub took: Duration,
    /// What went wrong, when something did.
    pub error: Option<String>,
    /// When the request will be tried again.
    pub retry_in: Option<Duration>,
}

/// The assistant's turn: its text and the tools it asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct AssistantTurn {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    /// The provider's token counts, as it sent them.
    pub usage: Option<Value>,
}

impl AssistantTurn {
    /// The assistant message to send back with the conversation.
    pub fn to_message(&self) -> Value {
        let mut m = json!({"role": "assistant", "content": self.content});
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    })
                })
                .collect();
            m["tool_calls"] = calls.into();
        }
        m
    }
}

/// A chat client: one per run.
pub struct ChatClient {
    config: ChatConfig,
    http: reqwest::Client,
    url: String,
    /// The URL read, for the spans' server address (an unreadable one fails when sent).
    parsed: Option<reqwest::Url>,
}

impl ChatClient {
    /// A client for `config`; nothing is sent yet.
    pub fn new(config: ChatConfig) -> Result<Self, ChatError> {
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .user_agent(concat!("warden/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ChatError::Setup(format!("cannot build the HTTP client: {e}")))?;
        let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        let parsed = reqwest::Url::parse(&url).ok();
        Ok(Self {
            config,
            http,
            url,
            parsed,
        })
    }

    /// The settings it was made with.
    pub fn config(&self) -> &ChatConfig {
        &self.config
    }

    /// Asks the model for its next turn. At most `max_attempts` requests are sent (retries
    /// included); `on_attempt` hears of each.
    pub async fn complete(
        &self,
        messages: &[Value],
        tools: &[Value],
        max_attempts: u32,
        on_attempt: &(dyn Fn(&Attempt) + Sync),
    ) -> Result<AssistantTurn, ChatError> {
        // Borrowed, not copied: the conversation grows with every step.
        let body = Request {
            model: &self.config.model,
            messages,
            tools,
        };
        let mut number = 0;
        loop {
            number += 1;
            let start = Instant::now();
            let span = trace::chat_span(&self.config.model, self.parsed.as_ref(), number);
            let sent = self.send(&body).instrument(span.clone()).await;
            match &sent {
                Ok(reply) => trace::replied(&span, reply),
                Err(Failure::Fatal(e)) => trace::failed(&span, status_of(e), e.kind()),
                Err(Failure::Transient { status, .. }) => {
                    trace::failed(&span, *status, "transport");
                }
            }
            let (status, message, asked) = match sent {
                Ok(reply) => {
                    on_attempt(&Attempt {
                        number,
                        status: Some(200),
                        took: start.elapsed(),
                        error: None,
                        retry_in: None,
                    });
                    return parse_reply(&reply);
                }
                Err(Failure::Fatal(e)) => {
                    on_attempt(&Attempt {
                        number,
                        status: status_of(&e),
                        took: start.elapsed(),
                        error: Some(e.to_string()),
                        retry_in: None,
                    });
                    return Err(e);
                }
                Err(Failure::Transient {
                    status,
                    message,
                    wait,
                }) => (status, message, wait),
            };
            let delay = self.config.retry.delay(number, asked);
            let retry_in = delay
                .as_ref()
                .ok()
                .copied()
                .filter(|_| number < max_attempts);
            on_attempt(&Attempt {
                number,
                status,
                took: start.elapsed(),
                error: Some(message.clone()),
                retry_in,
            });
            match (retry_in, delay) {
                (Some(d), _) => tokio::time::sleep(d).await,
                (None, Err(why)) => {
                    return Err(ChatError::Exhausted {
                        attempts: number,
                        last: format!("{message}; {why}"),
                    });
                }
                (None, Ok(_)) => {
                    return Err(ChatError::Exhausted {
                        attempts: number,
                        last: message,
                    });
                }
            }
        }
    }

    async fn send(&self, body: &Request<'_>) -> Result<Value, Failure> {
        let mut request = self.http.post(&self.url).json(body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        let wait = retry_after(response.headers());
        let text = response.text().await.map_err(transport)?;
        if status.is_success() {
            let value: Value = serde_json::from_str(&text).map_err(|e| {
                Failure::Fatal(ChatError::BadReply(format!(
                    "not JSON ({e}): {}",
                    clip(&text)
                )))
            })?;
            // Some gateways wrap a provider's refusal in a 200.
            if let Some(err) = value.get("error").filter(|e| !e.is_null()) {
                return Err(Failure::Fatal(provider_error(status, err)));
            }
            return Ok(value);
        }
        if status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
            || status.is_server_error()
        {
            return Err(Failure::Transient {
                status: Some(status.as_u16()),
                message: format!("HTTP {}: {}", status.as_u16(), error_text(&text)),
                wait,
            });
        }
        let err = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.get("error").cloned())
            .unwrap_or_else(|| Value::String(clip(&text)));
        Err(Failure::Fatal(provider_error(status, &err)))
    }
}

/// The body of a Chat Completions request.
#[derive(serde::Serialize)]
struct Request<'a> {
    model: &'a str,
    messages: &'a [Value],
    #[serde(skip_serializing_if = "<[Value]>::is_empty")]
    tools: &'a [Value],
}

enum Failure {
    Fatal(ChatError),
    Transient {
        status: Option<u16>,
        message: String,
        wait: Option<Duration>,
    },
}

fn transport(e: reqwest::Error) -> Failure {
    if e.is_builder() {
        return Failure::Fatal(ChatError::Setup(error_chain(&e)));
    }
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "connection failed"
    };
    Failure::Transient {
        status: None,
        message: format!("{what}: {}", error_chain(&e)),
        wait: None,
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn status_of(e: &ChatError) -> Option<u16> {
    match e {
        ChatError::Provider { status, .. } => Some(*status),
        _ => None,
    }
}

fn provider_error(status: StatusCode, err: &Value) -> ChatError {
    let (message, code) = match err {
        Value::Object(o) => (
            o.get("message")
                .and_then(Value::as_str)
                .map_or_else(|| err.to_string(), str::to_owned),
            o.get("code")
                .or_else(|| o.get("type"))
                .and_then(|c| match c {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                }),
        ),
        Value::String(s) => (s.clone(), None),
        other => (other.to_string(), None),
    };
    let message = if status == StatusCode::UNAUTHORIZED {
        format!("{message} (check OPENAI_API_KEY)")
    } else {
        message
    };
    ChatError::Provider {
        status: status.as_u16(),
        message,
        code,
    }
}

/// The message of an error body, or the body itself, short.
fn error_text(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| clip(text))
}

fn clip(text: &str) -> String {
    const MAX: usize = 500;
    match text.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// Reads the first choice of a chat completion.
fn parse_reply(reply: &Value) -> Result<AssistantTurn, ChatError> {
    let choice = reply["choices"]
        .get(0)
        .ok_or_else(|| ChatError::BadReply(format!("no choices: {}", clip(&reply.to_string()))))?;
    let message = &choice["message"];
    if !message.is_object() {
        return Err(ChatError::BadReply(format!(
            "the first choice has no message: {}",
            clip(&choice.to_string())
        )));
    }
    let content = match &message["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        // Content parts: keep the text ones.
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
        ),
        other => Some(other.to_string()),
    };
    let tool_calls = match &message["tool_calls"] {
        Value::Array(calls) => calls.iter().map(tool_call).collect(),
        _ => Vec::new(),
    };
    Ok(AssistantTurn {
        content,
        tool_calls,
        finish_reason: choice["finish_reason"].as_str().map(str::to_owned),
        usage: reply.get("usage").filter(|u| !u.is_null()).cloned(),
    })
}

/// One call as the model wrote it; what is missing stays empty for the dispatcher to answer.
fn tool_call(v: &Value) -> ToolCall {
    let f = &v["function"];
    let arguments = match &f["arguments"] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        // Some local servers send the object itself.
        other => other.to_string(),
    };
    ToolCall {
        id: v["id"].as_str().unwrap_or_default().to_owned(),
        name: f["name"].as_str().unwrap_or_default().to_owned(),
        arguments,
    }
}

/// The `tools` parameter: each tool as a function schema.
pub(crate) fn function_schemas<'a>(specs: impl IntoIterator<Item = &'a ToolSpec>) -> Vec<Value> {
    specs
        .into_iter()
        .map(|s| {
            json!({
                "type": "function",
                "function": {
                    "name": s.name,
                    "description": s.description,
                    "parameters": s.input_schema,
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_reply_with_tool_calls() {
        let reply = json!({"choices": [{"message": {"role": "assistant", "content": null,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}},
                {"id": "b", "type": "function", "function": {"name": "add", "arguments": {"a": 2}}}
            ]}, "finish_reason": "tool_calls"}]});
        let turn = parse_reply(&reply).unwrap();
        assert_eq!(turn.content, None);
        assert_eq!(turn.tool_calls[0].arguments, "{\"a\":1}");
        assert_eq!(turn.tool_calls[1].arguments, "{\"a\":2}");
        let back = turn.to_message();
        assert_eq!(back["tool_calls"][1]["function"]["arguments"], "{\"a\":2}");
        assert!(parse_reply(&json!({"choices": []})).is_err());
    }

    #[test]
    fn provider_errors_keep_the_code() {
        let e = provider_error(
            StatusCode::BAD_REQUEST,
            &json!({"message": "too long", "code": "context_length_exceeded"}),
        );
        assert!(e.to_string().contains("context_length_exceeded"), "{e}");
        let e = provider_error(StatusCode::UNAUTHORIZED, &json!({"message": "bad key"}));
        assert!(e.to_string().contains("OPENAI_API_KEY"), "{e}");
    }
}
