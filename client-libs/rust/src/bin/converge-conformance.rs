//! The conformance CLI (client-libs/conformance/CLIENT-CLI.md): `info`, `check`, `hook` and
//! `vector`, one JSON object per line on stdout.

use converge::vectors::{run_vector_case, VECTOR_SCHEMAS};
use converge::{tls::not_trusted, Client};
use serde_json::{json, Value};
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

const USAGE: &str = "usage: converge-conformance info
       converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
       converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] HOST PORT
       converge-conformance vector FILE";

fn emit(v: Value) {
    // U+2028 and U+2029 are valid in JSON text but end a line for some readers
    println!("{}", v.to_string().replace('\u{2028}', "\\u2028").replace('\u{2029}', "\\u2029"));
}

fn port_of(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn vector(path: &str) -> ExitCode {
    let doc: Value = match std::fs::read(path).ok().and_then(|d| serde_json::from_slice(&d).ok()) {
        Some(d) => d,
        None => {
            eprintln!("cannot read {path}");
            return ExitCode::from(3);
        }
    };
    let doc = doc.as_object().cloned().unwrap_or_default();
    if !VECTOR_SCHEMAS.contains(&doc.get("schema").and_then(Value::as_str).unwrap_or("")) {
        emit(json!({"error": "unsupported-schema"}));
        return ExitCode::from(2);
    }
    for c in doc.get("tests").and_then(Value::as_array).cloned().unwrap_or_default() {
        match run_vector_case(&doc, c.as_object().unwrap_or(&Default::default())) {
            Ok(out) => emit(Value::Object(out)),
            Err(e) => {
                eprintln!("case {}: {e}", c.get("id").unwrap_or(&Value::Null));
                return ExitCode::from(3);
            }
        }
    }
    ExitCode::SUCCESS
}

fn check(dir: &str, host: &str, port: &str, fp: &str) -> ExitCode {
    let Some(port) = port_of(port) else {
        emit(json!({"error": "usage", "message": "PORT must be decimal"}));
        return ExitCode::from(2);
    };
    match Client::load(Some(Path::new(dir))).and_then(|c| c.check(host, port, fp)) {
        Ok(v) => {
            let notaries: Vec<Value> = v
                .results
                .iter()
                .map(|r| json!({"name": r.name, "outcome": r.vote.as_str(), "kind": r.kind, "status": r.status, "protocol": r.protocol}))
                .collect();
            emit(json!({"verdict": v.trusted, "cache": v.from_cache, "relay": v.relay, "notaries": notaries}));
            if v.trusted {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            emit(json!({"error": e.kind().as_str(), "message": e.to_string()}));
            ExitCode::from(2)
        }
    }
}

/// Fetches https://HOST:PORT/ with ureq on the converge rustls verifier (the README's hook).
fn hook(dir: &str, mut rest: &[String]) -> ExitCode {
    let mut proxy: Option<String> = None;
    while rest.len() >= 2 && (rest[0] == "--proxy" || rest[0] == "--ca-file") {
        if rest[0] == "--proxy" {
            proxy = Some(rest[1].clone());
        } // --ca-file: CA validation is not what decides here; the notaries do
        rest = &rest[2..];
    }
    let (Some(host), Some(port)) = (rest.first(), rest.get(1).and_then(|p| port_of(p)).filter(|p| *p > 0)) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if rest.len() != 2 {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    let client = match Client::load(Some(Path::new(dir))) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            emit(json!({"error": e.kind().as_str(), "message": e.to_string()}));
            return ExitCode::from(2);
        }
    };
    let timeout = std::time::Duration::from_secs_f64(client.config().total_timeout + 10.0);
    let agent = match converge::http::agent(client, port, proxy.as_deref()) {
        Ok(a) => a,
        Err(e) => {
            emit(json!({"error": "usage", "message": e.to_string()}));
            return ExitCode::from(2);
        }
    };
    let url = if host.contains(':') { format!("https://[{host}]:{port}/") } else { format!("https://{host}:{port}/") };
    match agent.get(&url).timeout(timeout).call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => {
            let status = r.status();
            let mut body = Vec::new();
            let _ = r.into_reader().take(1024).read_to_end(&mut body);
            emit(json!({"connected": true, "status": status, "body": String::from_utf8_lossy(&body)}));
            ExitCode::SUCCESS
        }
        Err(e) => {
            let untrusted = not_trusted(&e).is_some();
            let message = not_trusted(&e).map(|n| n.to_string()).unwrap_or_else(|| e.to_string());
            emit(json!({"connected": false, "error": if untrusted { "untrusted" } else { "io" }, "message": message}));
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["info"] => {
            emit(
                json!({"language": "rust", "implementation": "converge (crate)", "version": converge::VERSION, "schemas": VECTOR_SCHEMAS}),
            );
            ExitCode::SUCCESS
        }
        ["check", "--config-dir", dir, host, port, fp] => check(dir, host, port, fp),
        ["hook", "--config-dir", dir, ..] if args.len() >= 5 => hook(dir, &args[3..]),
        ["vector", file] => vector(file),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
