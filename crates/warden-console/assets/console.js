// The console's page: every string that came from a tool, a model or a sandbox is set with
// textContent (never markup), so it is shown, never run.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const state = { after: 0, calls: [], perTool: new Map() };

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

async function getJson(path) {
  const r = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()));
  return r.json();
}

/** `text` indented, when it is JSON; else as it is. */
function prettyJson(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch (e) {
    return String(text);
  }
}

/** The JSON object `text` holds, or why it holds none. */
function jsonObject(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return "The arguments are not JSON: " + e.message;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return "The arguments are a JSON object, like {\"a\": 1}.";
  }
  return value;
}

function listText(items) {
  return items && items.length ? items.map(String).join(", ") : "none";
}

function renderTools(audit) {
  const list = document.getElementById("tools-list");
  list.replaceChildren();
  for (const broken of audit.not_loaded || []) {
    const box = el("div", null, "policy");
    box.append(el("h3", broken.policy), el("p", "not loaded: " + broken.error, "flag"));
    list.append(box);
  }
  // What deserves a look first: policies with flags.
  const policies = [...(audit.policies || [])].sort(
    (a, b) => (b.flags || []).length - (a.flags || []).length);
  for (const p of policies) {
    const box = el("div", null, "policy");
    box.append(el("h3", p.policy));
    const dl = el("dl");
    const row = (k, v) => dl.append(el("dt", k), el("dd", v));
    const g = p.grants || {};
    row("runtime", (p.executor || {}).kind);
    row("tools", listText((p.tools || []).map(t => t.name)));
    row("folders", listText((g.fs || []).map(f => f.host + " → " + f.guest + " (" + f.access + ")")));
    row("env", listText(Object.keys(g.env || {}).concat(g.env_from_host || [])));
    const net = Array.isArray(g.net) ? listText(g.net) : JSON.stringify(g.net);
    row("network", p.network === "grants" ? net : String(p.network));
    const limits = ((p.tools || [])[0] || {}).limits || {};
    row("limits", listText(Object.entries(limits).map(([k, v]) => k + " " + v)));
    const reviewed = (p.tools || []).filter(t => t.review_required || t.review_changes);
    row("review", listText(reviewed.map(t => t.name)));
    box.append(dl);
    for (const flag of p.flags || []) box.append(el("p", "! " + flag, "flag"));
    list.append(box);
  }
}

function fmt(n, unit) {
  return typeof n === "number" ? (Math.round(n * 10) / 10) + unit : "";
}

/** The destinations a call reached and how many it had refused, as its record says. */
function network(rec) {
  const reached = (rec.reached || []).map(r => String(r.destination));
  const parts = [];
  if (reached.length) {
    const all = typeof rec.reached_count === "number" && rec.reached_count > reached.length
      ? " (" + rec.reached_count + " in all)" : "";
    parts.push("reached " + reached.join(", ") + all);
  }
  if (typeof rec.denied_count === "number" && rec.denied_count > 0) {
    parts.push(rec.denied_count + " refused");
  }
  return parts.join("; ");
}

function addCall(rec) {
  const row = el("tr");
  const when = new Date(rec.ts_ms || 0).toLocaleTimeString();
  const ok = rec.outcome === "success";
  const usage = rec.usage || {};
  const mem = typeof usage.peak_memory_bytes === "number"
    ? fmt(usage.peak_memory_bytes / 1048576, " MiB") : "";
  const changes = rec.changes && typeof rec.changes.count === "number" ? rec.changes.count : "";
  row.append(el("td", when), el("td", rec.tool), el("td", rec.outcome, ok ? "success" : "error"),
    el("td", fmt(rec.duration_ms, " ms")), el("td", fmt(usage.cpu_ms, " ms")), el("td", mem),
    el("td", changes), el("td", network(rec), "message"), el("td", rec.message || "", "message"));
  const body = document.querySelector("#calls-table tbody");
  body.prepend(row);
  while (body.rows.length > 200) body.deleteRow(-1);
}

function count(rec) {
  const t = state.perTool.get(rec.tool) || { calls: 0, errors: 0, denied: 0 };
  if (rec.event === "call") {
    t.calls += 1;
    if (rec.outcome !== "success") t.errors += 1;
  } else if (rec.event === "denied") {
    t.denied += 1;
  }
  state.perTool.set(rec.tool, t);
}

function drawPerTool() {
  const svg = document.getElementById("per-tool");
  svg.replaceChildren();
  const rows = [...state.perTool.entries()].sort((a, b) => b[1].calls - a[1].calls).slice(0, 8);
  const most = Math.max(1, ...rows.map(([, t]) => t.calls));
  svg.setAttribute("viewBox", "0 0 600 " + Math.max(100, rows.length * 20));
  rows.forEach(([name, t], i) => {
    const y = i * 20 + 3;
    const width = 420 * t.calls / most;
    const bar = document.createElementNS(SVG, "rect");
    bar.setAttribute("x", 170); bar.setAttribute("y", y);
    bar.setAttribute("width", width); bar.setAttribute("height", 14);
    bar.setAttribute("fill", "#2e7d32");
    const bad = document.createElementNS(SVG, "rect");
    bad.setAttribute("x", 170); bad.setAttribute("y", y);
    bad.setAttribute("width", 420 * t.errors / most); bad.setAttribute("height", 14);
    bad.setAttribute("fill", "#c62828");
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("x", 0); label.setAttribute("y", y + 11);
    label.setAttribute("font-size", 12); label.setAttribute("fill", "currentColor");
    label.textContent = String(name).slice(0, 16) + " " + t.calls + (t.denied ? " (" + t.denied + " denied)" : "");
    svg.append(bar, bad, label);
  });
}

function drawOverTime() {
  const svg = document.getElementById("over-time");
  svg.replaceChildren();
  const last = state.calls.slice(-100);
  if (!last.length) return;
  const most = Math.max(1, ...last.map(c => c.duration_ms || 0));
  svg.setAttribute("viewBox", "0 0 300 100");
  svg.setAttribute("preserveAspectRatio", "none");
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", last.map((c, i) =>
    (i * 300 / Math.max(1, last.length - 1)) + "," + (98 - 96 * (c.duration_ms || 0) / most)).join(" "));
  line.setAttribute("fill", "none"); line.setAttribute("stroke", "currentColor");
  line.setAttribute("vector-effect", "non-scaling-stroke");
  svg.append(line);
}

async function pollCalls() {
  try {
    const data = await getJson("/api/calls?after=" + state.after);
    state.after = data.next;
    for (const rec of data.calls) {
      if (rec.event === "call") {
        state.calls.push(rec);
        addCall(rec);
      }
      if (rec.event === "call" || rec.event === "denied") count(rec);
    }
    if (data.calls.length) {
      state.calls = state.calls.slice(-1000);
      drawPerTool();
      drawOverTime();
    }
    const total = [...state.perTool.values()].reduce((n, t) => n + t.calls, 0);
    document.getElementById("calls-summary").textContent = total + " calls";
  } catch (e) {
    document.getElementById("calls-summary").textContent = String(e.message);
    // The server answers at once when it has new calls, else after a while: ask again at
    // once, unless asking failed.
    setTimeout(pollCalls, 1000);
    return;
  }
  setTimeout(pollCalls, 0);
}

async function pollLedger() {
  const p = document.getElementById("ledger-state");
  try {
    const v = await getJson("/api/ledger");
    if (v.ok) {
      p.className = "success";
      p.textContent = "The call log verifies: " + v.records + " records, " + v.seals +
        " seals" + (v.unsigned ? ", " + v.unsigned + " after the last seal" : "") + ".";
    } else {
      p.className = "problem";
      const x = v.problem || {};
      p.textContent = "The call log does not verify: " + (x.file || "") + ":" + (x.line || "") +
        " " + (x.what || v.error || "");
    }
  } catch (e) {
    p.textContent = String(e.message);
  }
  setTimeout(pollLedger, 5000);
}

async function loadTools() {
  try {
    renderTools(await getJson("/api/tools"));
  } catch (e) {
    document.getElementById("tools-list").replaceChildren(el("p", String(e.message), "flag"));
  }
}

// Calls decided on this page: a poll that began before a decision may still list one, and
// its card must not come back.
const decided = new Set();

function renderPending(list) {
  const section = document.getElementById("review");
  const box = document.getElementById("pending");
  if (list === null) {
    section.hidden = true;
    return;
  }
  section.hidden = false;
  const shown = new Set(list.map(p => String(p.id)));
  for (const old of [...box.children]) {
    if (!shown.has(old.dataset.id)) old.remove();
  }
  for (const p of list) {
    if (decided.has(String(p.id))) continue;
    if (box.querySelector('[data-id="' + Number(p.id) + '"]')) continue;
    const card = el("div", null, "policy pending");
    card.dataset.id = String(p.id);
    const what = p.what === "changes" ? "keep what this call changed?" : "run this call?";
    card.append(el("h3", p.tool + ": " + what));
    const dl = el("dl");
    dl.append(el("dt", "arguments"), el("dd", p.arguments, "message"));
    dl.append(el("dt", "digest"), el("dd", p.digest));
    if (p.changes) dl.append(el("dt", "changes"), el("dd", p.changes, "message"));
    const isCall = p.what === "call";
    // A call may run with other arguments (its tool's schema checks them) or be answered for.
    const args = isCall ? el("textarea", prettyJson(p.arguments), "arguments") : null;
    const words = el("input");
    words.type = "text";
    words.placeholder = isCall ? "reason if rejected, or the answer the model gets" : "reason, if rejected";
    words.setAttribute("aria-label", words.placeholder);
    const said = el("p", "", "error");
    const buttons = [];
    const decide = async (decision, extra) => {
      for (const b of buttons) b.disabled = true;
      const r = await fetch("/api/decide", {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ id: p.id, digest: p.digest, decision, ...extra }),
      });
      if (r.ok) {
        decided.add(String(p.id));
        card.remove();
      }
      else { said.textContent = await r.text(); for (const b of buttons) b.disabled = false; }
    };
    const button = (label, kind, title, act) => {
      const b = el("button", label, kind);
      b.title = title;
      b.addEventListener("click", act);
      buttons.push(b);
      return b;
    };
    card.append(dl);
    if (args) {
      args.setAttribute("aria-label", "the arguments to run the call with");
      args.rows = Math.min(12, args.value.split("\n").length + 1);
      card.append(args);
    }
    card.append(words, el("br"));
    card.append(button("Approve", "approve", "Run the call as the model wrote it", () => decide("approve", {})));
    if (isCall) {
      card.append(button("Edit", "edit", "Run the call with the arguments above instead", () => {
        const edited = jsonObject(args.value);
        if (typeof edited === "string") said.textContent = edited;
        else decide("edit", { arguments: edited });
      }));
      card.append(button("Respond", "respond", "Run nothing: the model gets the text above as the tool's answer", () => {
        if (words.value.trim()) decide("respond", { content: words.value });
        else said.textContent = "Write the answer the model gets first.";
      }));
    }
    card.append(button("Reject", "reject", "Run nothing: the model is told it was rejected", () => decide("reject", { reason: words.value })));
    card.append(said);
    box.append(card);
  }
}

async function pollPending() {
  try {
    renderPending(await getJson("/api/pending"));
  } catch (e) {
    document.getElementById("calls-summary").textContent = String(e.message);
  }
  setTimeout(pollPending, 400);
}

loadTools();
pollCalls();
pollLedger();
pollPending();
