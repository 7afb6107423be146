//! `warden add` and `warden pin`: components into the store, pins into policies.

use anyhow::{Context as _, Result, bail};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use warden::Warden;
use warden_core::shown::Escaped;
use warden_core::{Backend, ExecutorKind, Policy};
use warden_wasm::WasmConfig;

#[derive(clap::Args)]
pub(crate) struct AddArgs {
    /// The component (`.wasm`, built for wasm32-wasip2).
    component: PathBuf,
    /// A folder of WIT files whose doc comments describe the tools.
    #[arg(long)]
    wit: Option<PathBuf>,
    /// The policy's name (and a command component's tool name) [default: the file stem].
    #[arg(long)]
    name: Option<String>,
    /// Overwrite an existing policy of that name.
    #[arg(long)]
    force: bool,
}

pub(crate) fn add(ctx: &Warden, args: AddArgs) -> Result<ExitCode> {
    if !args.component.is_file() {
        bail!("{} is not a file", args.component.display());
    }
    let stem = args
        .component
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .context("the component path has no file name")?;
    let name = args.name.clone().unwrap_or(stem);
    if !warden_core::is_valid_tool_name(&name) {
        bail!("`{name}` is not a valid name: use letters, digits, _ and - (at most 64)");
    }
    std::fs::create_dir_all(&ctx.toolbox)
        .with_context(|| format!("creating the toolbox {}", ctx.toolbox.display()))?;
    let policy_path = ctx.toolbox.join(format!("{name}.toml"));
    if policy_path.exists() && !args.force {
        bail!(
            "{} already exists; pass --force to overwrite it, or --name to pick another",
            policy_path.display()
        );
    }
    refuse_non_component(&args.component)?;
    let stored_before = warden_wasm::sha256_file(&args.component)
        .is_ok_and(|sha| ctx.artifacts.stored(&sha).is_file());
    let sha = ctx.artifacts.put(&args.component)?;
    let toolbox = ctx.toolbox.canonicalize()?;
    let component = relative_to(&toolbox, &args.component.canonicalize()?);
    let wit = match &args.wit {
        Some(w) => Some(relative_to(
            &toolbox,
            &w.canonicalize()
                .with_context(|| format!("the WIT folder {}", w.display()))?,
        )),
        None => None,
    };
    let text = policy_text(&name, &component, &sha, wit.as_deref(), args.name.is_some());
    let backend = ctx.wasm();
    let policy = Policy::parse(&policy_path, &text, &[&backend])?;
    let loaded = backend.load(&Arc::new(policy)).map(|loaded| loaded.tools);
    let tools = match loaded {
        Ok(tools) => tools,
        Err(e) => {
            // What was refused is not kept: the store holds only what some policy runs.
            if !stored_before {
                let _ = std::fs::remove_file(ctx.artifacts.stored(&sha));
            }
            bail!("checking {}: {}", args.component.display(), e.message);
        }
    };
    std::fs::write(&policy_path, text)
        .with_context(|| format!("writing {}", policy_path.display()))?;
    outln!("stored {} as {sha}", args.component.display());
    outln!(
        "wrote {} (nothing granted; widen it on purpose)",
        policy_path.display()
    );
    for tool in tools {
        outln!(
            "  tool {}: {}",
            Escaped(&tool.spec.name),
            Escaped(tool.spec.description.lines().next().unwrap_or_default())
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn policy_text(name: &str, component: &Path, sha: &str, wit: Option<&Path>, named: bool) -> String {
    let mut exec = format!(
        "[executor]\nkind = \"wasm\"\ncomponent = {}\nsha256 = \"{sha}\"\n",
        toml_string(component)
    );
    if let Some(w) = wit {
        exec.push_str(&format!("wit = {}\n", toml_string(w)));
    }
    if named {
        exec.push_str(&format!("name = \"{name}\"\n"));
    }
    format!(
        "# Policy for `{name}`, written by `warden add`. Nothing is granted: widen it on purpose.\n\
         {exec}\n\
         [grants]\n\
         # env = {{ KEY = \"value\" }}\n\
         # env_from_host = [\"NAME\"]\n\
         # fs = [{{ host = \"../workspace\", guest = \"/workspace\", access = \"read-only\" }}]\n\n\
         [limits]\n\
         timeout = \"30s\"\n\
         memory = \"256MiB\"\n\
         output = \"1MiB\"\n"
    )
}

fn toml_string(path: &Path) -> String {
    toml_edit::Value::from(path.to_string_lossy().as_ref()).to_string()
}

/// `target` relative to `base` (both absolute), so policies keep working when moved together.
fn relative_to(base: &Path, target: &Path) -> PathBuf {
    let b: Vec<Component> = base.components().collect();
    let t: Vec<Component> = target.components().collect();
    let common = b.iter().zip(&t).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    out
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
        std::fs::write(&file, doc.to_string())
            .with_context(|| format!("writing {}", file.display()))?;
        match old {
            Some(o) if o == sha => outln!("{}: already pinned to {sha}", file.display()),
            _ => outln!("{}: pinned to {sha}", file.display()),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses a file that is not a WebAssembly component by its first 8 bytes, before anything
/// is stored: not WebAssembly at all, or a core module (which needs wrapping into a component).
fn refuse_non_component(path: &Path) -> Result<()> {
    use std::io::Read;
    let mut head = [0u8; 8];
    let read = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .with_context(|| format!("reading {}", path.display()))?;
    // `\0asm`, then a version and a layer: 1 and 0 for a core module, 0x0d and 1 for a component.
    match (&head[..read.min(4)], &head[4..read.max(4)]) {
        (b"\0asm", [0x0d, 0x00, 0x01, 0x00]) => Ok(()),
        (b"\0asm", [0x01, 0x00, 0x00, 0x00]) => bail!(
            "{} is a WebAssembly core module, not a component: build it for wasm32-wasip2 (or \
             wrap it with `wasm-tools component new`)",
            path.display()
        ),
        _ => bail!(
            "{} is not a WebAssembly component (it does not start with WebAssembly's magic \
             bytes): build the tool for wasm32-wasip2 and add the .wasm it makes",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        assert_eq!(
            relative_to(Path::new("/a/b/policies"), Path::new("/a/b/target/x.wasm")),
            PathBuf::from("../target/x.wasm")
        );
        assert_eq!(
            relative_to(Path::new("/a"), Path::new("/a/x")),
            PathBuf::from("x")
        );
    }
}
