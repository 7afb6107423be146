//! `warden audit`: what every tool may touch, and what deserves a look. Each backend reports
//! what it enforces; this prints it beside the grants, limits and flags, as text or JSON.

use anyhow::Result;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use warden::Warden;
use warden_core::shown::{Escaped, escape, escape_json};
use warden_core::{
    Access, ByteSize, Capabilities, Grants, HostPattern, HumanDuration, Limits, Origin, Policy,
    Probe, ProbeError, Reach, Report, Toolbox,
};

/// The whole audit, as `--json` prints it.
#[derive(Serialize)]
struct Audit {
    policies: Vec<PolicyAudit>,
    /// The policy files that did not load: none of their tools is served.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    not_loaded: Vec<NotLoaded>,
}

#[derive(Serialize)]
struct NotLoaded {
    policy: String,
    /// Why, naming file, line and fix.
    error: String,
}

#[derive(Serialize)]
struct PolicyAudit {
    policy: String,
    executor: ExecutorAudit,
    grants: Value,
    /// `grants` (what `net` names), `none` or `unrestricted`.
    network: Reach,
    /// What the executor kind can honour at all.
    capabilities: Capabilities,
    tools: Vec<ToolAudit>,
    flags: Vec<String>,
    /// Where the component came from, when from a registry.
    #[serde(skip_serializing_if = "Option::is_none")]
    origin: Option<Origin>,
    #[serde(skip)]
    lines: Vec<(&'static str, String)>,
}

#[derive(Serialize)]
struct ExecutorAudit {
    kind: String,
    #[serde(flatten)]
    settings: Map<String, Value>,
    /// What a probe found in force on this machine: its lines, or why calls are refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    in_force_here: Option<Value>,
}

#[derive(Serialize)]
struct ToolAudit {
    name: String,
    limits: Value,
    review_required: bool,
    /// A person decides, once a call has run, whether its changes are kept.
    review_changes: bool,
    #[serde(skip)]
    in_force: Limits,
}

/// What a reviewer should look at in any policy, whatever its executor.
fn flags(
    policy: &Policy,
    report: &Report,
    probe: Option<&Result<Probe, ProbeError>>,
) -> Vec<String> {
    let mut out = report.flags.clone();
    match probe {
        Some(Ok(p)) => out.extend(p.missing.iter().map(|m| format!("missing here: {m}"))),
        Some(Err(e)) => out.push(format!("calls are refused on this machine: {e}")),
        None => {}
    }
    for g in &policy.grants.fs {
        if g.access == Access::ReadWrite {
            out.push(format!(
                "read-write root: {} (as {})",
                g.host.display(),
                g.guest
            ));
        }
    }
    for name in &policy.grants.env_from_host {
        out.push(format!(
            "env from the host: {name} (its value is never shown)"
        ));
    }
    for name in &policy.grants.env_from_caller {
        out.push(format!("env from the client: {name} (set for its session)"));
    }
    let net = &policy.grants.net;
    for g in net.hosts.iter().filter(|g| g.is_wide()) {
        let what = if matches!(g.pattern, HostPattern::Any) {
            "any public host"
        } else {
            "a whole address range"
        };
        out.push(format!("wide network grant: {g} ({what})"));
    }
    if net.dns {
        out.push("guest DNS lookups on: a lookup can itself carry data out".into());
    }
    for c in net.credentials.iter().filter(|c| c.allow_plain_http) {
        let (header, host) = (&c.header, &c.host);
        out.push(format!(
            "credential over plain HTTP: the {header} header for {host} travels readable"
        ));
    }
    if net.credential_host_shared && !net.credentials.is_empty() {
        let hosts: Vec<&str> = net.credentials.iter().map(|c| c.host.as_str()).collect();
        out.push(format!(
            "credential host shared (credential_host_shared = true): a host that reflects its \
             request can hand the sandbox the credential for {}, to send to the other granted \
             destinations",
            hosts.join(", ")
        ));
    }
    if policy.limits.timeout.is_none() {
        out.push("no timeout written: the default applies".into());
    }
    if policy
        .origin
        .as_ref()
        .is_some_and(|o| o.signed_by.is_none())
    {
        out.push(
            "unsigned: added from a registry with --allow-unsigned; no trusted key signed it"
                .into(),
        );
    }
    if policy.origin.as_ref().is_some_and(|o| o.plain_http) {
        out.push(
            "plain HTTP: fetched from a registry off this machine with --insecure-registry; \
             its signature was checked, its transport was not private"
                .into(),
        );
    }
    if let Some(from) = policy
        .origin
        .as_ref()
        .and_then(|o| o.downgraded_from.as_deref())
    {
        out.push(format!(
            "downgrade: pulled with --allow-downgrade, older than {from}, which it replaced"
        ));
    }
    out
}

/// The `[origin]` of a component from a registry, as one line.
fn origin_line(origin: &Origin) -> String {
    let signer = origin
        .signed_by
        .as_deref()
        .map_or_else(|| "UNSIGNED".to_owned(), |k| format!("signed by {k}"));
    let mut line = format!("{} ({signer}", origin.reference);
    if let Some(tag) = &origin.pulled_as {
        line.push_str(&format!(", pulled as {tag}"));
    }
    if let Some(added) = &origin.added {
        line.push_str(&format!(", added {added}"));
    }
    if let Some(created) = &origin.created {
        line.push_str(&format!(", made {created}"));
    }
    if origin.plain_http {
        line.push_str(", over PLAIN HTTP");
    }
    if origin.downgraded_from.is_some() {
        line.push_str(", a DOWNGRADE");
    }
    line.push(')');
    line
}

fn describe(toolbox: &Toolbox, probes: Vec<Option<Result<Probe, ProbeError>>>) -> Audit {
    let policies = toolbox
        .policies()
        .iter()
        .zip(probes)
        .map(|(loaded, probe)| {
            let (p, report) = (&loaded.policy, &loaded.report);
            let tools = toolbox
                .tools()
                .filter(|t| std::sync::Arc::ptr_eq(&t.policy, p))
                .map(|t| ToolAudit {
                    name: t.spec.name.clone(),
                    limits: t.limits.describe(),
                    review_required: t.review_required,
                    review_changes: t.review_changes,
                    in_force: t.limits,
                })
                .collect();
            let mut lines: Vec<(&'static str, String)> = report
                .lines
                .iter()
                .map(|l| (l.label, l.text.clone()))
                .collect();
            if let Some(origin) = &p.origin {
                lines.push(("origin", origin_line(origin)));
            }
            let in_force_here = probe.as_ref().map(|probe| match probe {
                Ok(found) => {
                    lines.extend(found.in_force.iter().map(|l| ("in force", l.clone())));
                    json!(found.in_force)
                }
                Err(e) => {
                    lines.push(("in force", format!("refused: {e}")));
                    json!(format!("refused: {e}"))
                }
            });
            PolicyAudit {
                policy: p.path.display().to_string(),
                executor: ExecutorAudit {
                    kind: p.kind.value.clone(),
                    settings: report.settings.clone(),
                    in_force_here,
                },
                grants: p.grants.describe(),
                network: report.network,
                capabilities: loaded.capabilities,
                tools,
                flags: flags(p, report, probe.as_ref()),
                origin: p.origin.clone(),
                lines,
            }
        })
        .collect();
    let not_loaded = toolbox
        .broken()
        .iter()
        .map(|b| NotLoaded {
            policy: b.path.display().to_string(),
            error: b.error.to_string(),
        })
        .collect();
    Audit {
        policies,
        not_loaded,
    }
}

/// Probes each policy's sandbox on this machine, where its backend has something to probe.
fn probes(ctx: &Warden, toolbox: &Toolbox) -> Result<Vec<Option<Result<Probe, ProbeError>>>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let backends = ctx.backends();
    let list = backends.list();
    Ok(toolbox
        .policies()
        .iter()
        .map(|loaded| {
            let backend = list.iter().find(|b| b.kind() == loaded.policy.kind.value)?;
            runtime.block_on(backend.probe(&loaded.policy))
        })
        .collect())
}

/// The audit of the toolbox as `warden audit --json` prints it.
pub(crate) fn audit_json(ctx: &Warden) -> Result<Value> {
    let toolbox = ctx.load()?;
    Ok(serde_json::to_value(describe(
        &toolbox,
        probes(ctx, &toolbox)?,
    ))?)
}

/// `warden audit`; or the demo's, `built` naming the components it has just built from the
/// checkout's sources: their policies carry no pin (it would refuse the next rebuild), which
/// is said once for them all rather than flagged on each.
pub(crate) fn audit(ctx: &Warden, json: bool, built: &[PathBuf]) -> Result<ExitCode> {
    let toolbox = ctx.load()?;
    let audit = describe(&toolbox, probes(ctx, &toolbox)?);
    if json {
        outln!("{}", escape_json(&serde_json::to_string_pretty(&audit)?));
        return Ok(ExitCode::SUCCESS);
    }
    let red = Red(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    // First: a policy left out is what a reviewer most needs to see.
    for broken in &audit.not_loaded {
        outln!("{}", Escaped(&broken.policy));
        outln!(
            "  {} not loaded: {}",
            red.paint("!"),
            Escaped(&broken.error)
        );
        outln!();
    }
    let built: Vec<PathBuf> = built.iter().filter_map(|b| b.canonicalize().ok()).collect();
    let mut unpinned_built = Vec::new();
    for (p, loaded) in audit.policies.iter().zip(toolbox.policies()) {
        let runs_built = p
            .executor
            .settings
            .get("component")
            .and_then(Value::as_str)
            .and_then(|c| Path::new(c).canonicalize().ok())
            .is_some_and(|c| built.contains(&c));
        outln!("{}", Escaped(&p.policy));
        for (label, text) in &p.lines {
            let text = if text.starts_with("MISSING") || text.starts_with("refused") {
                red.paint(text)
            } else {
                escape(text).into_owned()
            };
            outln!("  {label:<9} {text}");
        }
        grant_lines(&loaded.policy.grants, p.network, &red);
        tool_lines(&p.tools);
        for f in &p.flags {
            if runs_built && f == warden_wasm::UNPINNED {
                unpinned_built.push(loaded.policy.path.clone());
                continue;
            }
            outln!("  {} {}", red.paint("!"), Escaped(f));
        }
        outln!();
    }
    if !unpinned_built.is_empty() {
        let names: Vec<String> = unpinned_built
            .iter()
            .map(|p| p.file_name().unwrap_or(p.as_os_str()).display().to_string())
            .collect();
        outln!(
            "{} unpinned: {} run the components the demo has just built from this checkout's \
             sources, so they carry no pin (a pin would refuse the next rebuild); `warden pin` \
             pins a tool you keep",
            red.paint("!"),
            Escaped(&names.join(", "))
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Red at a terminal, for what a reviewer must not miss.
struct Red(bool);

impl Red {
    /// `s`, escaped (what the policy and the backends wrote is escaped before any colour is
    /// added), in red at a terminal.
    fn paint(&self, s: &str) -> String {
        if self.0 {
            format!("\x1b[31m{}\x1b[0m", escape(s))
        } else {
            escape(s).into_owned()
        }
    }
}

/// A policy's grants, a line each: its variables, folders and network.
fn grant_lines(grants: &Grants, network: Reach, red: &Red) {
    outln!("  env       {}", Escaped(env_line(grants)));
    outln!(
        "  env host  {}",
        Escaped(list_or_none(grants.env_from_host.clone()))
    );
    if !grants.env_from_caller.is_empty() {
        let names = grants.env_from_caller.join(", ");
        outln!("  env set   {} (by the client)", Escaped(names));
    }
    outln!(
        "  fs        {}",
        Escaped(list_or_none(
            grants.fs.iter().map(ToString::to_string).collect()
        ))
    );
    match network {
        Reach::Grants => outln!("  network   {}", Escaped(network_line(grants))),
        Reach::None => outln!("  network   none"),
        Reach::Unrestricted => outln!("  network   {}", red.paint("unrestricted")),
    }
}

/// A policy's tools, a line each with the limits in force.
fn tool_lines(tools: &[ToolAudit]) {
    for t in tools {
        let l = &t.in_force;
        outln!(
            "  tool {:<20} timeout {} memory {} fuel {} output {} concurrency {}{}",
            Escaped(&t.name),
            HumanDuration(l.timeout),
            ByteSize(l.memory),
            l.fuel.map_or("off".into(), |f| f.to_string()),
            ByteSize(l.output),
            l.concurrency,
            match (t.review_required, t.review_changes) {
                (true, true) => ", review required, changes reviewed",
                (true, false) => ", review required",
                (false, true) => ", changes reviewed",
                (false, false) => "",
            },
        );
    }
}

/// Literal env as `KEY=value`, secret values hidden.
fn env_line(grants: &Grants) -> String {
    list_or_none(
        grants
            .shown_env()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
    )
}

/// Hosts, the DNS switch, and injected credentials by name (values never).
fn network_line(grants: &Grants) -> String {
    let net = &grants.net;
    let mut parts: Vec<String> = net.hosts.iter().map(ToString::to_string).collect();
    if net.dns {
        parts.push("guest DNS lookups".into());
    }
    for c in &net.credentials {
        parts.push(format!(
            "{} header for {} from ${}",
            c.header, c.host, c.from_host
        ));
    }
    list_or_none(parts)
}

fn list_or_none(items: Vec<String>) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}
