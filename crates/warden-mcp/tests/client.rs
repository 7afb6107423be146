//! The tests' MCP client: JSON lines over an in-process transport to a server, its answers
//! read whole, each waited for at most 30 s.

use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};
use warden_mcp::Server;

/// The task serving a client's transport: it ends when the server returns.
pub(crate) type Serving = tokio::task::JoinHandle<Result<(), warden_mcp::Error>>;

pub(crate) struct Client {
    pub(crate) write: WriteHalf<DuplexStream>,
    pub(crate) lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
}

impl Client {
    /// A client of `server` that has opened no session (a 2026-07-28 client names its
    /// protocol version in each request), and the task serving it.
    pub(crate) fn connect(server: Server) -> (Client, Serving) {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(theirs);
        let serving = tokio::spawn(server.serve_io(read, write));
        let (read, write) = tokio::io::split(ours);
        let client = Client {
            write,
            lines: BufReader::new(read).lines(),
        };
        (client, serving)
    }

    /// A client with an initialized session (protocol 2025-06-18).
    pub(crate) async fn start(server: Server) -> Client {
        Client::serving(server).await.0
    }

    /// [`Client::start`], and the task serving it.
    pub(crate) async fn serving(server: Server) -> (Client, Serving) {
        let (mut client, serving) = Client::connect(server);
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "test", "version": "0"}});
        client.request(0, "initialize", init).await;
        client
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        (client, serving)
    }

    pub(crate) async fn send(&mut self, message: Value) {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        self.write.write_all(&line).await.unwrap();
    }

    /// The answer to request `id`: `method` with `params`.
    pub(crate) async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(message).await;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
                .await
                .expect("an answer in time")
                .unwrap()
                .expect("the server is still there");
            let answer: Value = serde_json::from_str(&line).unwrap();
            if answer["id"] == id {
                return answer;
            }
        }
    }
}
