//! WASI 0.1 command modules (Go's `wasip1`, C with wasi-sdk, Zig, Rust's `wasm32-wasip1`) as
//! command tools. A module is checked, then wrapped into a component with wasmtime's own
//! preview-1 *command* adapter (the `wasi-preview1-component-adapter-provider` of the same
//! wasmtime release), which implements WASI 0.1 on WASI 0.2 inside the component. The result
//! exports `wasi:cli/run` like any command component, so grants, limits, usage, roots, records
//! and the compile cache are the same code for both.
//!
//! One thing the adapter cannot carry: WASI 0.2's `exit` says only success or failure, while
//! WASI 0.1's `proc_exit` has a code. The module's `proc_exit` is therefore routed to warden's
//! own `warden:wasip1/exit` (linked by [`link_exit`]), which ends the call with that code.

use sha2::{Digest, Sha256};
use std::sync::LazyLock;
use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME as PREVIEW1, WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
};
use wasm_encoder::reencode::{Reencode, RoundtripReencoder};
use wasmparser::{Encoding, ExternalKind, Parser, Payload};
use wasmtime::component::Linker;
use wasmtime_wasi::I32Exit;

/// The interface that keeps `proc_exit`'s code: the module imports it in place of
/// `wasi_snapshot_preview1::proc_exit`, with the same core signature (one i32, no result).
const EXIT_WIT: &str = "package warden:wasip1;

interface exit {
  exit: func(code: u32);
}

world module {
  import exit;
}
";
const EXIT_INTERFACE: &str = "warden:wasip1/exit";
const EXIT_FUNCTION: &str = "exit";

/// Why a WASI 0.1 module cannot be a tool.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    #[error(
        "it imports `{module}::{name}`, which warden does not provide: a WASI 0.1 tool may \
         import only the functions of `{PREVIEW1}` (WASI 0.1 itself); build it without \
         that import (no host functions of another runtime, no threads)"
    )]
    UnknownImport { module: String, name: String },
    #[error(
        "it exports no `_start` function, so it is not a WASI 0.1 command: build it as a \
         program with a `main` (a library or reactor module cannot be a tool)"
    )]
    NotACommand,
    #[error("it is not a valid WebAssembly module: {0}")]
    Invalid(String),
    #[error("the preview-1 adapter cannot wrap it: {0}")]
    Wrap(String),
}

/// What identifies the wrapping in the compile cache's keys: the adapter, and this file, whose
/// code does the wrapping. Compiled code of a module wrapped otherwise (another adapter, an
/// earlier build of warden that wrapped differently) is never taken for this one's.
pub(crate) fn wrapping_key() -> &'static str {
    static KEY: LazyLock<String> = LazyLock::new(|| {
        let mut hasher = Sha256::new();
        hasher.update(WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER);
        hasher.update(include_str!("wasip1.rs"));
        format!("wasip1.{}", &hex::encode(hasher.finalize())[..12])
    });
    &KEY
}

/// The command component that runs `module`: its imports checked, its `proc_exit` routed to
/// `warden:wasip1/exit`, the rest of WASI 0.1 served by the command adapter.
pub(crate) fn wrap(module: &[u8]) -> Result<Vec<u8>, ModuleError> {
    let mut bytes = rerouted(module)?;
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve
        .push_str("warden-wasip1.wit", EXIT_WIT)
        .map_err(wrap_err)?;
    let world = resolve
        .select_world(&[package], Some("module"))
        .map_err(wrap_err)?;
    // Declares `warden:wasip1/exit` to wit-component, which lifts it like any WIT import.
    wit_component::embed_component_metadata(
        &mut bytes,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .map_err(wrap_err)?;
    wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&bytes)
        .and_then(|e| e.adapter(PREVIEW1, WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER))
        .and_then(|mut e| e.encode())
        .map_err(wrap_err)
}

/// `module` with `proc_exit` imported from `warden:wasip1/exit`, every other section as it
/// was; refused when it imports what the adapter does not implement or exports no `_start`.
fn rerouted(module: &[u8]) -> Result<Vec<u8>, ModuleError> {
    let provided = adapter_functions()?;
    let invalid = |e: wasmparser::BinaryReaderError| ModuleError::Invalid(e.to_string());
    let mut out = wasm_encoder::Module::new();
    let mut start = false;
    for payload in Parser::new(0).parse_all(module) {
        match payload.map_err(invalid)? {
            Payload::Version {
                encoding: Encoding::Component,
                ..
            } => return Err(ModuleError::Invalid("it is a component".into())),
            Payload::ImportSection(reader) => {
                let mut imports = wasm_encoder::ImportSection::new();
                for import in reader.into_imports() {
                    let import = import.map_err(invalid)?;
                    let known = import.module == PREVIEW1
                        && matches!(import.ty, wasmparser::TypeRef::Func(_))
                        && provided.contains(&import.name);
                    if !known {
                        return Err(ModuleError::UnknownImport {
                            module: import.module.to_owned(),
                            name: import.name.to_owned(),
                        });
                    }
                    let (module, name) = if import.name == "proc_exit" {
                        (EXIT_INTERFACE, EXIT_FUNCTION)
                    } else {
                        (import.module, import.name)
                    };
                    let ty = RoundtripReencoder
                        .entity_type(import.ty)
                        .map_err(|e| ModuleError::Invalid(e.to_string()))?;
                    imports.import(module, name, ty);
                }
                out.section(&imports);
            }
            payload => {
                if let Payload::ExportSection(reader) = &payload {
                    for export in reader.clone() {
                        let export = export.map_err(invalid)?;
                        start |= export.name == "_start" && export.kind == ExternalKind::Func;
                    }
                }
                if let Some((id, range)) = payload.as_section() {
                    out.section(&wasm_encoder::RawSection {
                        id,
                        data: &module[range],
                    });
                }
            }
        }
    }
    if !start {
        return Err(ModuleError::NotACommand);
    }
    Ok(out.finish())
}

/// An error of wit-component or wit-parser, with its causes.
fn wrap_err(e: impl std::fmt::Display) -> ModuleError {
    ModuleError::Wrap(format!("{e:#}"))
}

/// The WASI 0.1 functions the adapter implements: those it exports.
fn adapter_functions() -> Result<Vec<&'static str>, ModuleError> {
    let mut names = Vec::new();
    for payload in Parser::new(0).parse_all(WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER) {
        if let Ok(Payload::ExportSection(reader)) = payload {
            for export in reader.into_iter().flatten() {
                if export.kind == ExternalKind::Func {
                    names.push(export.name);
                }
            }
        }
    }
    if names.is_empty() {
        return Err(ModuleError::Wrap("the adapter exports nothing".into()));
    }
    Ok(names)
}

/// Links the host side of `warden:wasip1/exit`: the call ends with the module's own code, as
/// `wasi:cli/exit` ends it with 0 or 1.
pub(crate) fn link_exit<T: 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.instance(EXIT_INTERFACE)?.func_wrap(
        EXIT_FUNCTION,
        |_, (code,): (u32,)| -> wasmtime::Result<()> {
            // WASI 0.1's exit code is a u32; C's `exit(-1)` passes u32::MAX, seen as -1 again.
            Err(I32Exit(code as i32).into())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(text: &str) -> Vec<u8> {
        wat::parse_str(text).unwrap()
    }

    #[test]
    fn an_import_outside_wasi_0_1_is_named() {
        let err = wrap(&module(
            r#"(module (import "env" "host_log" (func)) (memory (export "memory") 1)
               (func (export "_start")))"#,
        ))
        .unwrap_err();
        assert!(err.to_string().contains("`env::host_log`"), "{err}");
        let err = wrap(&module(
            r#"(module (import "wasi_snapshot_preview1" "thread_spawn" (func (param i32)))
               (memory (export "memory") 1) (func (export "_start")))"#,
        ))
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("`wasi_snapshot_preview1::thread_spawn`"),
            "{err}"
        );
    }

    #[test]
    fn a_module_without_start_is_no_command() {
        let err = wrap(&module(r#"(module (memory (export "memory") 1))"#)).unwrap_err();
        assert!(matches!(err, ModuleError::NotACommand), "{err}");
    }

    #[test]
    fn a_command_becomes_a_component_that_imports_no_network() {
        let component = wrap(&module(
            r#"(module
                 (import "wasi_snapshot_preview1" "proc_exit" (func (param i32)))
                 (import "wasi_snapshot_preview1" "fd_write"
                   (func (param i32 i32 i32 i32) (result i32)))
                 (memory (export "memory") 1)
                 (func (export "_start") (call 0 (i32.const 3))))"#,
        ))
        .unwrap();
        let mut imports = Vec::new();
        for payload in Parser::new(0).parse_all(&component) {
            if let Ok(Payload::ComponentImportSection(reader)) = payload {
                for import in reader.into_iter().flatten() {
                    imports.push(import.name.name.to_owned());
                }
            }
        }
        assert!(imports.iter().any(|i| i == EXIT_INTERFACE), "{imports:?}");
        assert!(
            !imports
                .iter()
                .any(|i| i.starts_with("wasi:sockets") || i.starts_with("wasi:http")),
            "{imports:?}"
        );
    }
}
