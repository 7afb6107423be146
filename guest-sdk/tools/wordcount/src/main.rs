//! Example tool: a `wasi:cli` command that counts like `wc`.
//!
//! `wordcount [-l] [-w] [-c] [--file PATH]` prints `lines words bytes` of stdin
//! (or of PATH); the flags pick which counts to print, in that order.

use std::io::Read;
use std::process::ExitCode;

#[derive(Default)]
struct Options {
    lines: bool,
    words: bool,
    bytes: bool,
    file: Option<String>,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
    let mut opts = Options::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-l" => opts.lines = true,
            "-w" => opts.words = true,
            "-c" => opts.bytes = true,
            "--file" => {
                opts.file = Some(args.next().ok_or("--file needs a PATH")?);
            }
            _ => return Err(format!("unknown flag {arg}")),
        }
    }
    if !(opts.lines || opts.words || opts.bytes) {
        (opts.lines, opts.words, opts.bytes) = (true, true, true);
    }
    Ok(opts)
}

fn input(file: Option<&str>) -> Result<Vec<u8>, String> {
    match file {
        Some(path) => std::fs::read(path).map_err(|err| format!("{path}: {err}")),
        None => {
            let mut data = Vec::new();
            std::io::stdin()
                .read_to_end(&mut data)
                .map_err(|err| format!("stdin: {err}"))?;
            Ok(data)
        }
    }
}

fn main() -> ExitCode {
    let opts = match parse(std::env::args().skip(1)) {
        Ok(opts) => opts,
        Err(msg) => {
            eprintln!("wordcount: {msg}");
            return ExitCode::from(2);
        }
    };
    let data = match input(opts.file.as_deref()) {
        Ok(data) => data,
        Err(msg) => {
            eprintln!("wordcount: {msg}");
            return ExitCode::FAILURE;
        }
    };

    let lines = data.iter().filter(|&&b| b == b'\n').count();
    let words = data
        .split(u8::is_ascii_whitespace)
        .filter(|word| !word.is_empty())
        .count();
    let shown: Vec<String> = [
        (opts.lines, lines),
        (opts.words, words),
        (opts.bytes, data.len()),
    ]
    .iter()
    .filter(|(wanted, _)| *wanted)
    .map(|(_, n)| n.to_string())
    .collect();
    println!("{}", shown.join(" "));
    ExitCode::SUCCESS
}
