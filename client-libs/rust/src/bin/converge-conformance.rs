//! The conformance CLI (client-libs/conformance/CLIENT-CLI.md): `info`, `check`, `hook` and
//! `vector`, one JSON object per line on stdout.

use converge::vectors::{run_vector_case, VECTOR_SCHEMAS};
use converge::{tls::not_trusted, Client};
use serde_json::{json, Value};
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

const USAGE: &str = "usage: converge-conformance info
       converge-conformance check --config-dir DIR HOST PORT FINGERPRINT
       converge-conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] [--path P] [--follow-redirects]
                            [--first URL] [--unhooked-first] HOST PORT
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

/// The hook's flags (CLIENT-CLI.md, `hook`), each before HOST PORT.
#[derive(Default)]
struct HookFlags {
    proxy: Option<String>,
    ca_file: Option<String>,
    path: Option<String>,
    follow: bool,
    first: Option<String>,
    unhooked_first: bool,
}

fn hook_flags(mut rest: &[String]) -> (HookFlags, &[String]) {
    let mut f = HookFlags::default();
    loop {
        let value = rest.get(1).cloned();
        match rest.first().map(String::as_str) {
            Some("--follow-redirects") => f.follow = true,
            Some("--unhooked-first") => f.unhooked_first = true,
            Some("--proxy") if value.is_some() => f.proxy = value,
            Some("--ca-file") if value.is_some() => f.ca_file = value,
            Some("--path") if value.is_some() => f.path = value,
            Some("--first") if value.is_some() => f.first = value,
            _ => return (f, rest),
        }
        let with_value = !matches!(rest[0].as_str(), "--follow-redirects" | "--unhooked-first");
        rest = &rest[if with_value { 2 } else { 1 }..];
    }
}

/// A ureq agent as code of the same application without the hook would have one: CA
/// validation (the `--ca-file` CAs, else ureq's webpki roots), the same proxy.
fn unhooked_agent(ca_file: Option<&str>, proxy: Option<&str>) -> Result<ureq::Agent, String> {
    let mut b = ureq::AgentBuilder::new();
    if let Some(path) = ca_file {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(path).map_err(|e| format!("--ca-file {path}: {e}"))? {
            roots
                .add(cert.map_err(|e| format!("--ca-file {path}: {e}"))?)
                .map_err(|e| format!("--ca-file {path}: {e}"))?;
        }
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        b = b.tls_config(Arc::new(cfg));
    }
    if let Some(p) = proxy {
        b = b.proxy(ureq::Proxy::new(p).map_err(|e| format!("proxy {p}: {e}"))?);
    }
    Ok(b.build())
}

/// A response's status and its body's first KiB (read to the end, so that a keep-alive
/// connection goes back to its pool).
fn response(r: ureq::Response) -> (u16, String) {
    let status = r.status();
    let mut body = Vec::new();
    let mut reader = r.into_reader().take(1 << 20);
    let _ = reader.read_to_end(&mut body);
    body.truncate(1024);
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// GET `url` on `agent`: a response (also a 4xx or 5xx) or the failure line's kind and message.
fn get(agent: &ureq::Agent, url: &str, timeout: Duration) -> Result<(u16, String), (&'static str, String)> {
    match agent.get(url).timeout(timeout).call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => Ok(response(r)),
        Err(e) => Err(match not_trusted(&e) {
            Some(n) => ("untrusted", n.to_string()),
            None => ("io", e.to_string()),
        }),
    }
}

fn usage() -> ExitCode {
    eprintln!("{USAGE}");
    ExitCode::from(2)
}

/// Fetches https://HOST:PORT/P with ureq on the converge rustls verifier (the README's hook):
/// `--first` on the same agent, `--unhooked-first` on a plain agent beside it (a ureq agent
/// has one TLS config, so unhooked code cannot use the hooked agent's pool).
fn hook(dir: &str, rest: &[String]) -> ExitCode {
    let (flags, rest) = hook_flags(rest);
    let path = flags.path.clone().unwrap_or_else(|| "/".to_string());
    let (Some(host), Some(port)) = (rest.first(), rest.get(1).and_then(|p| port_of(p)).filter(|p| *p > 0)) else {
        return usage();
    };
    if rest.len() != 2 || !path.starts_with('/') || flags.first.as_ref().is_some_and(|u| !u.starts_with("https://")) {
        return usage();
    }
    let client = match Client::load(Some(Path::new(dir))) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            emit(json!({"error": e.kind().as_str(), "message": e.to_string()}));
            return ExitCode::from(2);
        }
    };
    let timeout = Duration::from_secs_f64(client.config().total_timeout + 10.0);
    let redirects = if flags.follow { converge::http::MAX_REDIRECTS } else { 0 };
    let agents = converge::http::agent_with(client, flags.proxy.as_deref(), redirects)
        .map_err(|e| e.to_string())
        .and_then(|a| Ok((a, unhooked_agent(flags.ca_file.as_deref(), flags.proxy.as_deref())?)));
    let (agent, plain) = match agents {
        Ok(a) => a,
        Err(e) => {
            emit(json!({"error": "usage", "message": e}));
            return ExitCode::from(2);
        }
    };
    let url = if host.contains(':') {
        format!("https://[{host}]:{port}{path}")
    } else {
        format!("https://{host}:{port}{path}")
    };
    let mut first = Ok((0, String::new()));
    if flags.unhooked_first {
        first = get(&plain, &url, timeout);
    }
    if let (Ok(_), Some(f)) = (&first, &flags.first) {
        first = get(&agent, f, timeout);
    }
    if let Err((kind, message)) = first {
        emit(json!({"connected": false, "error": kind, "message": format!("first request: {message}")}));
        return ExitCode::from(1);
    }
    match get(&agent, &url, timeout) {
        Ok((status, body)) => {
            emit(json!({"connected": true, "status": status, "body": body}));
            ExitCode::SUCCESS
        }
        Err((kind, message)) => {
            emit(json!({"connected": false, "error": kind, "message": message}));
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
