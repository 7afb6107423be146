//! The host backend: turns a `kind = "host"` policy into its one tool.

use crate::tool::{Helper, HostTool};
use std::sync::Arc;
use warden_core::command::Template;
use warden_core::{Backend, ExecutorConfig, LoadedTool, Policy, PolicyError, ToolSpec};

/// Loads `kind = "host"` policies; every tool starts its calls through `helper`.
#[derive(Debug, Clone)]
pub struct HostBackend {
    helper: Helper,
}

impl HostBackend {
    pub fn new(helper: Helper) -> Self {
        Self { helper }
    }

    /// The tool of one host policy (the audit probes it too).
    pub fn tool(&self, policy: &Policy) -> Result<HostTool, PolicyError> {
        let err = |line: Option<usize>, msg: String| PolicyError::new(&policy.path, line, msg);
        let ExecutorConfig::Host(cfg) = &policy.executor else {
            return Err(err(
                None,
                format!(
                    "the host backend cannot load a `{}` executor",
                    policy.executor.kind()
                ),
            ));
        };
        let template = Template::parse(&cfg.argv.value).map_err(|m| err(Some(cfg.argv.line), m))?;
        Ok(HostTool::new(
            self.helper.clone(),
            cfg.clone(),
            template,
            policy.grants.clone(),
        ))
    }
}

impl Backend for HostBackend {
    fn kind(&self) -> &'static str {
        "host"
    }

    fn load(&self, policy: &Arc<Policy>) -> Result<Vec<LoadedTool>, PolicyError> {
        let tool = self.tool(policy)?;
        let (cfg, template) = (tool.config(), tool.template());
        let limits = match policy.functions.get(&cfg.name) {
            Some(f) => policy.limits.overlay(&f.limits).resolve(),
            None => policy.limits.resolve(),
        };
        let roots: Vec<String> = policy
            .grants
            .fs
            .iter()
            .map(|g| format!("{} ({})", g.host.display(), access_word(g.access)))
            .collect();
        let description = cfg.description.clone().unwrap_or_else(|| {
            let what = if template.shell().is_some() {
                "Runs a shell command".to_owned()
            } else {
                format!(
                    "Runs a command with arguments: {}",
                    template.params().join(", ")
                )
            };
            let files = if roots.is_empty() {
                "no folders".to_owned()
            } else {
                roots.join(", ")
            };
            format!(
                "{what} as a confined host process: it sees only {files} (starting in {}), \
                 no network unless granted, and an empty environment; answers its stdout, \
                 stderr and exit code.",
                cfg.start_dir(&policy.grants).display()
            )
        });
        let spec = ToolSpec {
            name: cfg.name.clone(),
            description,
            input_schema: template.schema(limits.timeout, false),
            output_schema: None,
        };
        Ok(vec![LoadedTool {
            function: cfg.name.clone(),
            spec,
            executor: Arc::new(tool),
        }])
    }
}

fn access_word(access: warden_core::Access) -> &'static str {
    match access {
        warden_core::Access::ReadOnly => "read-only",
        warden_core::Access::ReadWrite => "read-write",
    }
}
