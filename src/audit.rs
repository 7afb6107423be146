//! `warden audit`: what every tool may touch, and what deserves a look.

use crate::context::Context;
use anyhow::Result;
use serde_json::{Value, json};
use std::process::ExitCode;
use warden_core::{
    Access, ByteSize, ExecutorConfig, Grants, HostPattern, HumanDuration, Isolation, NetworkMode,
    Policy, Toolbox,
};
use warden_host::Protections;

/// What the host sandbox put in force on this machine, measured by running `true` as the
/// tool would run a call; the error says why calls are refused.
type Probe = Result<Protections, String>;

/// One thing a reviewer should look at.
fn flags(policy: &Policy, probe: Option<&Probe>) -> Vec<String> {
    let mut out = Vec::new();
    match &policy.executor {
        ExecutorConfig::Host(cfg) => {
            if cfg.network.value == NetworkMode::Unrestricted {
                out.push(
                    "unrestricted network: the process shares the host's network (no \
                     allowlist)"
                        .into(),
                );
            }
            if cfg.isolation.value == Isolation::BestEffort {
                out.push(
                    "isolation = \"best-effort\": runs even where this machine cannot confine it"
                        .into(),
                );
            }
            match probe {
                Some(Ok(p)) => out.extend(p.missing.iter().map(|m| format!("missing here: {m}"))),
                Some(Err(e)) => out.push(format!("calls are refused on this machine: {e}")),
                None => {}
            }
        }
        ExecutorConfig::Wasm(cfg) => {
            if cfg.sha256.is_none() {
                out.push(
                    "unpinned: any rebuild of the component runs unreviewed (`warden pin`)".into(),
                );
            }
        }
        ExecutorConfig::Docker(cfg) => {
            if cfg.network.value == NetworkMode::Unrestricted {
                out.push(
                    "unrestricted network: the container may reach any host (Docker cannot \
                     enforce an allowlist)"
                        .into(),
                );
            }
            if !cfg.image.value.contains("@sha256:") {
                out.push(format!(
                    "image by tag ({}), not by digest: whatever is tagged so runs",
                    cfg.image.value
                ));
            }
        }
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
    if policy.limits.timeout.is_none() {
        out.push("no timeout written: the default applies".into());
    }
    out
}

fn describe(toolbox: &Toolbox, probes: &[Option<Probe>]) -> Value {
    let policies: Vec<Value> = toolbox
        .policies()
        .iter()
        .zip(probes)
        .map(|(p, probe)| {
            let tools: Vec<Value> = toolbox
                .tools()
                .filter(|t| std::sync::Arc::ptr_eq(&t.policy, p))
                .map(|t| {
                    json!({
                        "name": t.spec.name,
                        "limits": t.limits.describe(),
                        "review_required": t.review_required,
                    })
                })
                .collect();
            json!({
                "policy": p.path.display().to_string(),
                "executor": executor(&p.executor, &p.grants, probe.as_ref()),
                "grants": p.grants.describe(),
                // Wasm tools reach what `grants.net` names; a docker tool has none or all.
                "network": match &p.executor {
                    ExecutorConfig::Docker(cfg) => cfg.network.value.as_str(),
                    ExecutorConfig::Host(cfg) => cfg.network.value.as_str(),
                    ExecutorConfig::Wasm(_) => "grants",
                },
                "tools": tools,
                "flags": flags(p, probe.as_ref()),
            })
        })
        .collect();
    json!({ "policies": policies })
}

fn executor(config: &ExecutorConfig, grants: &Grants, probe: Option<&Probe>) -> Value {
    match config {
        ExecutorConfig::Host(cfg) => json!({
            "kind": "host",
            "argv": cfg.argv.value,
            "workdir": cfg.start_dir(grants).display().to_string(),
            "user": format!("{}:{}", cfg.uid, cfg.gid),
            "processes": cfg.processes,
            "cpu_time": cfg.cpu_time.map_or("the timeout".to_owned(), |c| HumanDuration(c).to_string()),
            "open_files": cfg.open_files,
            "file_size": ByteSize(cfg.file_size).to_string(),
            "tmp": ByteSize(cfg.tmp).to_string(),
            "isolation": cfg.isolation.value.as_str(),
            "in_force_here": match probe {
                Some(Ok(p)) => json!(p.describe()),
                Some(Err(e)) => json!(format!("refused: {e}")),
                None => Value::Null,
            },
        }),
        ExecutorConfig::Wasm(cfg) => json!({
            "kind": "wasm",
            "component": cfg.component.value.display().to_string(),
            "sha256": cfg.sha256.as_ref().map(|s| s.value.clone()),
        }),
        ExecutorConfig::Docker(cfg) => json!({
            "kind": "docker",
            "image": cfg.image.value,
            "argv": cfg.argv.value,
            "workdir": cfg.workdir.as_ref().map(|w| w.value.clone()),
            "mode": if cfg.session { "session" } else { "call" },
            "user": cfg.user.as_ref().map_or(
                "the owner of the read-write roots, else 65534 (never root)".to_owned(),
                |u| u.value.clone(),
            ),
            "pids": cfg.pids,
            "cpus": cfg.nano_cpus as f64 / 1e9,
            "tmp": ByteSize(cfg.tmp).to_string(),
            "hardening": [
                "read-only root filesystem", "all capabilities dropped", "no-new-privileges",
                "non-root user", "no log driver", "init reaps orphans",
                "only granted folders mounted", "only granted env",
            ],
        }),
    }
}

/// Probes each host policy's sandbox on this machine.
fn probes(ctx: &Context, toolbox: &Toolbox) -> Result<Vec<Option<Probe>>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(toolbox
        .policies()
        .iter()
        .map(|p| {
            matches!(p.executor, ExecutorConfig::Host(_)).then(|| {
                let tool = ctx.host.tool(p).map_err(|e| e.to_string())?;
                runtime.block_on(tool.probe()).map_err(|e| e.message)
            })
        })
        .collect())
}

pub fn audit(ctx: &Context, json: bool) -> Result<ExitCode> {
    let toolbox = ctx.load()?;
    let report = describe(&toolbox, &probes(ctx, &toolbox)?);
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let color = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let red = |s: &str| {
        if color {
            format!("\x1b[31m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    };
    for p in report["policies"].as_array().into_iter().flatten() {
        outln!("{}", p["policy"].as_str().unwrap_or_default());
        let ex = &p["executor"];
        if ex["kind"] == "host" {
            outln!(
                "  executor  host {} as {} in {} (isolation {})",
                ex["argv"],
                ex["user"].as_str().unwrap_or_default(),
                ex["workdir"].as_str().unwrap_or_default(),
                ex["isolation"].as_str().unwrap_or_default()
            );
            outln!(
                "  rlimits   processes {}, cpu {}, open files {}, file size {}; /tmp {}",
                ex["processes"],
                ex["cpu_time"].as_str().unwrap_or_default(),
                ex["open_files"],
                ex["file_size"].as_str().unwrap_or_default(),
                ex["tmp"].as_str().unwrap_or_default()
            );
            match &ex["in_force_here"] {
                Value::Array(lines) => {
                    for l in lines.iter().filter_map(Value::as_str) {
                        let l = if l.starts_with("MISSING") {
                            red(l)
                        } else {
                            l.to_owned()
                        };
                        outln!("  in force  {l}");
                    }
                }
                Value::String(e) => outln!("  in force  {}", red(e)),
                _ => {}
            }
        } else if ex["kind"] == "docker" {
            outln!(
                "  executor  docker {} {} (a container per {})",
                ex["image"].as_str().unwrap_or_default(),
                ex["argv"],
                ex["mode"].as_str().unwrap_or_default()
            );
            outln!(
                "  container user {}, pids {}, cpus {}, /tmp {}; {}",
                ex["user"].as_str().unwrap_or_default(),
                ex["pids"],
                ex["cpus"],
                ex["tmp"].as_str().unwrap_or_default(),
                strings(&ex["hardening"]).join(", ")
            );
        } else {
            let pin = ex["sha256"].as_str().map_or_else(
                || red("UNPINNED"),
                |s| format!("sha256 {}…", &s[..12.min(s.len())]),
            );
            outln!(
                "  executor  {} {} ({pin})",
                ex["kind"].as_str().unwrap_or_default(),
                ex["component"].as_str().unwrap_or_default()
            );
        }
        let g = &p["grants"];
        outln!(
            "  env       {}",
            list_or_none(&g["env"], |v| v
                .as_object()
                .map(|m| m
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect())
                .unwrap_or_default())
        );
        outln!("  env host  {}", list_or_none(&g["env_from_host"], strings));
        outln!(
            "  fs        {}",
            list_or_none(&g["fs"], |v| v
                .as_array()
                .map(|a| a
                    .iter()
                    .map(|f| format!(
                        "{} -> {} ({})",
                        f["host"].as_str().unwrap_or_default(),
                        f["guest"].as_str().unwrap_or_default(),
                        f["access"].as_str().unwrap_or_default()
                    ))
                    .collect())
                .unwrap_or_default())
        );
        match p["network"].as_str().unwrap_or("none") {
            "grants" => outln!("  network   {}", network_line(&g["net"])),
            "none" => outln!("  network   none"),
            other => outln!("  network   {}", red(other)),
        }
        for t in p["tools"].as_array().into_iter().flatten() {
            let l = &t["limits"];
            outln!(
                "  tool {:<20} timeout {} memory {} fuel {} output {} concurrency {}{}",
                t["name"].as_str().unwrap_or_default(),
                l["timeout"].as_str().unwrap_or_default(),
                l["memory"].as_str().unwrap_or_default(),
                l["fuel"].as_u64().map_or("off".into(), |f| f.to_string()),
                l["output"].as_str().unwrap_or_default(),
                l["concurrency"],
                if t["review_required"] == true {
                    ", review required"
                } else {
                    ""
                },
            );
        }
        for f in p["flags"].as_array().into_iter().flatten() {
            outln!("  {} {}", red("!"), f.as_str().unwrap_or_default());
        }
        outln!();
    }
    Ok(ExitCode::SUCCESS)
}

/// Hosts, the DNS switch, and injected credentials by name (values never).
fn network_line(net: &Value) -> String {
    let mut parts = strings(&net["hosts"]);
    if net["dns"] == true {
        parts.push("guest DNS lookups".into());
    }
    for c in net["credentials"].as_array().into_iter().flatten() {
        parts.push(format!(
            "{} header for {} from ${}",
            c["header"].as_str().unwrap_or_default(),
            c["host"].as_str().unwrap_or_default(),
            c["from_host"].as_str().unwrap_or_default()
        ));
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn list_or_none(v: &Value, f: impl Fn(&Value) -> Vec<String>) -> String {
    let items = f(v);
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}
