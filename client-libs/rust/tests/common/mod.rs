//! Test helpers: fake notaries (real TLS servers on 127.0.0.1 with the vectors' test-only keys,
//! answering in either format), HTTPS sites and configuration directories.
#![allow(dead_code)]

use ring::signature::{Ed25519KeyPair, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("vectors")
}

pub fn read(name: &str) -> String {
    std::fs::read_to_string(vectors().join("keys").join(name)).unwrap()
}

pub fn der_of(pem: &str) -> Vec<u8> {
    rustls_pemfile::certs(&mut pem.as_bytes()).next().unwrap().unwrap().to_vec()
}

pub fn colon_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect::<Vec<_>>().join(":")
}

pub fn sha1_fp(pem: &str) -> String {
    colon_hex(ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &der_of(pem)).as_ref())
}

pub fn sha256_fp(pem: &str) -> String {
    colon_hex(ring::digest::digest(&ring::digest::SHA256, &der_of(pem)).as_ref())
}

pub fn notary_cert() -> String {
    read("test-notary-cert.pem")
}
pub fn notary_key() -> String {
    read("test-notary-key.pem")
}
pub fn other_cert() -> String {
    read("test-other-cert.pem")
}
pub fn other_key() -> String {
    read("test-other-key.pem")
}

pub fn genuine_fp() -> String {
    sha1_fp(&notary_cert())
}
pub fn forged_fp() -> String {
    sha1_fp(&other_cert())
}

pub fn server_config(cert: &str, key: &str) -> Arc<ServerConfig> {
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut cert.as_bytes()).map(|c| c.unwrap()).collect();
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut key.as_bytes()).unwrap().unwrap();
    Arc::new(
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap(),
    )
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "converge-rs-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Listed,
    Mismatch,
    Hang,
    Garbage,
    Extended,
    ExtendedStale,
}

/// A legacy body built from the fingerprint the notary sees and its signer (base64 of the
/// signature of the given bytes).
pub type LegacyForm = fn(seen: &str, sign: &dyn Fn(&str) -> String) -> String;
/// A rewrite of the extended statement (before signing) or of the whole answer (after).
pub type TextForm = fn(&str) -> String;

/// Hostile forms a notary answers with (`None`: genuinely).
#[derive(Clone, Copy, Default)]
pub struct Forms {
    pub legacy: Option<LegacyForm>,
    pub statement: Option<TextForm>,
    pub answer: Option<TextForm>,
}

/// A notary answering every request the same way; counts the requests it read.
pub struct FakeNotary {
    pub name: String,
    pub port: u16,
    pub requests: Arc<Mutex<Vec<String>>>,
    pub cert: String,
    ed: Arc<Ed25519KeyPair>,
    pub key_id: String,
    pub delay: Arc<Mutex<Duration>>,
    pub forms: Arc<Mutex<Forms>>,
    /// Per-location views ("host:port" of a legacy request -> the SHA-1 the notary sees
    /// there), overriding `sees`.
    pub views: Arc<Mutex<HashMap<String, String>>>,
}

/// The "host:port" a legacy request asks about.
fn legacy_location(req: &str) -> Option<String> {
    let path = req.split(' ').nth(1)?.strip_prefix("/target/")?;
    Some(path.split('/').next()?.replacen('+', ":", 1))
}

fn read_request(s: &mut impl Read) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return Some(text);
            }
        }
    }
}

impl FakeNotary {
    pub fn start(name: &str, mode: Mode, cert: &str, key: &str, sees: &str) -> FakeNotary {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cfg = server_config(cert, key);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let rng = ring::rand::SystemRandom::new();
        let ed = Arc::new(Ed25519KeyPair::from_pkcs8(Ed25519KeyPair::generate_pkcs8(&rng).unwrap().as_ref()).unwrap());
        let key_id = converge::bundle::key_id_of(ed.public_key().as_ref());
        let rsa = Arc::new(rsa_key(key));
        let delay = Arc::new(Mutex::new(Duration::ZERO));
        let forms = Arc::new(Mutex::new(Forms::default()));
        let views = Arc::new(Mutex::new(HashMap::new()));
        let (reqs, ed2, kid, sees, d2, f2, v2) = (
            requests.clone(),
            ed.clone(),
            key_id.clone(),
            sees.to_string(),
            delay.clone(),
            forms.clone(),
            views.clone(),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (cfg, reqs, ed, kid, sees, rsa, d, f, v) = (
                    cfg.clone(),
                    reqs.clone(),
                    ed2.clone(),
                    kid.clone(),
                    sees.clone(),
                    rsa.clone(),
                    d2.clone(),
                    f2.clone(),
                    v2.clone(),
                );
                std::thread::spawn(move || {
                    let conn = ServerConnection::new(cfg).unwrap();
                    let mut tls = StreamOwned::new(conn, stream);
                    let Some(req) = read_request(&mut tls) else { return };
                    reqs.lock().unwrap().push(req.clone());
                    let delay = *d.lock().unwrap();
                    std::thread::sleep(delay);
                    let forms = *f.lock().unwrap();
                    let seen = legacy_location(&req).and_then(|l| v.lock().unwrap().get(&l).cloned());
                    let sees = seen.unwrap_or(sees);
                    let reply = answer(mode, &req, &sees, &ed, &kid, &rsa, forms);
                    if let Some(r) = reply {
                        let _ = tls.write_all(r.as_bytes());
                        tls.conn.send_close_notify();
                        let _ = tls.flush();
                    } else if mode == Mode::Hang {
                        std::thread::sleep(Duration::from_secs(30));
                    }
                });
            }
        });
        FakeNotary { name: name.into(), port, requests, cert: cert.into(), ed, key_id, delay, forms, views }
    }

    pub fn bundle(&self, extended: bool) -> String {
        let mut doc = json!({"version": 1, "name": self.name,
            "hosts": [{"host": "127.0.0.1", "ssl_port": self.port, "http_port": self.port, "certificate": self.cert}]});
        if extended {
            doc["protocols"] = json!(["converge-answer/1"]);
            doc["signing_keys"] = json!([{"alg": "ed25519", "key_id": self.key_id,
                "public_key": b64url(self.ed.public_key().as_ref()),
                "status": "current"}]);
        }
        serde_json::to_string_pretty(&doc).unwrap()
    }

    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

/// RSASSA-PKCS1-v1_5 with SHA-1, as the notaries sign legacy answers.
pub fn legacy_sign(key: &rsa::RsaPrivateKey, msg: &[u8]) -> Vec<u8> {
    use rsa::signature::{SignatureEncoding, Signer};
    rsa::pkcs1v15::SigningKey::<sha1::Sha1>::new(key.clone()).sign(msg).to_vec()
}

pub fn rsa_key(pem: &str) -> rsa::RsaPrivateKey {
    use rsa::pkcs8::DecodePrivateKey;
    rsa::RsaPrivateKey::from_pkcs8_pem(pem).unwrap()
}

pub fn b64url(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

fn answer(
    mode: Mode,
    req: &str,
    sees: &str,
    ed: &Ed25519KeyPair,
    kid: &str,
    rsa: &rsa::RsaPrivateKey,
    forms: Forms,
) -> Option<String> {
    match mode {
        Mode::Hang => return None,
        Mode::Garbage => return Some("SSH-2.0-nope\r\n\r\n".into()),
        _ => {}
    }
    let body_text = &req[req.find("\r\n\r\n").unwrap() + 4..];
    if req.starts_with("POST /v2/answer") {
        let body: Value = serde_json::from_str(body_text).unwrap();
        let asked = body["fingerprint"].as_str().unwrap_or("").to_string();
        let seen = if body["alg"] == "sha256" { sha256_fp(&notary_cert()) } else { sees.to_string() };
        let verdict = if asked == seen { "match" } else { "mismatch" };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let mut request = json!({"fingerprint": asked, "alg": body["alg"]});
        if let Some(n) = body.get("nonce") {
            request["nonce"] = n.clone();
        }
        let stmt = json!({"type": "converge-answer/1", "key_id": kid, "verdict": verdict, "detail": "",
            "answered_at": now - if mode == Mode::ExtendedStale { 3600 } else { 0 },
            "target": {"host": body["host"].as_str().unwrap_or("").to_lowercase(), "port": body["port"], "ip": body.get("ip").cloned().unwrap_or(Value::Null)},
            "request": request, "cache": "miss", "observations": []});
        // serde_json's map is sorted and compact: the notary's canonical form for this subset
        let mut stmt_text = stmt.to_string();
        if let Some(f) = forms.statement {
            stmt_text = f(&stmt_text);
        }
        let sig = b64url(ed.sign(stmt_text.as_bytes()).as_ref());
        let mut answer = format!(
            "{{\"signature\":{{\"alg\":\"ed25519\",\"key_id\":\"{kid}\",\"value\":\"{sig}\"}},\"statement\":{stmt_text}}}"
        );
        if let Some(f) = forms.answer {
            answer = f(&answer);
        }
        let status = if verdict == "match" { "200 OK" } else { "409 Conflict" };
        return Some(format!("HTTP/1.0 {status}\r\nContent-Type: application/vnd.converge.answer+json\r\nContent-Length: {}\r\n\r\n{answer}", answer.len()));
    }
    if matches!(mode, Mode::Extended | Mode::ExtendedStale) {
        return Some("HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n".into());
    }
    let fp = body_text.strip_prefix("fingerprint=").unwrap_or("");
    let status = if mode == Mode::Mismatch || fp != sees { 409 } else { 200 };
    let sign = |text: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(legacy_sign(rsa, text.as_bytes()))
    };
    let body = match forms.legacy {
        Some(form) => form(sees, &sign),
        None => signed_list(&legacy_list("", sees), &sign),
    };
    Some(format!(
        "HTTP/1.0 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ))
}

/// `{<members>"fingerprintList": [<one entry for fp>]}` as the 2011 notary wrote it.
pub fn legacy_list(members: &str, fp: &str) -> String {
    format!(
        "{{{members}\"fingerprintList\": [{{\"timestamp\": {{\"start\": \"1323389219\", \"finish\": \"1324691510\"}}, \"fingerprint\": \"{fp}\"}}]}}"
    )
}

/// The body of a legacy answer whose signed bytes are `s`.
pub fn signed_list(s: &str, sign: &dyn Fn(&str) -> String) -> String {
    format!("{}, \"signature\": \"{}\"}}", &s[..s.len() - 1], sign(s))
}

/// A configuration directory enabling these notaries.
pub fn config_dir(notaries: &[&FakeNotary], settings: Value, extended: bool) -> PathBuf {
    let dir = temp_dir("cfg");
    std::fs::create_dir_all(dir.join("notaries-available")).unwrap();
    std::fs::create_dir_all(dir.join("notaries-enabled")).unwrap();
    for (i, n) in notaries.iter().enumerate() {
        let file = format!("{i:02}-{}.notary", n.name.replace(' ', "-"));
        std::fs::write(dir.join("notaries-available").join(&file), n.bundle(extended)).unwrap();
        std::os::unix::fs::symlink(format!("../notaries-available/{file}"), dir.join("notaries-enabled").join(&file))
            .unwrap();
    }
    let mut cfg = json!({"connect-timeout": 2, "notary-timeout": 2, "total-timeout": 4});
    for (k, v) in settings.as_object().cloned().unwrap_or_default() {
        cfg[k] = v;
    }
    std::fs::write(dir.join("converge.config"), cfg.to_string()).unwrap();
    dir
}

/// An HTTPS site on 127.0.0.1 answering `body`; counts the requests it read.
pub struct Site {
    pub port: u16,
    pub requests: Arc<AtomicUsize>,
}

/// A site's answer to a request line.
pub type Reply = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// A 200 answer with `body`.
pub fn ok_reply(body: &str) -> String {
    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
}

/// A 302 answer to `location`.
pub fn redirect_reply(location: &str) -> String {
    format!("HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
}

impl Site {
    pub fn start(cert: &str, key: &str, body: &'static str) -> Site {
        Site::listen(server_config(cert, key), Arc::new(move |_: &str| ok_reply(body)))
    }

    /// A site whose TLS server config (and so its session cache) is `cfg`, answering each
    /// request line with `reply(line)`.
    pub fn listen(cfg: Arc<ServerConfig>, reply: Reply) -> Site {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicUsize::new(0));
        let r2 = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (cfg, r, reply) = (cfg.clone(), r2.clone(), reply.clone());
                std::thread::spawn(move || serve_site(stream, cfg, r, reply));
            }
        });
        Site { port, requests }
    }
}

fn serve_site(stream: TcpStream, cfg: Arc<ServerConfig>, requests: Arc<AtomicUsize>, reply: Reply) {
    let conn = ServerConnection::new(cfg).unwrap();
    let mut tls = StreamOwned::new(conn, stream);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&buf).contains("\r\n\r\n") {
        match tls.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    requests.fetch_add(1, Ordering::SeqCst);
    let head = String::from_utf8_lossy(&buf).to_string();
    let _ = tls.write_all(reply(head.lines().next().unwrap_or("")).as_bytes());
    tls.conn.send_close_notify();
    let _ = tls.flush();
}
