//! What `warden add` does once it has a component, wherever it came from (a file, a
//! registry): the component stored, checked under its policy, and the policy written.

use anyhow::{Context as _, Result, bail};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use warden::Warden;
use warden_core::shown::Escaped;
use warden_core::{Backend, Policy};

/// Where the policy of `name` goes in the toolbox, refused when it exists and not `force`.
pub(crate) fn policy_path(ctx: &Warden, name: &str, force: bool) -> Result<PathBuf> {
    if !warden_core::is_valid_tool_name(name) {
        bail!("`{name}` is not a valid name: use letters, digits, _ and - (at most 64)");
    }
    std::fs::create_dir_all(&ctx.toolbox)
        .with_context(|| format!("creating the toolbox {}", ctx.toolbox.display()))?;
    let path = ctx.toolbox.join(format!("{name}.toml"));
    if path.exists() && !force {
        bail!(
            "{} already exists; pass --force to overwrite it, or --name to pick another",
            path.display()
        );
    }
    Ok(path)
}

/// A component to store and the policy to write for it.
pub(crate) struct Install<'a> {
    pub name: &'a str,
    /// The name was given (`--name`): a command component's tool takes it.
    pub named: bool,
    pub component: &'a Path,
    pub wit: Option<&'a Path>,
    /// Comment lines for the policy's head (the publisher's suggestion, not granted).
    pub comments: Option<String>,
    /// Where the component came from: an `[origin]` table's text.
    pub origin: Option<String>,
    /// The `[grants]` and `[limits]` to write instead of the deny-by-default ones.
    pub grants: Option<String>,
}

/// Stores the component, checks it loads under its policy and writes the policy; a component
/// refused leaves nothing in the store.
pub(crate) fn install(ctx: &Warden, install: &Install<'_>, policy_path: &Path) -> Result<()> {
    let stored_before = warden_wasm::sha256_file(install.component)
        .is_ok_and(|sha| ctx.artifacts.stored(&sha).is_file());
    let sha = ctx.artifacts.put(install.component)?;
    let toolbox = ctx.toolbox.canonicalize()?;
    let component = relative_to(&toolbox, &install.component.canonicalize()?);
    let wit = install.wit.map(|w| relative_to(&toolbox, w));
    let text = policy_text(install, &component, &sha, wit.as_deref());
    let backend = ctx.wasm();
    let loaded = Policy::parse(policy_path, &text, &[&backend])
        .map_err(|e| e.to_string())
        .and_then(|policy| backend.load(&Arc::new(policy)).map_err(|e| e.message));
    let loaded = match loaded {
        Ok(loaded) => loaded,
        Err(e) => {
            // What was refused is not kept: the store holds only what some policy runs.
            if !stored_before {
                let _ = std::fs::remove_file(ctx.artifacts.stored(&sha));
            }
            bail!("checking {}: {e}", install.component.display());
        }
    };
    if let Err(e) = warden_core::write_whole(policy_path, text.as_bytes()) {
        // Nothing half-written is left, nor a stored component no policy runs.
        if !stored_before {
            let _ = std::fs::remove_file(ctx.artifacts.stored(&sha));
        }
        return Err(e).with_context(|| format!("writing {}", policy_path.display()));
    }
    outln!("stored {} as {sha}", install.component.display());
    match install.grants {
        Some(_) => outln!(
            "wrote {} with the publisher's grants",
            policy_path.display()
        ),
        None => outln!(
            "wrote {} (nothing granted; widen it on purpose)",
            policy_path.display()
        ),
    }
    for tool in loaded.tools {
        outln!(
            "  tool {}: {}",
            Escaped(&tool.spec.name),
            Escaped(tool.spec.description.lines().next().unwrap_or_default())
        );
    }
    // What the audit would flag of it (an import the grants leave refused, …).
    for flag in loaded.report.flags {
        outln!("  ! {}", Escaped(flag));
    }
    Ok(())
}

fn policy_text(install: &Install<'_>, component: &Path, sha: &str, wit: Option<&Path>) -> String {
    let name = install.name;
    let mut exec = format!(
        "[executor]\nkind = \"wasm\"\ncomponent = {}\nsha256 = \"{sha}\"\n",
        toml_string(component)
    );
    if let Some(w) = wit {
        exec.push_str(&format!("wit = {}\n", toml_string(w)));
    }
    if install.named {
        exec.push_str(&format!("name = \"{name}\"\n"));
    }
    let comments = install.comments.as_deref().unwrap_or_default();
    let origin = install
        .origin
        .as_deref()
        .map(|o| format!("\n{o}"))
        .unwrap_or_default();
    match &install.grants {
        Some(grants) => format!(
            "# Policy for `{name}`, written by `warden add` with the publisher's grants \
             (--accept-grants).\n{comments}{exec}\n{grants}{origin}"
        ),
        None => format!(
            "# Policy for `{name}`, written by `warden add`. Nothing is granted: widen it on purpose.\n\
             {comments}{exec}\n\
             [grants]\n\
             # env = {{ KEY = \"value\" }}\n\
             # env_from_host = [\"NAME\"]\n\
             # fs = [{{ host = \"../workspace\", guest = \"/workspace\", access = \"read-only\" }}]\n\n\
             [limits]\n\
             timeout = \"30s\"\n\
             memory = \"256MiB\"\n\
             output = \"1MiB\"\n{origin}"
        ),
    }
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
