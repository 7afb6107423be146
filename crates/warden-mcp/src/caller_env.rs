//! The variables a client sets for its session: `_meta["warden/env"]` of its `initialize`,
//! an object of tools, each an object of variable names and string values,
//! `{"shell": {"PROJECT": "demo"}}`. Each tool's policy names what a caller may set
//! (`[grants] env_from_caller`); anything else is refused here, at `initialize`, and again
//! at each call (the toolbox may have been reloaded since), never left out unsaid.

use rmcp::model::MetaObject;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use warden_core::{CallerEnv, Dispatcher};

/// The `_meta` key.
pub(crate) const KEY: &str = "warden/env";

/// The variables `meta` sets, by tool, checked against `dispatcher`'s toolbox; or why they
/// cannot be honoured, for the client.
pub(crate) fn read(
    meta: &MetaObject,
    dispatcher: &Dispatcher,
) -> Result<BTreeMap<String, CallerEnv>, String> {
    let Some(value) = meta.get(KEY) else {
        return Ok(BTreeMap::new());
    };
    let shape = format!(
        "`_meta[\"{KEY}\"]` must be an object of tool names, each an object of variable \
         names and string values, e.g. {{\"shell\": {{\"PROJECT\": \"demo\"}}}}"
    );
    let Value::Object(tools) = value else {
        return Err(shape);
    };
    let mut out = BTreeMap::new();
    for (tool, vars) in tools {
        let Value::Object(vars) = vars else {
            return Err(shape);
        };
        let mut env = BTreeMap::new();
        for (name, value) in vars {
            let Value::String(value) = value else {
                return Err(format!(
                    "{shape}: the value of {tool}'s {name} is not a string"
                ));
            };
            env.insert(name.clone(), value.clone());
        }
        let Some(known) = dispatcher.toolbox().get(tool) else {
            return Err(format!(
                "`_meta[\"{KEY}\"]` sets variables for the tool {tool:?}, which this server \
                 does not have"
            ));
        };
        let env = Arc::new(env);
        known
            .policy
            .grants
            .check_caller_env(&env)
            .map_err(|e| format!("{tool}: {}", e.message))?;
        out.insert(tool.clone(), env);
    }
    Ok(out)
}
