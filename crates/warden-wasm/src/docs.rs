//! Tool descriptions from a tool's WIT files.
//!
//! Components built by wit-bindgen or componentize-py carry no doc comments, and WIT has no
//! parameter docs, so warden reads the WIT folder the policy names. The convention: a function's
//! doc comment is its description, and each line `@param <name> <text>` documents a parameter.
//! ```wit
//! /// Convert a quantity to another unit.
//! /// @param quantity the value and unit to convert
//! /// @param to the unit to convert to
//! convert: func(quantity: quantity, to: unit) -> result<f64, string>;
//! ```

use std::collections::HashMap;
use std::path::Path;
use wit_parser::{Resolve, WorldItem, WorldKey};

/// The docs of one function.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FnDocs {
    /// The doc comment without its `@param` lines.
    pub description: Option<String>,
    /// Parameter name → description.
    pub params: HashMap<String, String>,
}

/// The docs of every exported function of a WIT package, keyed by `function` for world-level
/// exports and `interface/function` for functions of exported interfaces.
#[derive(Debug, Clone, Default)]
pub struct WitDocs(HashMap<String, FnDocs>);

/// Why a WIT folder could not be read: wit-parser's message with its causes, as text (its
/// error is an `anyhow::Error`, which this library does not take on as a dependency).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WitError(String);

impl WitDocs {
    /// Parses the WIT package in `dir` (with its `deps/`).
    pub fn load(dir: &Path) -> Result<WitDocs, WitError> {
        let mut resolve = Resolve::default();
        let (pkg, _) = resolve
            .push_dir(dir)
            .map_err(|e| WitError(format!("{e:#}")))?;
        let mut docs = HashMap::new();
        for world in resolve.packages[pkg].worlds.values() {
            for (key, item) in &resolve.worlds[*world].exports {
                match (key, item) {
                    (WorldKey::Name(name), WorldItem::Function(f)) => {
                        docs.insert(name.clone(), parse(f.docs.contents.as_deref()));
                    }
                    (_, WorldItem::Interface { id, .. }) => {
                        let iface = &resolve.interfaces[*id];
                        let Some(iface_name) = iface.name.as_deref().or(match key {
                            WorldKey::Name(n) => Some(n.as_str()),
                            WorldKey::Interface(_) => None,
                        }) else {
                            continue;
                        };
                        for (fname, f) in &iface.functions {
                            docs.insert(
                                format!("{iface_name}/{fname}"),
                                parse(f.docs.contents.as_deref()),
                            );
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(WitDocs(docs))
    }

    /// The docs of a world-level function (`interface` = None) or an interface's function.
    pub fn get(&self, interface: Option<&str>, function: &str) -> Option<&FnDocs> {
        match interface {
            Some(i) => self.0.get(&format!("{i}/{function}")),
            None => self.0.get(function),
        }
    }
}

/// Splits a doc comment into its description and `@param` lines.
pub fn parse(doc: Option<&str>) -> FnDocs {
    let mut out = FnDocs::default();
    let mut text = Vec::new();
    for line in doc.unwrap_or_default().lines() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("@param") {
            let rest = rest.trim();
            let (name, desc) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            if !name.is_empty() {
                out.params.insert(name.to_owned(), desc.trim().to_owned());
            }
        } else {
            text.push(line.trim_end());
        }
    }
    let description = text.join("\n").trim().to_owned();
    out.description = (!description.is_empty()).then_some(description);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_params_from_the_description() {
        let d = parse(Some(
            "Convert a quantity.\nMore words.\n@param quantity the value\n@param to  target unit\n",
        ));
        assert_eq!(
            d.description.as_deref(),
            Some("Convert a quantity.\nMore words.")
        );
        assert_eq!(d.params["quantity"], "the value");
        assert_eq!(d.params["to"], "target unit");
        assert_eq!(parse(None), FnDocs::default());
    }

    #[test]
    fn reads_world_and_interface_functions() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("w.wit"),
            "package t:t;\ninterface math {\n  /// Adds.\n  /// @param a first\n  add: func(a: u32) -> u32;\n}\nworld w {\n  /// Greets.\n  export greet: func(name: string) -> string;\n  export math;\n}\n",
        )
        .unwrap();
        let docs = WitDocs::load(dir.path()).unwrap();
        assert_eq!(
            docs.get(None, "greet").unwrap().description.as_deref(),
            Some("Greets.")
        );
        let add = docs.get(Some("math"), "add").unwrap();
        assert_eq!(add.params["a"], "first");
    }
}
