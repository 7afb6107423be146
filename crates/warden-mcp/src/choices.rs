//! What a client chooses for its session's tools, in the `_meta` of its `initialize`:
//! - `"warden/env"`: variables, an object of tools, each an object of variable names and
//!   string values, `{"shell": {"PROJECT": "demo"}}`, each a name the tool's policy lets a
//!   caller set (`[grants] env_from_caller`);
//! - `"warden/image"`: the image a docker tool's containers run, an object of tools and image
//!   names, `{"shell": "warden-sandbox:latest"}`, each one its policy lists (`image` or
//!   `images`).
//!
//! Anything else is refused here, at `initialize`, and again at each call (the toolbox may
//! have been reloaded since), never left out unsaid.

use rmcp::model::MetaObject;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use warden_core::{CallerEnv, ClientChoices, Dispatcher, Tool};

/// The `_meta` key of variables.
pub(crate) const KEY: &str = "warden/env";

/// The `_meta` key of images.
pub(crate) const IMAGE_KEY: &str = "warden/image";

/// What `meta` chooses, checked against `dispatcher`'s toolbox; or why it cannot be
/// honoured, for the client.
pub(crate) fn read(meta: &MetaObject, dispatcher: &Dispatcher) -> Result<ClientChoices, String> {
    Ok(ClientChoices {
        env: read_env(meta, dispatcher)?,
        images: read_images(meta, dispatcher)?,
    })
}

/// The images `meta` chooses, by tool.
fn read_images(
    meta: &MetaObject,
    dispatcher: &Dispatcher,
) -> Result<BTreeMap<String, Arc<str>>, String> {
    let Some(value) = meta.get(IMAGE_KEY) else {
        return Ok(BTreeMap::new());
    };
    let shape = format!(
        "`_meta[\"{IMAGE_KEY}\"]` must be an object of tool names and image names, e.g. \
         {{\"shell\": \"warden-sandbox:latest\"}}"
    );
    let Value::Object(tools) = value else {
        return Err(shape);
    };
    let mut out = BTreeMap::new();
    for (tool, image) in tools {
        let Value::String(image) = image else {
            return Err(format!("{shape}: the image of {tool} is not a string"));
        };
        known(dispatcher, tool, IMAGE_KEY, "chooses an image for")?
            .executor
            .check_image(image)
            .map_err(|why| format!("{tool}: {why}"))?;
        out.insert(tool.clone(), Arc::from(image.as_str()));
    }
    Ok(out)
}

/// The tool `name`, or why a choice `what` it cannot be made.
fn known<'a>(
    dispatcher: &'a Dispatcher,
    name: &str,
    key: &str,
    what: &str,
) -> Result<&'a Tool, String> {
    dispatcher.toolbox().get(name).ok_or_else(|| {
        format!("`_meta[\"{key}\"]` {what} the tool {name:?}, which this server does not have")
    })
}

/// The variables `meta` sets, by tool.
fn read_env(
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
        let env = Arc::new(env);
        known(dispatcher, tool, KEY, "sets variables for")?
            .policy
            .grants
            .check_caller_env(&env)
            .map_err(|e| format!("{tool}: {}", e.message))?;
        out.insert(tool.clone(), env);
    }
    Ok(out)
}
