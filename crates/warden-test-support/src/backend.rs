//! `kind = "test"`: a backend whose tools are executors a test hands it. It is also the proof
//! that a new executor kind is a crate and one registration line: nothing in warden-core
//! names it.

use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use warden_core::{
    Backend, Capabilities, Executor, ExecutorKind, Loaded, LoadedTool, NetHosts, Paths, Policy,
    PolicyError, Reach, Report, ReportLine, Support, ToolSpec, Toolbox,
};

/// Tools that run the executors given, under policies of `kind = "test"`.
#[derive(Clone, Default)]
pub struct TestBackend {
    tools: Vec<(ToolSpec, Arc<dyn Executor>)>,
    /// It tells its tools' names without a load ([`Backend::names`]).
    naming: bool,
    /// The policies it loaded, counted across its clones.
    loads: Arc<AtomicUsize>,
}

impl TestBackend {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool taking any object, with no output schema.
    pub fn tool(self, name: &str, executor: Arc<dyn Executor>) -> Self {
        self.tool_with(name, None, executor)
    }

    /// Adds a tool with an output schema.
    pub fn tool_with(
        mut self,
        name: &str,
        output_schema: Option<Value>,
        executor: Arc<dyn Executor>,
    ) -> Self {
        let spec = ToolSpec {
            name: name.into(),
            description: format!("The test tool {name}."),
            input_schema: json!({"type": "object", "properties": {}}),
            output_schema,
        };
        self.tools.push((spec, executor));
        self
    }

    /// It tells its tools' names without a load ([`Backend::names`]), as the wasm backend
    /// does from what an earlier load recorded.
    pub fn naming(mut self) -> Self {
        self.naming = true;
        self
    }

    /// How many policies it (and its clones) loaded.
    pub fn loads(&self) -> usize {
        self.loads.load(Ordering::Relaxed)
    }

    /// A toolbox of one policy of this kind: `[executor] kind = "test"` followed by `rest`
    /// (grants, limits, functions), as if written in `dir`.
    pub fn toolbox(&self, dir: &Path, rest: &str) -> Result<Toolbox, PolicyError> {
        let policy = Policy::parse(&dir.join("test.toml"), &policy_text(rest), &[self])?;
        let mut toolbox = Toolbox::default();
        toolbox
            .add_policy(Arc::new(policy), &[self])
            .map_err(|e| PolicyError::new(dir, None, e.to_string()))?;
        Ok(toolbox)
    }
}

/// The text of a test policy: its executor table, then `rest`.
pub fn policy_text(rest: &str) -> String {
    format!("[executor]\nkind = \"test\"\n{rest}")
}

impl ExecutorKind for TestBackend {
    fn kind(&self) -> &'static str {
        "test"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            paths: Paths::Guest,
            env: Support::Honoured,
            caller_env: Support::Honoured,
            net: NetHosts::Enforced,
            dns: Support::Honoured,
            credentials: Support::Honoured,
            fuel: Support::Honoured,
            response: Support::Honoured,
            memory_ceiling: None,
            sessions: true,
            programs: false,
            roots_observed: true,
            changes: Support::Refused("the test backend writes nothing"),
        }
    }
}

impl Backend for TestBackend {
    fn names(&self, _policy: &Policy) -> Option<Vec<String>> {
        self.naming.then(|| {
            self.tools
                .iter()
                .map(|(spec, _)| spec.name.clone())
                .collect()
        })
    }

    fn load(&self, policy: &Arc<Policy>) -> Result<Loaded, PolicyError> {
        policy.executor.parse::<NoKnobs>()?;
        self.loads.fetch_add(1, Ordering::Relaxed);
        Ok(Loaded {
            tools: self
                .tools
                .iter()
                .map(|(spec, executor)| LoadedTool {
                    function: spec.name.clone(),
                    spec: spec.clone(),
                    executor: executor.clone(),
                })
                .collect(),
            report: Report {
                settings: Default::default(),
                lines: vec![ReportLine {
                    label: "executor",
                    text: "test".into(),
                }],
                network: Reach::Grants,
                flags: Vec::new(),
            },
        })
    }
}

/// The test kind's `[executor]` has nothing but `kind`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoKnobs {}
