//! The docker backend: turns a `kind = "docker"` policy into its one tool. Loading never
//! talks to the engine, so a toolbox loads (and its other tools run) with Docker down.

use crate::engine::Engine;
use crate::plan::Plan;
use crate::tool::DockerTool;
use std::sync::Arc;
use warden_core::command::Template;
use warden_core::{Backend, ExecutorConfig, LoadedTool, Policy, PolicyError, ToolSpec};

/// Loads `kind = "docker"` policies; every tool shares one engine connection. Clones share it.
#[derive(Clone)]
pub struct DockerBackend {
    engine: Arc<Engine>,
}

impl DockerBackend {
    pub fn new(engine: Engine) -> Self {
        Self {
            engine: Arc::new(engine),
        }
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }
}

impl Backend for DockerBackend {
    fn kind(&self) -> &'static str {
        "docker"
    }

    fn load(&self, policy: &Arc<Policy>) -> Result<Vec<LoadedTool>, PolicyError> {
        let err = |line: Option<usize>, msg: String| PolicyError::new(&policy.path, line, msg);
        let ExecutorConfig::Docker(cfg) = &policy.executor else {
            return Err(err(
                None,
                format!(
                    "the docker backend cannot load a `{}` executor",
                    policy.executor.kind()
                ),
            ));
        };
        let template = Template::parse(&cfg.argv.value).map_err(|m| err(Some(cfg.argv.line), m))?;
        let shell = match (cfg.session, template.shell()) {
            (false, _) => None,
            (true, Some(sh)) => Some(sh.to_owned()),
            (true, None) => {
                return Err(err(
                    Some(cfg.argv.line),
                    "session = true keeps one long-lived shell, so argv must be a shell running \
                     the command: [\"/bin/sh\", \"-c\", \"{command}\"] (any shell's path)"
                        .into(),
                ));
            }
        };
        let plan = Plan::new(cfg, &policy.grants).map_err(|m| err(Some(cfg.argv.line), m))?;
        let limits = match policy.functions.get(&cfg.name) {
            Some(f) => policy.limits.overlay(&f.limits).resolve(),
            None => policy.limits.resolve(),
        };
        let spec = ToolSpec {
            name: cfg.name.clone(),
            description: cfg
                .description
                .clone()
                .unwrap_or_else(|| describe(&template, shell.is_some(), &cfg.image.value)),
            input_schema: template.schema(limits.timeout, shell.is_some()),
            output_schema: None,
        };
        let tool = DockerTool::new(
            self.engine.clone(),
            plan,
            template,
            policy.grants.clone(),
            shell,
        );
        Ok(vec![LoadedTool {
            function: cfg.name.clone(),
            spec,
            executor: Arc::new(tool),
        }])
    }
}

fn describe(template: &Template, session: bool, image: &str) -> String {
    if template.shell().is_some() {
        let keep = if session {
            " The shell persists for the session: `cd`, variables and files carry over to the \
             next command; `restart: true` starts a fresh one."
        } else {
            " Each command runs in a fresh container."
        };
        format!(
            "Runs a shell command in a sandboxed container ({image}) with no network unless \
             granted; answers its stdout, stderr and exit code.{keep}"
        )
    } else {
        format!(
            "Runs a command in a sandboxed container ({image}) with arguments: {}.",
            template.params().join(", ")
        )
    }
}
