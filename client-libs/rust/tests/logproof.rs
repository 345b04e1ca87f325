//! The transparency log's proofs against a real `notary serve` (its log on by default, `notary
//! bundle` naming it): a match whose proof verifies is trusted; a relay holding the notary's
//! certificate that strips or alters the answer's transparency member, a bundle requiring a
//! witness the notary does not have and a bundle naming another log key each make that
//! notary's vote a failure of the documented kind. Every case has its twin: the same relay or
//! bundle without the change, or without the log.

mod common;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use converge::transparency::{key_id, TRANSPARENCY_MEMBER};
use converge::{parse_bundle, Client, Config, ExtendedMode, NotaryResult, Policy, Vote};
use ring::signature::{Ed25519KeyPair, KeyPair};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, ServerConnection, SignatureScheme, StreamOwned};
use serde_json::{Map, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

struct RealNotary {
    port: u16,
    bundle: Map<String, Value>,
    data: PathBuf,
    target_port: u16,
    target_sha256: String,
    _child: Mutex<Child>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

static NOTARY: OnceLock<RealNotary> = OnceLock::new();

/// One `notary serve` for this test binary, under a shell that kills it when its standard
/// input closes, which happens when this test binary exits however it ends.
fn notary() -> &'static RealNotary {
    NOTARY.get_or_init(|| {
        let exe = std::env::var("NOTARY")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/notary"));
        assert!(exe.exists(), "notary console script missing: {} (make setup)", exe.display());
        let tmp = common::temp_dir("log");
        let data = tmp.join("data");
        let port = free_port();
        let log = std::fs::File::create(tmp.join("notary.log")).unwrap();
        let child = Command::new("sh")
            .args([
                "-c",
                "\"$0\" \"$@\" & p=$!; read _; kill $p; wait $p; rm -rf \"$LOG_TEST_DIR\"",
                exe.to_str().unwrap(),
            ])
            .args(["serve", "--data-dir", data.to_str().unwrap(), "--listen", &format!("127.0.0.1:{port}")])
            .args(["--allow-target", "127.0.0.0/8", "--probe-timeout", "2", "--log-interval", "0.2"])
            .env("LOG_TEST_DIR", &tmp)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(60), "notary serve did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let out = tmp.join("org.notary");
        let status = Command::new(&exe)
            .args(["bundle", "--data-dir", data.to_str().unwrap(), "--host", "127.0.0.1"])
            .args(["--ssl-port", &port.to_string(), "--name", "Org Log", "-o", out.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success(), "notary bundle failed");
        let bundle: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let site = common::Site::start(&common::other_cert(), &common::other_key(), "ok");
        RealNotary {
            port,
            bundle: bundle.as_object().unwrap().clone(),
            data,
            target_port: site.port,
            target_sha256: common::sha256_fp(&common::other_cert()),
            _child: Mutex::new(child),
        }
    })
}

impl RealNotary {
    /// The bundle with its host's port set to `port`, changed by `change`.
    fn bundle_via(&self, port: u16, change: impl FnOnce(&mut Map<String, Value>)) -> converge::Bundle {
        let mut doc = self.bundle.clone();
        doc["hosts"][0]["ssl_port"] = port.into();
        change(&mut doc);
        parse_bundle(Value::Object(doc).to_string().as_bytes()).unwrap()
    }

    fn ask(&self, b: converge::Bundle) -> NotaryResult {
        let cfg = Config {
            bundles: Some(vec![b]),
            extended: ExtendedMode::Require,
            quorum: 1,
            agreement: Policy::Majority,
            db: None,
            ..Config::default()
        };
        let v = Client::new(cfg).check("127.0.0.1", self.target_port, &self.target_sha256).unwrap();
        assert_eq!(v.results.len(), 1, "{v:?}");
        let r = v.results[0].clone();
        assert_eq!(v.trusted, r.vote == Vote::Success, "{r:?}");
        r
    }

    /// A relay with the notary's certificate: each request forwarded, each answer body passed
    /// through `rewrite`; it records whether each request asked for a proof.
    fn relay(&self, rewrite: fn(&[u8]) -> Vec<u8>) -> (u16, Arc<Mutex<Vec<bool>>>) {
        let cfg = common::server_config(
            &std::fs::read_to_string(self.data.join("notary.pem")).unwrap(),
            &std::fs::read_to_string(self.data.join("notary.key")).unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let asked = Arc::new(Mutex::new(vec![]));
        let (rec, upstream) = (asked.clone(), self.port);
        std::thread::spawn(move || {
            for s in listener.incoming().flatten() {
                let (cfg, rec) = (cfg.clone(), rec.clone());
                std::thread::spawn(move || relay_one(s, cfg, rec, upstream, rewrite));
            }
        });
        (port, asked)
    }
}

#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn read_request<S: Read>(s: &mut S) -> Option<Vec<u8>> {
    let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").and_then(|n| n.trim().parse::<usize>().ok()))
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return Some(buf);
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) if buf.len() < 1 << 20 => buf.extend_from_slice(&chunk[..n]),
            Ok(_) => return None,
        }
    }
}

fn relay_one(
    s: TcpStream,
    cfg: Arc<rustls::ServerConfig>,
    asked: Arc<Mutex<Vec<bool>>>,
    upstream: u16,
    rewrite: fn(&[u8]) -> Vec<u8>,
) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(15)));
    let mut down = StreamOwned::new(ServerConnection::new(cfg).unwrap(), s);
    let Some(request) = read_request(&mut down) else { return };
    let asks: &[u8] = b"\"transparency\":true";
    let wants = request.windows(asks.len()).any(|w| w == asks);
    asked.lock().unwrap().push(wants);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let Ok(tcp) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(15)));
    let mut up = StreamOwned::new(ClientConnection::new(Arc::new(client), name).unwrap(), tcp);
    if up.write_all(&request).is_err() {
        return;
    }
    let mut response = Vec::new();
    let mut chunk = [0u8; 4096];
    while response.len() < 1 << 20 {
        match up.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => response.extend_from_slice(&chunk[..n]),
        }
    }
    let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") else { return };
    let body = rewrite(&response[end + 4..]);
    let head: Vec<&str> = std::str::from_utf8(&response[..end])
        .unwrap_or("")
        .split("\r\n")
        .filter(|h| !h.to_lowercase().starts_with("content-length:"))
        .collect();
    let _ = down.write_all(format!("{}\r\nContent-Length: {}\r\n\r\n", head.join("\r\n"), body.len()).as_bytes());
    let _ = down.write_all(&body);
    down.conn.send_close_notify();
    let _ = down.flush();
}

fn unchanged(b: &[u8]) -> Vec<u8> {
    b.to_vec()
}

/// `body` with its member changed by `change` (`None`: removed).
fn with_member(body: &[u8], change: Option<fn(&mut Map<String, Value>)>) -> Vec<u8> {
    let Some(i) = body.windows(TRANSPARENCY_MEMBER.len()).position(|w| w == TRANSPARENCY_MEMBER) else {
        return body.to_vec();
    };
    let mut out = body[..i].to_vec();
    if let Some(change) = change {
        let Ok(Value::Object(mut m)) = serde_json::from_slice(&body[i + TRANSPARENCY_MEMBER.len()..body.len() - 1])
        else {
            return body.to_vec();
        };
        change(&mut m);
        out.extend_from_slice(TRANSPARENCY_MEMBER);
        out.extend_from_slice(Value::Object(m).to_string().as_bytes());
    }
    out.push(b'}');
    out
}

fn strip(b: &[u8]) -> Vec<u8> {
    with_member(b, None)
}

fn flip_first_hash(b: &[u8]) -> Vec<u8> {
    with_member(
        b,
        Some(|m| {
            let first = m["proof"].as_array().and_then(|p| p.first()).and_then(Value::as_str).map(str::to_string);
            match first.and_then(|h| STANDARD.decode(h).ok()) {
                Some(mut h) => {
                    h[0] ^= 1;
                    m["proof"][0] = STANDARD.encode(h).into();
                }
                None => m["proof"] = vec![STANDARD.encode([0u8; 32])].into(),
            }
        }),
    )
}

fn other_port_entry(b: &[u8]) -> Vec<u8> {
    with_member(
        b,
        Some(|m| {
            let raw = STANDARD.decode(m["entry"].as_str().unwrap_or("")).unwrap_or_default();
            let text = String::from_utf8_lossy(&raw).replacen("\"port\":", "\"port\":1", 1);
            m["entry"] = STANDARD.encode(text).into();
        }),
    )
}

fn reserialised(b: &[u8]) -> Vec<u8> {
    with_member(b, Some(|_| {}))
}

fn no_log(d: &mut Map<String, Value>) {
    d.remove("transparency");
}

fn expect(what: &str, r: &NotaryResult, vote: Vote, kind: &str) {
    assert!(
        r.vote == vote && r.kind == kind,
        "{what}: {:?}/{} ({}), expected {vote:?}/{kind}",
        r.vote,
        r.kind,
        r.detail
    );
}

#[test]
fn a_valid_proof_of_a_real_notary_is_trusted() {
    let n = notary();
    let b = n.bundle_via(n.port, |_| {});
    assert!(b.transparency.is_some(), "notary bundle names no transparency log");
    expect("direct", &n.ask(b), Vote::Success, "match");
    let (port, asked) = n.relay(unchanged);
    let r = n.ask(n.bundle_via(port, |_| {}));
    expect("through an unchanged relay", &r, Vote::Success, "match");
    let answer = r.answer.clone().unwrap_or_default();
    assert!(answer.windows(TRANSPARENCY_MEMBER.len()).any(|w| w == TRANSPARENCY_MEMBER), "no member");
    // twin: the same relay with a bundle naming no log: no proof asked
    expect("no log", &n.ask(n.bundle_via(port, no_log)), Vote::Success, "match");
    assert_eq!(*asked.lock().unwrap(), vec![true, false]);
}

#[test]
fn a_stripped_member_is_log_missing() {
    let n = notary();
    let (port, _) = n.relay(strip);
    expect("stripped", &n.ask(n.bundle_via(port, |_| {})), Vote::Failure, "log-missing");
    // twin: a bundle without the log takes the statement alone
    expect("stripped, no log", &n.ask(n.bundle_via(port, no_log)), Vote::Success, "match");
}

#[test]
fn an_altered_member_is_rejected() {
    let n = notary();
    let (port, _) = n.relay(flip_first_hash);
    expect("altered proof", &n.ask(n.bundle_via(port, |_| {})), Vote::Failure, "log-proof");
    let (port, _) = n.relay(other_port_entry);
    expect("entry of another port", &n.ask(n.bundle_via(port, |_| {})), Vote::Failure, "log-entry");
    // twin: the member re-serialised unchanged still verifies
    let (port, _) = n.relay(reserialised);
    expect("re-serialised member", &n.ask(n.bundle_via(port, |_| {})), Vote::Success, "match");
}

fn vkey(name: &str, kind: u8) -> String {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    let public = pair.public_key().as_ref();
    let id: String = key_id(name, kind, public).iter().map(|b| format!("{b:02x}")).collect();
    format!("{name}+{id}+{}", STANDARD.encode([&[kind][..], public].concat()))
}

#[test]
fn the_bundle_keys_decide() {
    let n = notary();
    let witness = vkey("witness.test/w1", 0x04);
    let with_witness = |need: u64| {
        let w = witness.clone();
        move |d: &mut Map<String, Value>| {
            d["transparency"]["witnesses"] = serde_json::json!([{"name": "witness.test/w1", "vkey": w}]);
            d["transparency"]["min_cosignatures"] = need.into();
        }
    };
    expect(
        "a required witness that did not cosign",
        &n.ask(n.bundle_via(n.port, with_witness(1))),
        Vote::Failure,
        "log-witness",
    );
    expect("the same witness, none required", &n.ask(n.bundle_via(n.port, with_witness(0))), Vote::Success, "match");
    let log_name = n.bundle_via(n.port, |_| {}).transparency.unwrap().log.name;
    let other = vkey(&log_name, 0x01);
    expect(
        "another key under the log's name",
        &n.ask(n.bundle_via(n.port, move |d| d["transparency"]["log"] = other.into())),
        Vote::Failure,
        "log-checkpoint",
    );
    // a malformed member is a bundle error at load; the bundle as written loads (twin)
    let mut bad = n.bundle.clone();
    bad["transparency"]["min_cosignatures"] = 1.into();
    let e = parse_bundle(Value::Object(bad).to_string().as_bytes()).unwrap_err();
    assert_eq!(e.kind().as_str(), "bundle");
    assert!(parse_bundle(Value::Object(n.bundle.clone()).to_string().as_bytes()).is_ok());
}
