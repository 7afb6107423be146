//! One MCP connection is one session: its calls share a session id, another connection gets
//! another, and a session ends when its connection closes (a Docker shell is removed then).

use crate::client::Client;
use serde_json::json;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
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

/// The session a call of `whoami` on `client` ran in.
async fn session(client: &mut Client, id: i64) -> u64 {
    let answer = client
        .request(id, "tools/call", json!({"name": "whoami"}))
        .await;
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    text.parse().unwrap()
}

#[tokio::test]
async fn each_connection_is_a_session_that_ends_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path());
    let (mut one, served) = Client::serving(server.clone()).await;
    let mut two = Client::start(server).await;
    let first = session(&mut one, 1).await;
    assert_eq!(
        session(&mut one, 2).await,
        first,
        "one connection, one session"
    );
    let second = session(&mut two, 1).await;
    assert_ne!(first, second, "another connection, another session");
    assert!(ENDED.lock().unwrap().is_empty());

    // The client goes away: its connection's session ends, the other's does not.
    drop(one);
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the connection closes")
        .unwrap()
        .unwrap();
    assert_eq!(*ENDED.lock().unwrap(), [first]);
    assert_eq!(session(&mut two, 2).await, second);
}
