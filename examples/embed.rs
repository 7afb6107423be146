//! A Rust agent embedding warden: one batch of tool calls, in-process, through the same path
//! as every front end. Run from the repository root after the example tools are built (`warden
//! demo` or `scripts/test` builds them):
//!
//!     cargo run --example embed [-- POLICIES_DIR]

use serde_json::json;
use std::process::ExitCode;
use warden::{RunLimits, ToolCall, Warden};

fn main() -> ExitCode {
    // Host tools re-execute this program as their sandbox helper.
    warden::run_host_helper_if_asked();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let policies = std::env::args().nth(1).unwrap_or_else(|| "policies".into());
    let home = tempfile::tempdir()?;
    let warden = Warden::builder(policies).home(home.path()).build()?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let session = warden.dispatcher(RunLimits::default())?;
        for tool in session.toolbox().tools() {
            println!("tool {}: {}", tool.spec.name, tool.spec.description);
        }
        // What a model's turn asks for: three calls at once, one of them mistaken.
        let batch = vec![
            ToolCall::new(
                "call-1",
                "convert",
                &json!({"quantity": {"value": 5, "unit": "mile"}, "to": "kilometer"}),
            ),
            ToolCall::new("call-2", "list-dir", &json!({"path": "."})),
            ToolCall::new("call-3", "convrt", &json!({})),
        ];
        for message in session.dispatch(batch).await {
            println!("{}", message.to_openai());
        }
        session.close().await;
        Ok::<_, warden::Error>(())
    })?;
    Ok(())
}
