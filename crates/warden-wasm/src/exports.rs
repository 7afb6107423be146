//! Finds the tools of a component: every exported function, at world level or inside an
//! exported interface, and the `wasi:cli/run` entry point of a command.

use wasmtime::Engine;
use wasmtime::component::types::{ComponentFunc, ComponentItem};
use wasmtime::component::{Component, ComponentExportIndex, Type};

/// One exported function.
#[derive(Clone)]
pub(crate) struct Export {
    /// The short name of the exported interface (`types` for `warden:kitchen/types@0.1.0`).
    pub interface: Option<String>,
    /// The WIT function name.
    pub function: String,
    pub index: ComponentExportIndex,
    pub params: Vec<(String, Type)>,
    pub result: Option<Type>,
}

impl Export {
    /// The tool name before any prefix: `function`, or `interface-function`.
    pub(crate) fn tool_name(&self) -> String {
        match &self.interface {
            Some(i) => format!("{i}-{}", self.function),
            None => self.function.clone(),
        }
    }
}

/// What a component offers.
pub(crate) struct Exports {
    pub functions: Vec<Export>,
    /// The `run` function of `wasi:cli/run`, when the component is a command.
    pub command: Option<ComponentExportIndex>,
}

/// `wasi:cli/run@0.2.3` → (`wasi:cli/run`, `run`); `ns:pkg/iface@1.0` → short name `iface`.
fn interface_short_name(full: &str) -> &str {
    let unversioned = full.split('@').next().unwrap_or(full);
    unversioned.rsplit('/').next().unwrap_or(unversioned)
}

/// Functions a toolchain exports for its own runtime, not for callers: componentize-py's
/// `exports#init` (the Python initialiser, run once at build time).
fn is_toolchain_internal(interface: &str, function: &str) -> bool {
    interface == "exports" && function == "init"
}

fn is_cli_run(full: &str) -> bool {
    full.split('@').next() == Some("wasi:cli/run")
}

fn signature(f: &ComponentFunc) -> (Vec<(String, Type)>, Option<Type>) {
    let params = f.params().map(|(n, t)| (n.to_owned(), t)).collect();
    (params, f.results().next())
}

/// Lists the exports of `component`.
pub(crate) fn exports(engine: &Engine, component: &Component) -> Exports {
    let ty = component.component_type();
    let mut functions = Vec::new();
    let mut command = None;
    for (name, ext) in ty.exports(engine) {
        match ext.ty {
            ComponentItem::ComponentFunc(f) => {
                let Some(index) = component.get_export_index(None, name) else {
                    continue;
                };
                let (params, result) = signature(&f);
                functions.push(Export {
                    interface: None,
                    function: name.to_owned(),
                    index,
                    params,
                    result,
                });
            }
            ComponentItem::ComponentInstance(inst) => {
                let Some(inst_index) = component.get_export_index(None, name) else {
                    continue;
                };
                if is_cli_run(name) {
                    command = component.get_export_index(Some(&inst_index), "run");
                    continue;
                }
                for (fname, item) in inst.exports(engine) {
                    let ComponentItem::ComponentFunc(f) = item.ty else {
                        continue;
                    };
                    if is_toolchain_internal(name, fname) {
                        continue;
                    }
                    let Some(index) = component.get_export_index(Some(&inst_index), fname) else {
                        continue;
                    };
                    let (params, result) = signature(&f);
                    functions.push(Export {
                        interface: Some(interface_short_name(name).to_owned()),
                        function: fname.to_owned(),
                        index,
                        params,
                        result,
                    });
                }
            }
            _ => {}
        }
    }
    Exports { functions, command }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(interface_short_name("warden:kitchen/types@0.1.0"), "types");
        assert_eq!(interface_short_name("types"), "types");
        assert!(is_cli_run("wasi:cli/run@0.2.6"));
        assert!(!is_cli_run("wasi:cli/environment@0.2.6"));
    }
}
