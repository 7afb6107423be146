//! `warden add` and `warden pin`: components into the store, pins into policies.

use crate::install::{Install, install, policy_path};
use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use warden::Warden;
use warden_core::{ExecutorKind, Policy};
use warden_wasm::WasmConfig;

#[derive(clap::Args)]
pub(crate) struct AddArgs {
    /// The component: a `.wasm` file built for wasm32-wasip2, a WASI 0.1 command module
    /// (wasip1: Go, C, Zig, Rust), or an artifact in a registry,
    /// `oci://REGISTRY/REPOSITORY:TAG` or `…@sha256:DIGEST` ([Tools that travel]).
    source: String,
    /// A folder of WIT files whose doc comments describe the tools.
    #[arg(long)]
    wit: Option<PathBuf>,
    /// The policy's name (and a command component's tool name) [default: the file stem, or
    /// the repository's last part].
    #[arg(long)]
    name: Option<String>,
    /// Overwrite an existing policy of that name.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    pub(crate) oci: crate::oci::PullArgs,
}

pub(crate) fn add(ctx: &Warden, args: AddArgs) -> Result<ExitCode> {
    if args.source.starts_with(warden_oci::SCHEME) {
        if args.wit.is_some() {
            bail!("--wit describes a local component; an artifact's docs travel in it");
        }
        return crate::oci::add(ctx, args.source, args.name, args.force, &args.oci);
    }
    let component = PathBuf::from(&args.source);
    if !component.is_file() {
        bail!("{} is not a file", component.display());
    }
    let stem = component
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .context("the component path has no file name")?;
    let name = args.name.clone().unwrap_or(stem);
    let policy_path = policy_path(ctx, &name, args.force)?;
    // What is not WebAssembly is refused before anything is stored; a component and a WASI
    // 0.1 module both go on, the module checked when it is loaded.
    warden_wasm::Binary::of(&component)?;
    let wit = match &args.wit {
        Some(w) => Some(
            w.canonicalize()
                .with_context(|| format!("the WIT folder {}", w.display()))?,
        ),
        None => None,
    };
    install(
        ctx,
        &Install {
            name: &name,
            named: args.name.is_some(),
            component: &component,
            wit: wit.as_deref(),
            comments: None,
            origin: None,
            grants: None,
        },
        &policy_path,
    )?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn pin(ctx: &Warden, targets: &[String]) -> Result<ExitCode> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(&ctx.toolbox)
        .with_context(|| format!("reading the toolbox {}", ctx.toolbox.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    if !targets.is_empty() {
        files.retain(|f| {
            targets.iter().any(|t| {
                Path::new(t) == f.as_path()
                    || f.file_stem()
                        .is_some_and(|s| s.to_string_lossy() == t.as_str())
            })
        });
        if files.is_empty() {
            bail!(
                "no policy in {} matches {}",
                ctx.toolbox.display(),
                targets.join(", ")
            );
        }
    }
    let backends = ctx.backends();
    for file in files {
        let policy = Policy::load(&file, &backends.kinds())?;
        if policy.kind.value != ctx.wasm().kind() {
            if !targets.is_empty() {
                outln!(
                    "{}: a {} tool has no component to pin",
                    file.display(),
                    policy.kind.value
                );
            }
            continue;
        }
        let cfg = WasmConfig::from_policy(&policy)?;
        let sha = ctx.artifacts.put(&cfg.component.value)?;
        let text = std::fs::read_to_string(&file)?;
        let mut doc: toml_edit::DocumentMut = text
            .parse()
            .with_context(|| format!("{}", file.display()))?;
        let old = doc["executor"]["sha256"].as_str().map(str::to_owned);
        doc["executor"]["sha256"] = toml_edit::value(sha.clone());
        warden_core::write_whole(&file, doc.to_string().as_bytes())
            .with_context(|| format!("writing {}", file.display()))?;
        match old {
            Some(o) if o == sha => outln!("{}: already pinned to {sha}", file.display()),
            _ => outln!("{}: pinned to {sha}", file.display()),
        }
    }
    Ok(ExitCode::SUCCESS)
}
