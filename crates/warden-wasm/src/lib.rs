//! warden's WebAssembly executor: components compiled once and cached, a fresh store per call,
//! WASI exactly as the policy grants, and every limit enforced.

mod artifacts;
mod backend;
mod capture;
mod config;
pub mod docs;
mod engine;
mod exports;
mod http;
mod net;
mod roots;
mod sandbox;
pub mod schema;
mod shared;
mod spare;
mod tool;
pub mod value;
mod view;
mod wasip1;

pub use artifacts::{ArtifactError, Artifacts, Binary, sha256_file};
pub use backend::{CompileHook, UNPINNED, WasmBackend};
pub use config::WasmConfig;
pub use engine::{EPOCH_TICK, MAX_MEMORY, Workload, engine_config};
pub use wasip1::ModuleError;
