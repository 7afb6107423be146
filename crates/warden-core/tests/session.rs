//! Sessions: every call of a dispatcher (and its clones) carries one session id; a new session
//! gets another; executors hear when a session ends — at `close`, or when the last dispatcher
//! of the session is dropped.

use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_core::{
    BoxFuture, Dispatcher, Executor, Invocation, Output, SessionId, ToolCall, ToolError,
};
use warden_test_support::TestBackend;

/// Answers its call's session id; records the sessions that ended.
#[derive(Default)]
struct WhoAmI {
    ended: Mutex<Vec<SessionId>>,
}

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
        self.ended.lock().unwrap().push(session);
        Box::pin(async {})
    }
}

fn dispatcher(executor: &Arc<WhoAmI>) -> Dispatcher {
    let dir = tempfile::tempdir().unwrap();
    let toolbox = TestBackend::new()
        .tool("whoami", executor.clone())
        .toolbox(dir.path(), "")
        .unwrap();
    Dispatcher::new(Arc::new(toolbox))
}

async fn session_of(d: &Dispatcher) -> String {
    d.call(ToolCall::new("c", "whoami", &json!({})))
        .await
        .content
}

#[tokio::test]
async fn calls_carry_their_session_and_executors_hear_when_it_ends() {
    let executor = Arc::new(WhoAmI::default());
    let d = dispatcher(&executor);
    let first = session_of(&d).await;
    assert_eq!(
        session_of(&d.clone()).await,
        first,
        "clones share the session"
    );
    assert_eq!(first, d.session().get().to_string());
    let other = d.new_session();
    let second = session_of(&other).await;
    assert_ne!(first, second);

    d.close().await;
    assert_eq!(*executor.ended.lock().unwrap(), [d.session()]);
    d.close().await;
    assert_eq!(executor.ended.lock().unwrap().len(), 1, "nothing ran since");

    // Dropping the last dispatcher of a session ends it too (in a task of the runtime).
    let other_id = other.session();
    drop(other);
    for _ in 0..100 {
        if executor.ended.lock().unwrap().contains(&other_id) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the dropped session never ended");
}
