//! `warden pull NAME`: a tool added from a registry brought to the version its tag names now,
//! verified as `add` verifies it, never quietly older, its grants kept.

use crate::oci::{
    PullArgs, SUGGESTED_TABLES, accepted, created_at, fetch, now_utc, rfc3339, served_suggestion,
    suggestion_of, write_docs,
};
use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use warden::Warden;
use warden_core::shown::escape;
use warden_core::{Backend, Origin, Policy};
use warden_oci::layout::WitFile;
use warden_oci::{Pulled, Reference, Suggestion};
use warden_wasm::WasmConfig;

#[derive(clap::Args)]
pub(crate) struct PullToolArgs {
    /// The tool's policy name, as `warden add oci://…` wrote it.
    name: String,
    /// Take a version older than the one in use (its tag moved back): the origin and the
    /// audit say so.
    #[arg(long)]
    allow_downgrade: bool,
    #[command(flatten)]
    trust: PullArgs,
}

/// Why a version made at `new` is older than the one in use, made at `current` (RFC 3339
/// times); `None` when it is not, or when the one in use has no time to compare with (it was
/// added before warden recorded one).
fn older(current: Option<&str>, new: Option<&str>) -> Option<String> {
    let (text, current) = current.and_then(|c| Some((c, created_at(c)?)))?;
    match new.and_then(|n| Some((n, created_at(n)?))) {
        None => Some(format!(
            "it says no creation time, and the version in use was made {text}"
        )),
        Some((made, new)) if new < current => Some(format!(
            "it was made {made}, before the version in use ({text})"
        )),
        Some(_) => None,
    }
}

/// Whether two paths name the same file (both must exist).
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// A pulled version's WIT docs, written over the old ones, which are kept aside until the new
/// version is checked: [`Docs::keep`] drops them, [`Docs::restore`] puts them back.
struct Docs {
    folder: PathBuf,
    /// The old folder, moved aside; `None` when there was none.
    aside: Option<PathBuf>,
    replaced: bool,
}

impl Docs {
    /// Writes `docs` into `folder`, unless none came or the consumer's policy names docs of its
    /// own (`own`).
    fn replace(folder: &Path, docs: &[WitFile], own: bool) -> Result<Docs> {
        let mut this = Docs {
            folder: folder.to_owned(),
            aside: None,
            replaced: false,
        };
        if docs.is_empty() || own {
            return Ok(this);
        }
        if folder.exists() {
            let aside = folder.with_extension("wit.old");
            if aside.exists() {
                std::fs::remove_dir_all(&aside)
                    .with_context(|| format!("removing {}", aside.display()))?;
            }
            std::fs::rename(folder, &aside)
                .with_context(|| format!("moving {} aside", folder.display()))?;
            this.aside = Some(aside);
        }
        this.replaced = true;
        write_docs(folder, docs)?;
        Ok(this)
    }

    fn replaced(&self) -> bool {
        self.replaced
    }

    /// The new version is in: the old docs go.
    fn keep(self) {
        if let Some(aside) = &self.aside {
            let _ = std::fs::remove_dir_all(aside);
        }
    }

    /// The new version was refused: the old docs come back.
    fn restore(self) -> Result<()> {
        if !self.replaced {
            return Ok(());
        }
        std::fs::remove_dir_all(&self.folder)
            .with_context(|| format!("removing {}", self.folder.display()))?;
        if let Some(aside) = &self.aside {
            std::fs::rename(aside, &self.folder)
                .with_context(|| format!("restoring {}", self.folder.display()))?;
        }
        Ok(())
    }
}

/// `warden pull NAME`: the tag its component was added from, resolved and verified again; a
/// new digest signed as the old one was, and no older than it (unless `--allow-downgrade`),
/// replaces the component, its grants kept.
pub(crate) fn pull(ctx: &Warden, args: &PullToolArgs) -> Result<ExitCode> {
    let policy_path = ctx.toolbox.join(format!("{}.toml", args.name));
    let backend = ctx.wasm();
    let policy = Policy::load(&policy_path, &[&backend as &dyn Backend])?;
    let (origin, tag) = pulled_as(&policy, &policy_path, &args.name)?;
    let reference = Reference::parse(tag)?;
    let pulled = fetch(ctx, &reference, &args.trust)?;
    let pinned = reference.at(&pulled.digest);
    if pinned.to_string() == origin.reference {
        outln!(
            "{}: {tag} is still {}; nothing to do",
            args.name,
            pulled.digest
        );
        return Ok(ExitCode::SUCCESS);
    }
    let version = Version::vet(origin, tag, &pulled, args)?;
    let text = std::fs::read_to_string(&policy_path)?;
    let suggestion = served_suggestion(&pulled)?;
    let current = suggestion_of(&text, &policy_path)?;
    // Only a suggestion that differs from the policy's grants is anything to accept; a digest
    // given must still be what is served.
    let served = suggestion.as_ref().map(|(s, t)| (*s, t.as_str()));
    let changed = served.filter(|(_, t)| *t != current);
    let accept = match (&args.trust.accept_grants, changed) {
        (Some(None), None) => false,
        (accept, _) => accepted(accept.as_ref(), served, &reference)?,
    };
    let config = WasmConfig::from_policy(&policy)?;
    let component_path = config.component.value;
    let old = std::fs::read(&component_path).ok();
    // The docs that came are written where `add` puts them, unless the policy's `wit` names a
    // folder of the consumer's own.
    let docs_folder = ctx.toolbox.join(format!("{}.wit", args.name));
    let own_docs = config
        .wit
        .as_ref()
        .is_some_and(|w| !same_file(&w.value, &docs_folder));
    let docs = Docs::replace(&docs_folder, &pulled.docs, own_docs)?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| policy_path.display().to_string())?;
    warden_core::write_whole(&component_path, &pulled.component)
        .with_context(|| format!("writing {}", component_path.display()))?;
    let sha = ctx.artifacts.put(&component_path)?;
    doc["executor"]["sha256"] = toml_edit::value(sha.clone());
    version.record(&mut doc, &pinned, origin, pulled.plain_http);
    if docs.replaced() {
        doc["executor"]["wit"] = toml_edit::value(format!("{}.wit", args.name));
    }
    if let (Some((_, new)), true) = (changed, accept) {
        take_grants(&mut doc, new)?;
    }
    let updated = doc.to_string();
    let checked = Policy::parse(&policy_path, &updated, &[&backend as &dyn Backend])
        .map_err(|e| e.to_string())
        .and_then(|p| backend.load(&std::sync::Arc::new(p)).map_err(|e| e.message));
    if let Err(e) = checked {
        match old {
            Some(bytes) => warden_core::write_whole(&component_path, &bytes)?,
            None => std::fs::remove_file(&component_path)?,
        }
        docs.restore()?;
        bail!(
            "checking the new component of {}: {e}; the old one is kept",
            args.name
        );
    }
    warden_core::write_whole(&policy_path, updated.as_bytes())
        .with_context(|| format!("writing {}", policy_path.display()))?;
    docs.keep();
    outln!("{}: {} -> {}", args.name, origin.reference, pinned);
    version.report(&sha);
    report_grants(changed, accept);
    Ok(ExitCode::SUCCESS)
}

/// The policy's origin and the tag it was pulled as: what `pull` looks at again.
fn pulled_as<'p>(policy: &'p Policy, path: &Path, name: &str) -> Result<(&'p Origin, &'p str)> {
    let Some(origin) = &policy.origin else {
        bail!(
            "{} has no [origin]: only a tool added from a registry (`warden add oci://…`) can be \
             pulled again",
            path.display()
        );
    };
    let Some(tag) = &origin.pulled_as else {
        bail!(
            "{name} was added by digest ({}): there is nothing newer to look for",
            origin.reference
        );
    };
    Ok((origin, tag))
}

/// What the origin says of a new version that may replace the one in use: who signed it, when
/// it was made, and why it is older, if it is.
struct Version {
    /// The fingerprint of the key that signed it; `None` when it was taken unsigned.
    signer: Option<String>,
    /// When its publisher made it, RFC 3339 in UTC.
    created: Option<String>,
    /// Why it is older than the one in use, taken with `--allow-downgrade`.
    downgrade: Option<String>,
}

impl Version {
    /// The version `tag` points to now, refused when another key signed it than signed the one
    /// in use (unless `--key` names keys), or when it is older (unless `--allow-downgrade`).
    fn vet(origin: &Origin, tag: &str, pulled: &Pulled, args: &PullToolArgs) -> Result<Version> {
        let signer = pulled.signer.as_ref().map(|k| k.fingerprint().to_string());
        if origin.signed_by.is_some() && signer != origin.signed_by && args.trust.keys.is_empty() {
            bail!(
                "{tag} now points to {} signed by {}, not by {} as before: refused. If the \
                 publisher changed keys, pass the new one with --key",
                pulled.digest,
                signer.as_deref().unwrap_or("no trusted key"),
                origin.signed_by.as_deref().unwrap_or_default()
            );
        }
        let created = pulled.created.as_deref().and_then(created_at).map(rfc3339);
        let downgrade = older(origin.created.as_deref(), created.as_deref());
        if let (Some(why), false) = (&downgrade, args.allow_downgrade) {
            bail!(
                "{tag} now points to {}, older than the version in use: {why}. A tag moved back \
                 is refused and the version in use stays; if the publisher meant it, pass \
                 --allow-downgrade (the origin and the audit will say so)",
                pulled.digest
            );
        }
        Ok(Version {
            signer,
            created,
            downgrade,
        })
    }

    /// Writes the new version, `pinned`, into the policy's `[origin]`, which held `origin`.
    fn record(
        &self,
        doc: &mut toml_edit::DocumentMut,
        pinned: &Reference,
        origin: &Origin,
        plain_http: bool,
    ) {
        doc["origin"]["reference"] = toml_edit::value(pinned.to_string());
        doc["origin"]["added"] = toml_edit::value(now_utc());
        let Some(table) = doc["origin"].as_table_mut() else {
            return;
        };
        let mut set = |key: &str, value: Option<toml_edit::Item>| match value {
            Some(v) => table[key] = v,
            None => {
                table.remove(key);
            }
        };
        set("signed_by", self.signer.clone().map(toml_edit::value));
        set("created", self.created.clone().map(toml_edit::value));
        set(
            "downgraded_from",
            self.downgrade
                .as_ref()
                .map(|_| toml_edit::value(origin.reference.clone())),
        );
        set("plain_http", plain_http.then(|| toml_edit::value(true)));
    }

    /// Says who signed the version taken (stored as `sha`), and that it is older, if it is.
    fn report(&self, sha: &str) {
        outln!(
            "  {}; stored as {sha}",
            self.signer
                .as_ref()
                .map_or_else(|| "UNSIGNED".to_owned(), |k| format!("signed by {k}"))
        );
        if let Some(why) = &self.downgrade {
            outln!("  ! DOWNGRADE, taken with --allow-downgrade: {why}");
        }
    }
}

/// Replaces the policy's suggested tables with those of the publisher's new suggestion, `new`
/// (a table it no longer suggests goes).
fn take_grants(doc: &mut toml_edit::DocumentMut, new: &str) -> Result<()> {
    let new: toml_edit::DocumentMut = new.parse()?;
    for table in SUGGESTED_TABLES {
        match new.get(table) {
            Some(item) => doc[table] = item.clone(),
            None => {
                doc.remove(table);
            }
        }
    }
    Ok(())
}

/// Says what became of the publisher's suggestion: `changed` from the policy's grants (and its
/// text), and whether it was `accepted`.
fn report_grants(changed: Option<(&Suggestion, &str)>, accepted: bool) {
    match (changed, accepted) {
        (Some((served, _)), true) => outln!(
            "  the publisher's new grants and limits are written ({})",
            served.digest
        ),
        (Some((served, new)), false) => {
            outln!(
                "  the publisher now suggests, not granted (--accept-grants={} writes them):",
                served.digest
            );
            for line in new.lines() {
                outln!("    {}", escape(line));
            }
        }
        (None, _) => outln!("  the grants are as the publisher suggests"),
    }
}

#[cfg(test)]
mod tests {
    use super::older;

    #[test]
    fn a_version_made_before_the_one_in_use_or_with_no_time_after_one_is_older() {
        let in_use = Some("2026-12-01T17:20:31Z");
        assert!(older(in_use, Some("2026-11-30T09:00:00Z")).is_some());
        assert!(older(in_use, Some("2026-12-01T18:20:31+02:00")).is_some());
        assert!(older(in_use, None).is_some());
        assert!(older(in_use, Some("yesterday")).is_some());
        assert!(older(in_use, Some("2026-12-01T17:20:31Z")).is_none());
        assert!(older(in_use, Some("2026-12-02T00:00:00Z")).is_none());
        assert!(older(None, Some("2020-01-01T00:00:00Z")).is_none());
        assert!(older(None, None).is_none());
    }
}
