//! One MCP connection is one session: its calls share a session id, another connection gets
//! another, and a session ends when its connection closes (a Docker shell is removed then).

use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};
use warden_core::{
    BoxFuture, Executor, Invocation, Output, Protected, SessionId, ToolError, Toolbox,
};
use warden_mcp::{Loader, Options, Server};
use warden_test_support::TestBackend;
use warden_test_support::backend::policy_text;

/// The sessions that ended, in order.
static ENDED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Answers the session id of its call.
struct WhoAmI;

impl Executor for WhoAmI {
    fn execute(&self, inv: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(async move {
            Ok(Output {
                content: inv.session.get().to_string(),
                ..Output::default()
            })
        })
    }

    fn end_session(&self, session: SessionId) -> BoxFuture<'_, ()> {
        ENDED.lock().unwrap().push(session.get());
        Box::pin(async {})
    }
}

fn server(dir: &Path) -> Server {
    std::fs::write(dir.join("fake.toml"), policy_text("")).unwrap();
    let backend = TestBackend::new().tool("whoami", Arc::new(WhoAmI));
    let dir = dir.to_owned();
    let loader: Loader = Arc::new(move || Toolbox::load(&dir, &[&backend], &[] as &[Protected]));
    Server::new(loader, Options::default()).unwrap()
}

struct Client {
    write: WriteHalf<DuplexStream>,
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    served: tokio::task::JoinHandle<()>,
}

impl Client {
    async fn start(server: Server) -> Client {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(theirs);
        let served = tokio::spawn(async move {
            let _ = server.serve_io(read, write).await;
        });
        let (read, write) = tokio::io::split(ours);
        let mut client = Client {
            write,
            lines: BufReader::new(read).lines(),
            served,
        };
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "test", "version": "0"}});
        client.request(0, "initialize", init).await;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let mut line = initialized.to_string().into_bytes();
        line.push(b'\n');
        client.write.write_all(&line).await.unwrap();
        client
    }

    async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        self.write.write_all(&line).await.unwrap();
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

    async fn session(&mut self, id: i64) -> u64 {
        let answer = self
            .request(id, "tools/call", json!({"name": "whoami"}))
            .await;
        let text = answer["result"]["content"][0]["text"].as_str().unwrap();
        text.parse().unwrap()
    }
}

#[tokio::test]
async fn each_connection_is_a_session_that_ends_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path());
    let mut one = Client::start(server.clone()).await;
    let mut two = Client::start(server).await;
    let first = one.session(1).await;
    assert_eq!(one.session(2).await, first, "one connection, one session");
    let second = two.session(1).await;
    assert_ne!(first, second, "another connection, another session");
    assert!(ENDED.lock().unwrap().is_empty());

    // The client goes away: its connection's session ends, the other's does not.
    let Client {
        write,
        lines,
        served,
    } = one;
    drop((write, lines));
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the connection closes")
        .unwrap();
    assert_eq!(*ENDED.lock().unwrap(), [first]);
    assert_eq!(two.session(2).await, second);
}
