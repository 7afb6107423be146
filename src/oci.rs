//! `warden keygen`, `warden push` and `warden add oci://…`: tools that travel through OCI
//! registries, signed, verified by digest before anything is stored.

use crate::context;
use crate::install::{Install, install, policy_path};
use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use warden::Warden;
use warden_core::shown::escape;
use warden_core::{Backend, ByteSize, HumanDuration, Policy};
use warden_oci::layout::WitFile;
use warden_oci::{
    Bounds, Credentials, Digest, Pulled, Reach, Reference, SigningKey, Suggestion, Target, Trust,
    TrustFile, TrustedKey,
};
use warden_wasm::WasmConfig;

/// The tables of a policy a publisher may suggest; anything else is dropped.
pub(crate) const SUGGESTED_TABLES: [&str; 2] = ["grants", "limits"];

#[derive(clap::Args)]
pub(crate) struct KeygenArgs {
    /// Writes PREFIX.key (the private key, readable by its owner only) and PREFIX.pub.
    #[arg(long, default_value = "warden")]
    out: PathBuf,
}

#[derive(clap::Args)]
pub(crate) struct PushArgs {
    /// The wasm tool (its policy's name) whose component is pushed.
    tool: String,
    /// Where: oci://REGISTRY/REPOSITORY:TAG. A registry on this machine's loopback is reached
    /// over plain HTTP, every other over HTTPS.
    reference: String,
    /// Sign the component's manifest and the policy's with this private key: PEM, PKCS#8
    /// (`warden keygen`, openssl) or cosign's encrypted key, opened with COSIGN_PASSWORD.
    #[arg(long, value_name = "KEY.pem")]
    sign: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// How a registry is reached, beyond the roots and credentials warden finds itself.
#[derive(clap::Args)]
pub(crate) struct RegistryArgs {
    /// Allow plain HTTP to this registry (HOST or HOST:PORT) though it is not dialled on
    /// loopback, as Docker's insecure-registries does: HTTPS first, HTTP when it speaks no TLS.
    /// Repeatable; what comes so is flagged in the audit.
    #[arg(long = "insecure-registry", value_name = "HOST[:PORT]")]
    insecure: Vec<String>,
    /// The longest connecting to a registry may take: its name resolved, TCP and TLS.
    #[arg(
        long = "registry-connect-timeout",
        value_name = "DURATION",
        default_value_t = HumanDuration(Bounds::DEFAULT.connect)
    )]
    connect_timeout: HumanDuration,
    /// The longest a registry may send nothing: before it answers, or within its answer.
    #[arg(
        long = "registry-idle-timeout",
        value_name = "DURATION",
        default_value_t = HumanDuration(Bounds::DEFAULT.idle)
    )]
    idle_timeout: HumanDuration,
    /// The longest one exchange that moves no blob (a manifest, a token, a signature) may
    /// take; a blob has this plus its size at --registry-min-rate.
    #[arg(
        long = "registry-timeout",
        value_name = "DURATION",
        default_value_t = HumanDuration(Bounds::DEFAULT.request)
    )]
    timeout: HumanDuration,
    /// The slowest a blob may come or go, a second.
    #[arg(
        long = "registry-min-rate",
        value_name = "SIZE",
        default_value_t = ByteSize(Bounds::DEFAULT.min_rate)
    )]
    min_rate: ByteSize,
}

impl RegistryArgs {
    /// The bounds the flags set; a zero is refused (it would refuse every registry).
    fn bounds(&self) -> Result<Bounds> {
        for (flag, zero) in [
            (
                "--registry-connect-timeout",
                self.connect_timeout.0.is_zero(),
            ),
            ("--registry-idle-timeout", self.idle_timeout.0.is_zero()),
            ("--registry-timeout", self.timeout.0.is_zero()),
            ("--registry-min-rate", self.min_rate.0 == 0),
        ] {
            if zero {
                bail!("{flag} is 0: give it more (`--help` states its default)");
            }
        }
        Ok(Bounds {
            connect: self.connect_timeout.0,
            idle: self.idle_timeout.0,
            request: self.timeout.0,
            min_rate: self.min_rate.0,
        })
    }
}

/// How `warden add oci://…` trusts what it pulls.
#[derive(clap::Args)]
pub(crate) struct PullArgs {
    /// A public key (PEM) whose signature the artifact must carry; repeatable.
    #[arg(long = "key", value_name = "PUBLIC.pem")]
    pub(crate) keys: Vec<PathBuf>,
    /// Take an artifact that no trusted key signed (its policy says so).
    #[arg(long)]
    allow_unsigned: bool,
    /// Write the publisher's suggested grants and limits into the policy instead of showing
    /// them as comments: =DIGEST (shown with them) takes them only if the suggestion served
    /// now has that digest; bare, warden shows them and asks at a terminal.
    #[arg(
        long,
        value_name = "DIGEST",
        num_args = 0..=1,
        require_equals = true,
        value_parser = digest
    )]
    pub(crate) accept_grants: Option<Option<Digest>>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// How `reference`'s registry is reached: with the roots warden trusts (`--upstream-roots`
/// among them) and the system's, the credentials the environment or Docker's config hold for it, its name's
/// addresses when `--resolve` pins them, and plain HTTP when `--insecure-registry` names it.
fn reach(ctx: &Warden, reference: &Reference, args: &RegistryArgs) -> Result<Reach> {
    let (host, _) = reference.host_and_port();
    let insecure = args.insecure.iter().any(|r| reference.named_by(r));
    Ok(Reach {
        bounds: args.bounds()?,
        tls: ctx.egress.clone().with_system_roots().tls(),
        credentials: Credentials::for_registry(reference)?,
        pinned: ctx
            .egress
            .resolver()
            .pinned(host)
            .unwrap_or_default()
            .to_vec(),
        insecure,
    })
}

/// `reference` pulled and verified with the keys `args` and the trust file name.
pub(crate) fn fetch(
    ctx: &Warden,
    reference: &Reference,
    args: &PullArgs,
) -> Result<warden_oci::Pulled> {
    let trust = trust(ctx, reference, args)?;
    let reach = reach(ctx, reference, &args.registry)?;
    Ok(context::runtime()?.block_on(warden_oci::pull(reference, &trust, &reach))?)
}

/// The keys `args` and the trust file name for `reference`, and whether unsigned is taken.
fn trust(ctx: &Warden, reference: &Reference, args: &PullArgs) -> Result<Trust> {
    let mut keys = TrustFile::load(&ctx.trust)?.keys_for(reference);
    for k in &args.keys {
        let pem = std::fs::read_to_string(k)
            .with_context(|| format!("reading the public key {}", k.display()))?;
        keys.push(TrustedKey::from_pem(&pem).with_context(|| k.display().to_string())?);
    }
    Ok(if args.allow_unsigned {
        Trust::Unsigned(keys)
    } else {
        Trust::Keys(keys)
    })
}

pub(crate) fn keygen(args: &KeygenArgs) -> Result<ExitCode> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let private = args.out.with_extension("key");
    let public = args.out.with_extension("pub");
    for path in [&private, &public] {
        if path.exists() {
            bail!(
                "{} exists: pick another --out, or remove it",
                path.display()
            );
        }
    }
    let (private_pem, public_pem) = warden_oci::generate()?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&private)
        .and_then(|mut f| f.write_all(private_pem.as_bytes()))
        .with_context(|| format!("writing {}", private.display()))?;
    warden_core::write_whole(&public, public_pem.as_bytes())
        .with_context(|| format!("writing {}", public.display()))?;
    let fingerprint = TrustedKey::from_pem(&public_pem)?.fingerprint();
    outln!(
        "wrote {} (private: keep it) and {}",
        private.display(),
        public.display()
    );
    outln!("key {fingerprint}");
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn push(ctx: &Warden, args: &PushArgs) -> Result<ExitCode> {
    let reference = Reference::parse(&args.reference)?;
    let path = ctx.toolbox.join(format!("{}.toml", args.tool));
    if !path.is_file() {
        bail!(
            "there is no policy {} in the toolbox {}: `warden tools` lists the tools",
            Path::new(&path).display(),
            ctx.toolbox.display()
        );
    }
    let backend = ctx.wasm();
    let policy = Policy::load(&path, &[&backend as &dyn Backend])?;
    let config = WasmConfig::from_policy(&policy)?;
    let component = &config.component.value;
    let bytes = std::fs::read(component)
        .with_context(|| format!("reading the component {}", component.display()))?;
    let text = std::fs::read_to_string(&path)?;
    let suggestion = suggestion_of(&text, &path)?;
    let docs = match &config.wit {
        Some(folder) => wit_files(&folder.value)?,
        None => Vec::new(),
    };
    let key = args
        .sign
        .as_deref()
        .map(|k| {
            let pem = std::fs::read_to_string(k)
                .with_context(|| format!("reading the signing key {}", k.display()))?;
            // cosign's variable, so that a key of `cosign generate-key-pair` signs as there.
            let password = std::env::var_os("COSIGN_PASSWORD");
            let password = password.as_ref().map(|p| p.as_encoded_bytes());
            SigningKey::from_pem(&pem, password).with_context(|| k.display().to_string())
        })
        .transpose()?;
    let pushed = context::runtime()?.block_on(warden_oci::push(
        &reference,
        bytes,
        &now_utc(),
        Some(suggestion),
        &docs,
        key.as_ref(),
        &reach(ctx, &reference, &args.registry)?,
    ))?;
    outln!(
        "pushed {} as {}",
        component.display(),
        reference.at(&pushed.component)
    );
    if let Some(policy) = &pushed.policy {
        outln!("  its grants and limits beside it: {policy}");
    }
    if !docs.is_empty() {
        let names: Vec<&str> = docs.iter().map(|d| d.name.as_str()).collect();
        outln!("  its WIT docs with them: {}", names.join(", "));
    }
    match &key {
        Some(key) => outln!("  signed by {}", key.public().fingerprint()),
        None => outln!("  unsigned: `warden add` takes it only with --allow-unsigned"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The `*.wit` files of a policy's WIT folder, to travel with the tool. Only a flat folder
/// travels: a `deps` folder would need its own layout, so it is refused rather than left out.
fn wit_files(folder: &Path) -> Result<Vec<WitFile>> {
    let entries = std::fs::read_dir(folder)
        .with_context(|| format!("reading the WIT folder {}", folder.display()))?;
    let mut docs = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", folder.display()))?;
        let path = entry.path();
        if path.is_dir() {
            bail!(
                "the WIT folder {} has a subfolder, {}: `warden push` carries a flat folder of                  .wit files; merge its packages into the folder, or push from a policy without                  `wit`",
                folder.display(),
                path.display()
            );
        }
        if path.extension().is_some_and(|e| e == "wit") {
            let name = entry.file_name().to_string_lossy().into_owned();
            let text =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            docs.push(WitFile::new(&name, text).with_context(|| path.display().to_string())?);
        }
    }
    docs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(docs)
}

/// Now, RFC 3339 in UTC.
pub(crate) fn now_utc() -> String {
    rfc3339(time::OffsetDateTime::now_utc())
}

/// `t` to the second, RFC 3339 in UTC.
pub(crate) fn rfc3339(t: time::OffsetDateTime) -> String {
    t.to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// A creation time as a manifest carries it, when it reads as RFC 3339.
pub(crate) fn created_at(text: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()
}

/// `--accept-grants=DIGEST`'s value.
fn digest(text: &str) -> Result<Digest, String> {
    Digest::parse(text).map_err(|e| e.to_string())
}

/// Whether the publisher's suggestion `served` (with its text as it would be written) is to
/// be written, as `--accept-grants` asks (`accept`): never without it; with a digest, only
/// when the served suggestion has it; bare, when a person at the terminal says so after seeing
/// it. Anything else is refused before anything is stored.
pub(crate) fn accepted(
    accept: Option<&Option<Digest>>,
    served: Option<(&Suggestion, &str)>,
    reference: &Reference,
) -> Result<bool> {
    use std::io::{BufRead as _, IsTerminal as _, Write as _};
    // An error is one line: the suggestion's lines, joined.
    let listed = |text: &str| {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    };
    match (accept, served) {
        (None, _) => Ok(false),
        (Some(Some(wanted)), None) => bail!(
            "--accept-grants={wanted}, but {reference} comes with no suggestion now; nothing \
             was stored"
        ),
        (Some(Some(wanted)), Some((suggestion, shown))) => {
            if &suggestion.digest == wanted {
                return Ok(true);
            }
            bail!(
                "--accept-grants={wanted}, but the suggestion served with {reference} now is \
                 {}; nothing was stored. It suggests: {}. To take these, pass \
                 --accept-grants={}",
                suggestion.digest,
                listed(shown),
                suggestion.digest
            )
        }
        (Some(None), None) => Ok(false),
        (Some(None), Some((suggestion, shown))) => {
            let digest = &suggestion.digest;
            if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
                bail!(
                    "--accept-grants without a digest asks at a terminal, and there is none; \
                     nothing was stored. The publisher suggests ({digest}): {}. To take \
                     exactly these, pass --accept-grants={digest}",
                    listed(shown)
                );
            }
            outln!("the publisher suggests ({digest}):");
            for line in shown.lines() {
                outln!("    {}", escape(line));
            }
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "Write these grants and limits into the policy? [y/N] ");
            let _ = out.flush();
            drop(out);
            let mut answer = String::new();
            std::io::stdin().lock().read_line(&mut answer)?;
            if matches!(answer.trim(), "y" | "Y" | "yes") {
                return Ok(true);
            }
            bail!(
                "the publisher's grants were not accepted; nothing was stored (without \
                 --accept-grants they are shown, not granted)"
            )
        }
    }
}

/// The `[grants]` and `[limits]` of a policy's text.
pub(crate) fn suggestion_of(text: &str, path: &Path) -> Result<String> {
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("{}", path.display()))?;
    let names: Vec<String> = doc.iter().map(|(k, _)| k.to_owned()).collect();
    for name in names {
        if !SUGGESTED_TABLES.contains(&name.as_str()) {
            doc.remove(&name);
        }
    }
    Ok(doc.to_string().trim_start().to_owned())
}

/// The publisher's suggestion that came with `pulled`, and its tables as they would be
/// written.
pub(crate) fn served_suggestion(pulled: &Pulled) -> Result<Option<(&Suggestion, String)>> {
    pulled
        .suggestion
        .as_ref()
        .map(|s| suggestion_of(&s.text, Path::new("the publisher's suggestion")).map(|t| (s, t)))
        .transpose()
}

/// `warden add oci://…`: the component `source` names, pulled and verified, installed as
/// `name` (else its repository's last segment) with its origin recorded and the publisher's
/// suggested grants written as `--accept-grants` says (else shown as comments).
pub(crate) fn add(
    ctx: &Warden,
    source: String,
    name: Option<String>,
    force: bool,
    args: &PullArgs,
) -> Result<ExitCode> {
    let reference = Reference::parse(&source)?;
    let place = Place::of(ctx, &reference, name, force)?;
    let pulled = fetch(ctx, &reference, args)?;
    let pinned = reference.at(&pulled.digest);
    let signer = match &pulled.signer {
        Some(key) => format!("signed by {}", key.fingerprint()),
        None => "UNSIGNED (taken with --allow-unsigned)".to_owned(),
    };
    let origin = origin(&reference, &pinned, &pulled);
    let suggestion = served_suggestion(&pulled)?;
    let accept = accepted(
        args.accept_grants.as_ref(),
        suggestion.as_ref().map(|(s, t)| (*s, t.as_str())),
        &reference,
    )?;
    let (grants, comments) = match (&suggestion, accept) {
        (Some((_, text)), true) => (Some(text.clone()), String::new()),
        (Some((served, text)), false) => (None, suggested_as_comments(served, text)),
        (None, _) => (None, String::new()),
    };
    warden_core::write_whole(&place.component, &pulled.component)
        .with_context(|| format!("writing {}", place.component.display()))?;
    let wrote_docs = write_docs(&place.docs, &pulled.docs);
    let installed = wrote_docs.and_then(|wit| {
        install(
            ctx,
            &Install {
                name: &place.name,
                named: place.named,
                component: &place.component,
                wit,
                comments: Some(comments),
                origin: Some(origin.to_string()),
                grants,
            },
            &place.policy,
        )
    });
    if let Err(e) = installed {
        let _ = std::fs::remove_file(&place.component);
        if !pulled.docs.is_empty() {
            let _ = std::fs::remove_dir_all(&place.docs);
        }
        return Err(e);
    }
    outln!("  from {pinned}, {signer}");
    match (&suggestion, accept) {
        (Some((served, _)), true) => {
            outln!(
                "  the publisher's grants and limits are written ({})",
                served.digest
            );
        }
        (Some((served, text)), false) => {
            outln!(
                "  the publisher suggests, not granted (--accept-grants={} writes them):",
                served.digest
            );
            for line in text.lines() {
                outln!("    {}", escape(line));
            }
        }
        (None, _) => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// Where `warden add oci://…` puts a tool: its name, and its policy, component and docs
/// folder in the toolbox, none of which may exist unless `--force`.
struct Place {
    name: String,
    /// The name was given (`--name`), not taken from the repository.
    named: bool,
    policy: PathBuf,
    component: PathBuf,
    docs: PathBuf,
}

impl Place {
    fn of(ctx: &Warden, reference: &Reference, name: Option<String>, force: bool) -> Result<Self> {
        let stem = reference
            .repository
            .rsplit('/')
            .next()
            .unwrap_or(&reference.repository)
            .to_owned();
        let named = name.is_some();
        let name = name.unwrap_or(stem);
        let policy = policy_path(ctx, &name, force)?;
        let component = ctx.toolbox.join(format!("{name}.wasm"));
        let docs = ctx.toolbox.join(format!("{name}.wit"));
        for path in [&component, &docs] {
            if path.exists() && !force {
                bail!(
                    "{} already exists; pass --force to overwrite it, or --name to pick another",
                    path.display()
                );
            }
        }
        Ok(Place {
            name,
            named,
            policy,
            component,
            docs,
        })
    }
}

/// The policy's `[origin]` for `pulled`, asked for as `reference` and pinned as `pinned`.
fn origin(reference: &Reference, pinned: &Reference, pulled: &Pulled) -> toml_edit::DocumentMut {
    let mut origin = toml_edit::Table::new();
    origin["reference"] = toml_edit::value(pinned.to_string());
    if let Some(key) = &pulled.signer {
        origin["signed_by"] = toml_edit::value(key.fingerprint().to_string());
    }
    if matches!(reference.target, Target::Tag(_)) {
        origin["pulled_as"] = toml_edit::value(reference.to_string());
    }
    origin["added"] = toml_edit::value(now_utc());
    if let Some(created) = pulled.created.as_deref().and_then(created_at) {
        origin["created"] = toml_edit::value(rfc3339(created));
    }
    if pulled.plain_http {
        origin["plain_http"] = toml_edit::value(true);
    }
    let mut doc = toml_edit::DocumentMut::new();
    doc["origin"] = toml_edit::Item::Table(origin);
    doc
}

/// The publisher's suggestion `served` (its tables as `text`) as comments over the policy,
/// saying how to write it.
fn suggested_as_comments(served: &Suggestion, text: &str) -> String {
    let mut comments = format!(
        "# The publisher suggests these grants and limits (written with \
         --accept-grants={}):\n",
        served.digest
    );
    for line in text.lines() {
        comments.push_str(format!("#   {line}").trim_end());
        comments.push('\n');
    }
    comments
}

/// Writes the WIT docs that came with a tool into `folder` (afresh), for its policy's `wit`;
/// `None` when none came.
pub(crate) fn write_docs<'a>(folder: &'a Path, docs: &[WitFile]) -> Result<Option<&'a Path>> {
    if docs.is_empty() {
        return Ok(None);
    }
    if folder.exists() {
        std::fs::remove_dir_all(folder)
            .with_context(|| format!("removing the old {}", folder.display()))?;
    }
    std::fs::create_dir_all(folder).with_context(|| format!("creating {}", folder.display()))?;
    for doc in docs {
        let path = folder.join(&doc.name);
        warden_core::write_whole(&path, &doc.text)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(Some(folder))
}
