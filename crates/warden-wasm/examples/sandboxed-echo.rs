//! The floor of a sandboxed MCP server, for `scripts/bench-mcp.py`: the trivial JSON-lines
//! server's echo plus what no sandboxed call can skip, and nothing else. Each `tools/call`
//! line gets a fresh store and instance of `trivial.wasm` under warden's engine settings
//! (`engine_config`, an epoch deadline), the call of `add`, one record appended to a log file
//! with one `write`, and its answer. One thread, blocking reads; no tokio worker pool, no
//! rmcp, no policy, no schema check, no usage figures: given a result to answer like (warden's
//! own, say), its other fields (warden's `_meta` with its usage) go into every answer as they
//! are, so the client reads the same bytes.
//!
//!     sandboxed-echo <trivial.wasm> <log file> [result JSON]

use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};
use wasmtime::component::{Component, Linker, ResourceTable, Val};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

struct Call {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Call {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(component), Some(log)) = (args.next(), args.next()) else {
        return Err("usage: sandboxed-echo <trivial.wasm> <log file> [result JSON]".into());
    };
    let mut result = match args.next() {
        Some(text) => match serde_json::from_str(&text)? {
            Value::Object(fields) => fields,
            _ => return Err("the result to answer like is not a JSON object".into()),
        },
        None => serde_json::Map::new(),
    };
    let engine = Engine::new(&warden_wasm::engine_config(warden_wasm::Workload::Server))?;
    let ticker = engine.clone();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(warden_wasm::EPOCH_TICK);
            ticker.increment_epoch();
        }
    });
    let component = Component::from_file(&engine, component)?;
    let mut linker: Linker<Call> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    let pre = linker.instantiate_pre(&component)?;
    let add = component
        .get_export_index(None, "add")
        .ok_or("the component exports no add")?;
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let message: Value = serde_json::from_str(&line?)?;
        let Some(id) = message.get("id") else {
            continue;
        };
        let mut answer = b"{\"jsonrpc\":\"2.0\",\"id\":".to_vec();
        serde_json::to_writer(&mut answer, id)?;
        answer.extend_from_slice(b",\"result\":");
        if message["method"] == "initialize" {
            let info = json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                              "serverInfo": {"name": "sandboxed-echo", "version": "0"}});
            serde_json::to_writer(&mut answer, &info)?;
        } else {
            let arguments = &message["params"]["arguments"];
            let operand = |name: &str| Val::S32(arguments[name].as_i64().unwrap_or(0) as i32);
            let mut store = Store::new(
                &engine,
                Call {
                    wasi: WasiCtxBuilder::new().build(),
                    table: ResourceTable::new(),
                },
            );
            let deadline = Instant::now() + Duration::from_secs(30);
            store.set_epoch_deadline(1);
            store.epoch_deadline_callback(move |_| {
                Ok(if Instant::now() >= deadline {
                    UpdateDeadline::Interrupt
                } else {
                    UpdateDeadline::Continue(1)
                })
            });
            let mut results = [Val::S32(0)];
            runtime.block_on(async {
                let instance = pre.instantiate_async(&mut store).await?;
                let func = instance
                    .get_func(&mut store, add)
                    .ok_or_else(|| wasmtime::format_err!("no add in the instance"))?;
                func.call_async(&mut store, &[operand("a"), operand("b")], &mut results)
                    .await
            })?;
            let Val::S32(n) = results[0] else {
                return Err("add answered something else".into());
            };
            let mut record = serde_json::to_vec(&json!({"tool": "add", "status": "success"}))?;
            record.push(b'\n');
            log.write_all(&record)?;
            // The same map each call, its three fields replaced: nothing copied.
            result.insert(
                "content".into(),
                json!([{"type": "text", "text": n.to_string()}]),
            );
            result.insert("structuredContent".into(), json!({"result": n}));
            result.insert("isError".into(), false.into());
            serde_json::to_writer(&mut answer, &result)?;
        }
        answer.extend_from_slice(b"}\n");
        out.write_all(&answer)?;
        out.flush()?;
    }
    Ok(())
}
