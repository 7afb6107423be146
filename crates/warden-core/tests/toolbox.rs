//! A toolbox loaded for one call: the policies whose backend tells, without loading them, that
//! they serve other tools are checked and left unloaded; where only the whole toolbox can tell
//! what the call meets (no policy names the tool, two name one), it says so.

use std::path::Path;
use std::sync::Arc;
use warden_core::{BoxFuture, Executor, Invocation, Loading, Output, ToolError, Toolbox};
use warden_test_support::TestBackend;

struct Nothing;

impl Executor for Nothing {
    fn execute(&self, _inv: Invocation) -> BoxFuture<'_, Result<Output, ToolError>> {
        Box::pin(async { Ok(Output::default()) })
    }
}

/// Test policies in `dir`, one a prefix, each serving the backend's tool `t` as `PREFIXt`.
fn policies(dir: &Path, prefixes: &[&str]) {
    for (n, prefix) in prefixes.iter().enumerate() {
        let text = format!("prefix = \"{prefix}\"\n[executor]\nkind = \"test\"\n");
        std::fs::write(dir.join(format!("p{n}.toml")), text).unwrap();
    }
}

fn load_for(backend: &TestBackend, dir: &Path, tool: &str) -> Option<Toolbox> {
    Toolbox::load_for(dir, &[backend], &[], Loading::Strict, tool).unwrap()
}

#[test]
fn a_toolbox_for_one_call_loads_only_the_policies_that_may_serve_it() {
    let dir = tempfile::tempdir().unwrap();
    policies(dir.path(), &["a_", "b_", "c_"]);
    let backend = TestBackend::new().tool("t", Arc::new(Nothing)).naming();
    let toolbox = load_for(&backend, dir.path(), "b_t").expect("b_t is served");
    assert!(toolbox.get("b_t").is_some());
    assert!(toolbox.get("a_t").is_none() && toolbox.get("c_t").is_none());
    assert_eq!(backend.loads(), 1, "the other two were not loaded");

    // A backend that cannot tell names without a load loads every policy.
    let blind = TestBackend::new().tool("t", Arc::new(Nothing));
    let toolbox = load_for(&blind, dir.path(), "b_t").expect("b_t is served");
    assert!(toolbox.get("a_t").is_some() && toolbox.get("c_t").is_some());
    assert_eq!(blind.loads(), 3);
}

#[test]
fn only_the_whole_toolbox_tells_of_a_tool_no_policy_names_or_one_two_name() {
    let dir = tempfile::tempdir().unwrap();
    policies(dir.path(), &["a_", "b_"]);
    let backend = TestBackend::new().tool("t", Arc::new(Nothing)).naming();
    assert!(load_for(&backend, dir.path(), "z_t").is_none());
    // Two policies name `a_t`, one of them left unloaded: the whole toolbox is refused for it.
    policies(dir.path(), &["a_", "b_", "a_"]);
    assert!(load_for(&backend, dir.path(), "b_t").is_none());
    let whole = Toolbox::load_with(dir.path(), &[&backend], &[], Loading::Strict);
    assert!(whole.is_err_and(|e| e.to_string().contains("two tools are named `a_t`")));
}
