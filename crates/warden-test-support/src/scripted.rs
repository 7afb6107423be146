//! A scripted OpenAI-compatible Chat Completions server on 127.0.0.1: one canned reply per
//! request, in order, and a record of every request it received: the one test double, for the
//! model provider that cannot run here.

use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One canned reply.
pub enum Reply {
    /// A status, extra headers and a JSON body.
    Json(u16, Vec<(String, String)>, Value),
    /// Waits, then replies (or the client gives up first).
    Late(Duration, Box<Reply>),
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Request {
    /// When its head had arrived.
    pub at: Instant,
    pub authorization: Option<String>,
    pub body: Value,
}

impl Request {
    /// The tool messages the request carries, by `tool_call_id`, in order.
    pub fn tool_messages(&self) -> Vec<(String, String)> {
        self.body["messages"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .filter(|m| m["role"] == "tool")
                    .map(|m| {
                        (
                            m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                            m["content"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The content of the tool message answering `id` (the last one, if several).
    pub fn answer(&self, id: &str) -> String {
        self.tool_messages()
            .into_iter()
            .rev()
            .find(|(i, _)| i == id)
            .map(|(_, c)| c)
            .unwrap_or_else(|| panic!("no tool message for {id} in {:#}", self.body))
    }
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    requests: Vec<Request>,
    /// When each reply was written.
    replied: Vec<Instant>,
}

/// The server; it lives as long as the test process.
pub struct Scripted {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl Scripted {
    pub fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            replies: replies.into(),
            ..State::default()
        }));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let state = shared.clone();
                std::thread::spawn(move || serve(stream, &state));
            }
        });
        Self { addr, state }
    }

    /// `http://127.0.0.1:PORT/v1`, as OPENAI_BASE_URL.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().requests.clone()
    }

    /// When each reply was written, in order.
    pub fn replied(&self) -> Vec<Instant> {
        self.state.lock().unwrap().replied.clone()
    }

    /// Adds replies at the end of the script.
    pub fn push(&self, replies: Vec<Reply>) {
        self.state.lock().unwrap().replies.extend(replies);
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>) {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    let mut length = 0usize;
    let mut authorization = None;
    let mut path = String::new();
    loop {
        head.clear();
        if reader.read_line(&mut head).unwrap_or(0) == 0 {
            return;
        }
        let line = head.trim_end();
        if path.is_empty() {
            path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned();
            continue;
        }
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap_or(0),
                "authorization" => authorization = Some(value.trim().to_owned()),
                _ => {}
            }
        }
    }
    let at = Instant::now();
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let reply = {
        let mut s = state.lock().unwrap();
        s.requests.push(Request {
            at,
            authorization,
            body,
        });
        if path != "/v1/chat/completions" {
            Reply::Json(
                404,
                vec![],
                json!({"error": {"message": format!("no route {path}")}}),
            )
        } else {
            s.replies.pop_front().unwrap_or_else(|| {
                Reply::Json(
                    400,
                    vec![],
                    json!({"error": {"message": "the scripted server has no reply left", "code": "script_exhausted"}}),
                )
            })
        }
    };
    let mut stream = reader.into_inner();
    respond(&mut stream, reply);
    state.lock().unwrap().replied.push(Instant::now());
}

fn respond(stream: &mut TcpStream, reply: Reply) {
    match reply {
        Reply::Late(wait, reply) => {
            std::thread::sleep(wait);
            respond(stream, *reply);
        }
        Reply::Json(status, headers, body) => {
            let body = body.to_string();
            let mut text = format!(
                "HTTP/1.1 {status} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                text.push_str(&format!("{k}: {v}\r\n"));
            }
            text.push_str("\r\n");
            text.push_str(&body);
            let _ = stream.write_all(text.as_bytes());
        }
    }
}

/// A completion whose message asks for these calls: (id, tool, arguments as JSON text).
pub fn calls(list: &[(&str, &str, &str)]) -> Reply {
    let tool_calls: Vec<Value> = list
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
        })
        .collect();
    completion(
        json!({"role": "assistant", "content": null, "tool_calls": tool_calls}),
        "tool_calls",
    )
}

/// A completion that answers with text and asks for nothing.
pub fn answer(text: &str) -> Reply {
    completion(json!({"role": "assistant", "content": text}), "stop")
}

/// An error status with OpenAI's error body and extra headers.
pub fn error(status: u16, headers: &[(&str, &str)], message: &str, code: &str) -> Reply {
    Reply::Json(
        status,
        headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        json!({"error": {"message": message, "type": "invalid_request_error", "code": code}}),
    )
}

fn completion(message: Value, finish: &str) -> Reply {
    Reply::Json(
        200,
        vec![],
        json!({
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }),
    )
}
