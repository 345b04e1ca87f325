//! Asking notaries over the network: one TLS connection per physical host, pinned to the
//! bundle's certificate (no CA or host name check; the handshake signature is still checked
//! against the presented key), one request, the response read until the server closes. All
//! hosts of one logical notary are raced on threads; the first definitive answer wins. Through
//! a bounce relay, one CONNECT names every host of the notary and the relay picks. Every wait
//! is bounded (connect timeout, notary timeout, response size).

use crate::bundle::{Bundle, NotaryHost, SigningKey, EXTENDED_FORMAT, LEGACY_FORMAT};
use crate::error::{Error, Kind};
use crate::extended::{
    evaluate_extended, extended_request_bytes_with, new_nonce, not_offered, request_fingerprint, trusted_keys, Expect,
};
use crate::fingerprint::{Algorithm, Fingerprint};
use crate::legacy::{outcome_from_http, parse_http_response, py_strip, request_bytes, Outcome};
use crate::policy::Vote;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one logical notary said.
#[derive(Debug, Clone)]
pub struct NotaryResult {
    pub name: String,
    pub vote: Vote,
    /// listed, mismatch, match, signature, pin, unreachable, timeout, settled, ...
    pub kind: String,
    pub status: Option<u16>,
    /// The host that answered.
    pub host: String,
    pub detail: String,
    pub elapsed: Duration,
    /// `convergence-v1` or `converge-answer/1`; `None` when it was not asked.
    pub protocol: Option<&'static str>,
    /// The verified extended answer's bytes.
    pub answer: Option<Vec<u8>>,
}

/// How to ask one notary in the extended format.
#[derive(Clone)]
pub(crate) struct ExtQuery {
    pub keys: Vec<SigningKey>,
    pub nonce: bool,
    pub max_skew: i64,
    pub fallback: bool,
    pub now: Arc<dyn Fn() -> f64 + Send + Sync>,
    /// The bundle's transparency log: ask for proofs and check them.
    pub log: Option<crate::transparency::LogPolicy>,
}

/// The per-check settings a host query needs.
#[derive(Clone)]
pub(crate) struct QueryOptions {
    pub connect_timeout: Duration,
    pub max_bytes: usize,
    pub relay: Option<Bundle>,
    pub relay_dests: Vec<NotaryHost>,
    pub bounce_port: u16,
    pub ext: Option<ExtQuery>,
    pub ip: Option<String>,
}

/// Accepts any certificate chain (the caller checks the bundle's pin right after the
/// handshake) but checks the handshake signatures against the presented key, so that a
/// server must hold the pinned certificate's private key.
#[derive(Debug)]
pub(crate) struct PinnedLater(pub Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for PinnedLater {
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
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn notary_tls_config() -> Arc<ClientConfig> {
    let p = provider();
    let cfg = ClientConfig::builder_with_provider(p.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS 1.2 and 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedLater(p)))
        .with_no_client_auth();
    Arc::new(cfg)
}

fn server_name(host: &str) -> ServerName<'static> {
    match host.parse::<IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => ServerName::try_from(host.to_string())
            .unwrap_or_else(|_| ServerName::IpAddress(IpAddr::from([0, 0, 0, 0]).into())),
    }
}

/// The kind of a failed exchange: "timeout" once the notary's own deadline has passed (so the
/// answer does not depend on which thread noticed the deadline first), else "unreachable".
fn lapsed(deadline: Instant) -> &'static str {
    if Instant::now() >= deadline {
        "timeout"
    } else {
        "unreachable"
    }
}

fn remaining(deadline: Instant) -> Option<Duration> {
    deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
}

fn unreachable_err(msg: impl Into<String>) -> Error {
    Error::new(Kind::Unreachable, msg)
}

fn dial(host: &str, port: u16, deadline: Instant) -> Result<TcpStream, Error> {
    let addrs: Vec<_> =
        (host, port).to_socket_addrs().map_err(|e| unreachable_err(format!("{host}:{port}: {e}")))?.collect();
    let mut last = unreachable_err(format!("{host}:{port}: no address"));
    for a in addrs {
        let Some(left) = remaining(deadline) else { return Err(unreachable_err(format!("{host}:{port}: timed out"))) };
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = unreachable_err(format!("{host}:{port}: {e}")),
        }
    }
    Err(last)
}

fn set_deadline(s: &TcpStream, deadline: Instant) -> Result<(), Error> {
    let left = remaining(deadline).ok_or_else(|| unreachable_err("timed out"))?;
    s.set_read_timeout(Some(left))
        .and_then(|_| s.set_write_timeout(Some(left)))
        .map_err(|e| unreachable_err(e.to_string()))
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

fn handshake(sock: TcpStream, host: &str, deadline: Instant) -> Result<Tls, Error> {
    set_deadline(&sock, deadline)?;
    let conn =
        ClientConnection::new(notary_tls_config(), server_name(host)).map_err(|e| unreachable_err(e.to_string()))?;
    let mut tls = StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).map_err(|e| unreachable_err(format!("{host}: TLS: {e}")))?;
    }
    Ok(tls)
}

/// The CONNECT head sent to a bounce relay for one notary's hosts.
pub fn connect_head(dests: &[NotaryHost], port: u16) -> Vec<u8> {
    let first = &dests[0].host;
    let mut lines = vec![format!("CONNECT {first}:{port} HTTP/1.1"), format!("Host: {first}")];
    for d in &dests[1..] {
        lines.push(format!("X-Convergence-Notary: {}+{port}", d.host));
    }
    (lines.join("\r\n") + "\r\n\r\n").into_bytes()
}

/// Which destination a relay connected to; a status other than 200 or an unknown
/// destination is an `unreachable` error.
pub fn parse_connect_reply(head: &[u8], dests: &[NotaryHost]) -> Result<NotaryHost, Error> {
    let text: String = head.iter().map(|&c| c as char).collect();
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or("");
    let parts: Vec<&str> = first.splitn(3, ' ').collect();
    if parts.len() < 2 || !parts[0].starts_with("HTTP/1.") || parts[1] != "200" {
        return Err(unreachable_err(format!(
            "relay refused the tunnel: {:?}",
            first.chars().take(80).collect::<String>()
        )));
    }
    let mut connected: Option<String> = None;
    for line in lines {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        if py_strip(name).eq_ignore_ascii_case("x-convergence-notary") {
            connected = Some(py_strip(value).to_lowercase());
        }
    }
    let Some(connected) = connected else {
        if dests.len() == 1 {
            return Ok(dests[0].clone());
        }
        return Err(unreachable_err("relay did not name the notary host it connected to"));
    };
    let host = connected.split('+').next().unwrap_or("");
    dests
        .iter()
        .find(|d| d.host.to_lowercase() == host || d.host.to_lowercase() == connected)
        .cloned()
        .ok_or_else(|| unreachable_err(format!("relay connected to an unknown notary host {connected:?}")))
}

fn open_via_relay(o: &QueryOptions, deadline: Instant) -> Result<(Tls, NotaryHost), Error> {
    let relay = o.relay.as_ref().expect("relay");
    let mut last = unreachable_err("no hosts");
    for rh in &relay.hosts {
        let attempt = (|| {
            let mut sock = dial(&rh.host, rh.http_port, deadline)?;
            set_deadline(&sock, deadline)?;
            sock.write_all(&connect_head(&o.relay_dests, o.bounce_port)).map_err(|e| unreachable_err(e.to_string()))?;
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if head.len() >= 8192 {
                    return Err(unreachable_err("relay reply head too large"));
                }
                match sock.read(&mut b) {
                    Ok(1) => head.push(b[0]),
                    Ok(_) => return Err(unreachable_err("relay closed the connection")),
                    Err(e) => return Err(unreachable_err(format!("relay: {e}"))),
                }
            }
            let nh = parse_connect_reply(&head, &o.relay_dests)?;
            Ok((handshake(sock, &nh.host, deadline)?, nh))
        })();
        match attempt {
            Ok(x) => return Ok(x),
            Err(e) => last = e,
        }
    }
    Err(unreachable_err(format!("no host of relay {:?} worked: {}", relay.name, last.message())))
}

fn read_to_end(tls: &mut Tls, max_bytes: usize) -> Result<Vec<u8>, Error> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match tls.read(&mut chunk) {
            Ok(0) => return Ok(buf),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > max_bytes {
                    return Err(Error::new(Kind::Response, format!("response larger than {max_bytes} bytes")));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !buf.is_empty() => return Ok(buf),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                return Err(Error::new(Kind::Timeout, "timed out"))
            }
            Err(e) => return Err(unreachable_err(e.to_string())),
        }
    }
}

struct HostAnswer {
    outcome: Outcome,
    host: String,
    protocol: &'static str,
}

fn query_host_once(
    nh: &NotaryHost,
    target: &str,
    port: u16,
    wanted: &[Fingerprint],
    o: &QueryOptions,
    ext: Option<&ExtQuery>,
    deadline: Instant,
) -> HostAnswer {
    let protocol = if ext.is_some() { EXTENDED_FORMAT } else { LEGACY_FORMAT };
    let mut label = match &o.relay {
        Some(r) => format!("{}:{} via {}", nh.host, o.bounce_port, r.name),
        None => format!("{}:{}", nh.host, nh.ssl_port),
    };
    let answer = |outcome: Outcome, host: String| HostAnswer { outcome, host, protocol };
    let mut asked = wanted[0].clone();
    let mut nonce = String::new();
    let request = match ext {
        None => request_bytes(target, port, &asked, o.ip.as_deref()),
        Some(e) => {
            asked = request_fingerprint(wanted);
            if e.nonce {
                nonce = new_nonce();
            }
            extended_request_bytes_with(target, port, &asked, &nonce, o.ip.as_deref(), e.log.is_some())
        }
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => return answer(Outcome::failure_of(&e, None), label),
    };
    let connect_deadline = deadline.min(Instant::now() + o.connect_timeout);
    let opened = match &o.relay {
        None => dial(&nh.host, nh.ssl_port, connect_deadline)
            .and_then(|s| handshake(s, &nh.host, connect_deadline))
            .map(|t| (t, nh.clone())),
        Some(_) => open_via_relay(o, connect_deadline),
    };
    let (mut tls, nh) = match opened {
        Ok(x) => x,
        Err(e) => {
            let detail = if Instant::now() >= connect_deadline {
                format!("{label}: timed out")
            } else {
                e.message().to_string()
            };
            return answer(Outcome::new(Vote::Unreachable, lapsed(deadline), None, detail), label);
        }
    };
    if o.relay.is_some() {
        label =
            format!("{}:{} via {}", nh.host, o.bounce_port, o.relay.as_ref().map(|r| r.name.as_str()).unwrap_or(""));
    }
    let pinned = tls
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .is_some_and(|leaf| Fingerprint::of(leaf.as_ref(), Algorithm::Sha1) == nh.pin);
    if !pinned {
        return answer(
            Outcome::new(
                Vote::Failure,
                "pin",
                None,
                format!("{label} presented a certificate other than the pinned one"),
            ),
            label,
        );
    }
    if set_deadline(&tls.sock, deadline).is_err() {
        return answer(Outcome::new(Vote::Unreachable, lapsed(deadline), None, format!("{label}: timed out")), label);
    }
    if let Err(e) = tls.write_all(&request).and_then(|_| tls.flush()) {
        return answer(Outcome::new(Vote::Unreachable, lapsed(deadline), None, format!("{label}: {e}")), label);
    }
    let raw = match read_to_end(&mut tls, o.max_bytes) {
        Ok(r) => r,
        Err(e) if e.kind() == Kind::Response => return answer(Outcome::failure_of(&e, None), label),
        Err(e) => {
            return answer(
                Outcome::new(Vote::Unreachable, lapsed(deadline), None, format!("{label}: {}", e.message())),
                label,
            )
        }
    };
    let outcome = match ext {
        None => outcome_from_http(&raw, wanted, &nh.key, o.max_bytes).0,
        Some(e) => {
            let now = (e.now)() as i64;
            match parse_http_response(&raw, o.max_bytes) {
                Err(err) => Outcome::failure_of(&err, None),
                Ok(resp) => evaluate_extended(
                    &resp,
                    &trusted_keys(&e.keys, now),
                    &Expect {
                        host: target.to_string(),
                        port: port as i64,
                        fingerprint: Some(asked),
                        nonce,
                        now: Some(now),
                        max_skew: e.max_skew,
                        bind_ip: true,
                        ip: o.ip.clone().unwrap_or_default(),
                        log: e.log.clone(),
                    },
                ),
            }
        }
    };
    answer(outcome, label)
}

fn query_host(
    nh: &NotaryHost,
    target: &str,
    port: u16,
    wanted: &[Fingerprint],
    o: &QueryOptions,
    deadline: Instant,
) -> HostAnswer {
    let Some(ext) = &o.ext else { return query_host_once(nh, target, port, wanted, o, None, deadline) };
    let a = query_host_once(nh, target, port, wanted, o, Some(ext), deadline);
    if ext.fallback && a.outcome.kind == "status" && a.outcome.status.is_some_and(not_offered) {
        return query_host_once(nh, target, port, wanted, o, None, deadline);
    }
    a
}

fn definitive(kind: &str) -> bool {
    matches!(kind, "listed" | "status-only" | "mismatch" | "not-listed" | "match")
}

fn severity(kind: &str) -> u8 {
    match kind {
        "signature" | "response" | "malformed" | "non-canonical" | "unknown-key" | "bad-signature" | "wrong-target"
        | "nonce-mismatch" | "stale" => 3,
        "pin" => 2,
        _ => 0,
    }
}

/// Races every physical host of `b` (or one relayed query naming all of them).
pub(crate) fn ask_notary(
    b: &Bundle,
    target: &str,
    port: u16,
    wanted: &[Fingerprint],
    notary_timeout: Duration,
    o: &QueryOptions,
    total_deadline: Instant,
) -> NotaryResult {
    let t0 = Instant::now();
    let deadline = total_deadline.min(t0 + notary_timeout);
    let mut opts = o.clone();
    let hosts: Vec<NotaryHost> = if o.relay.is_some() {
        opts.relay_dests = b.hosts.clone();
        b.hosts[..1].to_vec()
    } else {
        b.hosts.clone()
    };
    let (tx, rx) = mpsc::channel::<HostAnswer>();
    let opts = Arc::new(opts);
    let wanted: Arc<Vec<Fingerprint>> = Arc::new(wanted.to_vec());
    for h in &hosts {
        let (h, tx, opts, wanted, target) = (h.clone(), tx.clone(), opts.clone(), wanted.clone(), target.to_string());
        std::thread::spawn(move || {
            let _ = tx.send(query_host(&h, &target, port, &wanted, &opts, deadline));
        });
    }
    drop(tx);
    let mut got: Vec<HostAnswer> = Vec::new();
    let mut winner: Option<HostAnswer> = None;
    while got.len() < hosts.len() {
        let Some(left) = remaining(deadline) else { break };
        match rx.recv_timeout(left) {
            Ok(a) if definitive(&a.outcome.kind) => {
                winner = Some(a);
                break;
            }
            Ok(a) => got.push(a),
            Err(_) => break,
        }
    }
    let elapsed = t0.elapsed();
    let best = winner.or_else(|| {
        let mut best: Option<HostAnswer> = None;
        for a in got {
            if best.as_ref().is_none_or(|b| severity(&a.outcome.kind) > severity(&b.outcome.kind)) {
                best = Some(a);
            }
        }
        best
    });
    match best {
        None => NotaryResult {
            name: b.name.clone(),
            vote: Vote::Unreachable,
            kind: "timeout".into(),
            status: None,
            host: String::new(),
            detail: format!("no answer within {:?}", notary_timeout),
            elapsed,
            protocol: None,
            answer: None,
        },
        Some(a) => NotaryResult {
            name: b.name.clone(),
            vote: a.outcome.vote,
            kind: a.outcome.kind,
            status: a.outcome.status,
            host: a.host,
            detail: a.outcome.detail,
            elapsed,
            protocol: Some(a.protocol),
            answer: a.outcome.answer,
        },
    }
}
