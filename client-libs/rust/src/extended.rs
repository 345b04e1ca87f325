//! The extended answer format `converge-answer/1`, client side (pure): verification of a signed
//! answer in the documented order, each failure named; the request; the reduction to a vote.

use crate::bundle::{b64url, unb64url, SigningKey, EXTENDED_FORMAT};
use crate::error::Result;
use crate::fingerprint::{parse_fingerprint, Fingerprint};
use crate::json::{as_int, bounds_ok, parse_object};
use crate::legacy::{check_ip, check_target, HttpResponse, Outcome};
use crate::policy::Vote;
use crate::transparency::{check_member, split_member, LogPolicy, Proven};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// Seconds an answer's time may differ from the client's clock by default.
pub const DEFAULT_MAX_SKEW: i64 = 300;
/// The Content-Type of a signed answer.
pub const ANSWER_MEDIA_TYPE: &str = "application/vnd.converge.answer+json";
/// The request path of the extended format.
pub const ANSWER_PATH: &str = "/v2/answer";

/// Why an answer was rejected, in verification order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    Malformed,
    UnknownKey,
    BadSignature,
    WrongTarget,
    NonceMismatch,
    Stale,
    /// A match without the transparency member its bundle's log requires.
    LogMissing,
    /// The member's shape, a proof hash or the inclusion proof.
    LogProof,
    /// The checkpoint is not one of the log signed by its key.
    LogCheckpoint,
    /// Too few cosignatures by the bundle's witnesses, or a listed witness's line fails.
    LogWitness,
    /// The logged entry is not about the answer's target and fingerprint.
    LogEntry,
}

impl Reject {
    /// The word the vectors use.
    pub fn as_str(self) -> &'static str {
        match self {
            Reject::Malformed => "malformed",
            Reject::UnknownKey => "unknown-key",
            Reject::BadSignature => "bad-signature",
            Reject::WrongTarget => "wrong-target",
            Reject::NonceMismatch => "nonce-mismatch",
            Reject::Stale => "stale",
            Reject::LogMissing => "log-missing",
            Reject::LogProof => "log-proof",
            Reject::LogCheckpoint => "log-checkpoint",
            Reject::LogWitness => "log-witness",
            Reject::LogEntry => "log-entry",
        }
    }
}

/// A failed verification.
#[derive(Debug, Clone)]
pub struct AnswerRejected {
    pub reason: Reject,
    pub message: String,
}

impl fmt::Display for AnswerRejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "converge: answer rejected ({}): {}", self.reason.as_str(), self.message)
    }
}

impl std::error::Error for AnswerRejected {}

fn reject<T>(reason: Reject, message: impl Into<String>) -> std::result::Result<T, AnswerRejected> {
    Err(AnswerRejected { reason, message: message.into() })
}

/// The bundle's signing keys trusted at `now`, by key id.
pub fn trusted_keys(keys: &[SigningKey], now: i64) -> BTreeMap<String, Vec<u8>> {
    keys.iter().filter(|k| k.trusted_at(now)).map(|k| (k.key_id.clone(), k.public_key.clone())).collect()
}

/// The host as a notary names it in `target.host`: an IP literal in compressed form, a DNS
/// name in lower case without a trailing dot.
pub fn expected_host(host: &str) -> String {
    let bare = host.trim_matches(|c| c == '[' || c == ']');
    if let Ok(ip) = check_ip(bare) {
        return ip;
    }
    let name = host.to_lowercase();
    name.strip_suffix('.').map(str::to_string).unwrap_or(name)
}

/// A verified answer.
#[derive(Debug, Clone)]
pub struct ExtendedAnswer {
    /// match, mismatch, unreachable or refused.
    pub verdict: String,
    pub detail: String,
    pub key_id: String,
    pub answered_at: i64,
    /// What the transparency log proves, when `Expect::log` named it and the verdict is match.
    pub proven: Option<Proven>,
}

/// What an answer is bound to. An empty `host` skips the target check, `None` fingerprint the
/// fingerprint check, an empty nonce the nonce check, `None` now the freshness check.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    pub host: String,
    pub port: i64,
    pub fingerprint: Option<Fingerprint>,
    pub nonce: String,
    pub now: Option<i64>,
    pub max_skew: i64,
    /// Check `target.ip`: it must be `ip` (absent or null when `ip` is empty).
    pub bind_ip: bool,
    pub ip: String,
    /// The bundle names a transparency log: a match must carry a valid proof of inclusion
    /// (docs/transparency.md, "Clients"); `None` changes nothing.
    pub log: Option<LogPolicy>,
}

fn s(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
}

const PREFIX_SIGNATURE: &[u8] = b"{\"signature\":{\"alg\":\"ed25519\",\"key_id\":\"";
const PREFIX_VALUE: &[u8] = b"\",\"value\":\"";
const PREFIX_STATEMENT: &[u8] = b"\"},\"statement\":";

/// A run of printable ASCII without `"` or `\` at the start of `b`, then `end`: the run's text
/// and what follows `end`.
fn printable_run<'a>(b: &'a [u8], end: &[u8]) -> Option<(&'a str, &'a [u8])> {
    let n = b.iter().position(|&c| !(0x20..=0x7e).contains(&c) || c == b'"' || c == b'\\')?;
    let rest = b[n..].strip_prefix(end)?;
    (n > 0).then(|| (std::str::from_utf8(&b[..n]).unwrap_or_default(), rest))
}

/// Frames an answer: `K`, `V` and the statement bytes `T`, or `None`.
fn split_answer(raw: &[u8]) -> Option<(&str, &str, &[u8])> {
    let rest = raw.strip_prefix(PREFIX_SIGNATURE)?;
    let (kid, rest) = printable_run(rest, PREFIX_VALUE)?;
    let (value, rest) = printable_run(rest, PREFIX_STATEMENT)?;
    Some((kid, value, rest.strip_suffix(b"}")?))
}

/// Checks an extended answer body in the documented order (docs/wire-format.md, "Verifying"):
/// malformed (framing), unknown-key, bad-signature (Ed25519 over the statement bytes `T` as
/// received), malformed (bounds scan, parse and shape of `T`), wrong-target, nonce-mismatch,
/// stale; then, with `exp.log` and a match, the transparency member (`log-missing`,
/// `log-proof`, `log-checkpoint`, `log-witness`, `log-entry`). The statement bytes end at the
/// first `,"transparency":` after the prefix.
pub fn verify_answer(
    raw: &[u8],
    keys: &BTreeMap<String, Vec<u8>>,
    exp: &Expect,
) -> std::result::Result<ExtendedAnswer, AnswerRejected> {
    if raw.len() > MAX_ANSWER_BYTES {
        return reject(Reject::Malformed, "answer too large");
    }
    let Some((kid, value, body)) = split_answer(raw) else {
        return reject(Reject::Malformed, "answer does not have the fixed signature prefix and a final brace");
    };
    let (stmt_bytes, member) = split_member(body);
    let Some(public) = keys.get(kid) else {
        return reject(Reject::UnknownKey, format!("signing key {kid:.80} is not trusted"));
    };
    let ok = match unb64url(value) {
        Some(sg) if sg.len() == 64 && public.len() == 32 => {
            ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public).verify(stmt_bytes, &sg).is_ok()
        }
        _ => false,
    };
    if !ok {
        return reject(Reject::BadSignature, "signature does not verify");
    }
    if !bounds_ok(stmt_bytes) {
        return reject(Reject::Malformed, "statement nests too deep or holds a number that is not a short integer");
    }
    let Some(stmt) = parse_object(stmt_bytes) else {
        return reject(Reject::Malformed, "statement is not a JSON object");
    };
    if s(stmt.get("type")) != Some(EXTENDED_FORMAT) {
        return reject(Reject::Malformed, format!("statement type is not {EXTENDED_FORMAT}"));
    }
    if s(stmt.get("key_id")) != Some(kid) {
        return reject(Reject::Malformed, "key ids of statement and signature differ");
    }
    let verdict = s(stmt.get("verdict")).unwrap_or("");
    let Some(Value::Object(target)) = stmt.get("target") else {
        return reject(Reject::Malformed, "statement lacks a verdict or target");
    };
    if !matches!(verdict, "match" | "mismatch" | "unreachable" | "refused") {
        return reject(Reject::Malformed, "statement lacks a verdict or target");
    }
    let Some(at) = stmt.get("answered_at").and_then(as_int) else {
        return reject(Reject::Malformed, "answered_at must be an integer");
    };
    if !exp.host.is_empty() {
        let th = s(target.get("host"));
        let tp = target.get("port").and_then(as_int);
        if th != Some(expected_host(&exp.host).as_str()) || tp != Some(exp.port) {
            return reject(
                Reject::WrongTarget,
                format!("answer is about another target, not {}:{}", exp.host, exp.port),
            );
        }
    }
    if exp.bind_ip {
        let tip = target.get("ip");
        if exp.ip.is_empty() {
            if matches!(tip, Some(v) if !v.is_null()) {
                return reject(Reject::WrongTarget, "answer is about a probe of an address the client did not name");
            }
        } else if s(tip) != Some(expected_host(&exp.ip).as_str()) {
            return reject(Reject::WrongTarget, format!("answer is about a probe of another address, not {}", exp.ip));
        }
    }
    let request = match stmt.get("request") {
        Some(Value::Object(r)) => Some(r),
        _ => None,
    };
    if let Some(fp) = &exp.fingerprint {
        let ok = request.is_some_and(|r| {
            s(r.get("alg")) == Some(fp.algorithm.as_str()) && s(r.get("fingerprint")) == Some(fp.colon_hex().as_str())
        });
        if !ok {
            return reject(Reject::WrongTarget, "answer is about another certificate fingerprint");
        }
    }
    if !exp.nonce.is_empty() && request.is_none_or(|r| s(r.get("nonce")) != Some(exp.nonce.as_str())) {
        return reject(Reject::NonceMismatch, "answer does not echo our nonce");
    }
    if let Some(now) = exp.now {
        if (now - at).abs() > exp.max_skew {
            return reject(
                Reject::Stale,
                format!("answer time is {} s from now (max skew {} s)", now - at, exp.max_skew),
            );
        }
    }
    let proven = match &exp.log {
        Some(log) if verdict == "match" => Some(check_log(log, member, target, request, exp.fingerprint.as_ref())?),
        _ => None,
    };
    Ok(ExtendedAnswer {
        proven,
        verdict: verdict.to_string(),
        detail: s(stmt.get("detail")).unwrap_or("").to_string(),
        key_id: kid.to_string(),
        answered_at: at,
    })
}

/// Unpadded base64url of 16 random bytes.
pub fn new_nonce() -> String {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut b).expect("system randomness");
    b64url(&b)
}

/// The JSON body of an extended request.
pub fn extended_request_body(host: &str, port: u16, fp: &Fingerprint, nonce: &str, ip: Option<&str>) -> Result<String> {
    extended_request_body_with(host, port, fp, nonce, ip, false)
}

/// The JSON body of an extended request; `proof`: ask for a proof of inclusion in the log.
pub fn extended_request_body_with(
    host: &str,
    port: u16,
    fp: &Fingerprint,
    nonce: &str,
    ip: Option<&str>,
    proof: bool,
) -> Result<String> {
    check_target(host, port as u32)?;
    let mut body = format!(
        "{{\"host\":{},\"port\":{},\"fingerprint\":\"{}\",\"alg\":\"{}\"",
        Value::String(host.to_string()),
        port,
        fp.colon_hex(),
        fp.algorithm.as_str()
    );
    if let Some(ip) = ip.filter(|i| !i.is_empty()) {
        body.push_str(&format!(",\"ip\":\"{}\"", check_ip(ip)?));
    }
    if !nonce.is_empty() {
        body.push_str(&format!(",\"nonce\":\"{nonce}\""));
    }
    if proof {
        body.push_str(",\"transparency\":true");
    }
    body.push('}');
    Ok(body)
}

/// The whole HTTP/1.0 request of the extended format.
pub fn extended_request_bytes(
    host: &str,
    port: u16,
    fp: &Fingerprint,
    nonce: &str,
    ip: Option<&str>,
) -> Result<Vec<u8>> {
    extended_request_bytes_with(host, port, fp, nonce, ip, false)
}

/// The whole HTTP/1.0 request of the extended format; `proof`: ask for a proof of inclusion.
pub fn extended_request_bytes_with(
    host: &str,
    port: u16,
    fp: &Fingerprint,
    nonce: &str,
    ip: Option<&str>,
    proof: bool,
) -> Result<Vec<u8>> {
    let body = extended_request_body_with(host, port, fp, nonce, ip, proof)?;
    Ok(format!(
        "POST {ANSWER_PATH} HTTP/1.0\r\nContent-Type: application/json\r\nAccept: {ANSWER_MEDIA_TYPE}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}",
        body.len(), body
    )
    .into_bytes())
}

/// The fingerprint form to ask about: SHA-256 when known, else the first.
pub fn request_fingerprint(forms: &[Fingerprint]) -> Fingerprint {
    forms.iter().find(|f| f.algorithm == crate::Algorithm::Sha256).unwrap_or(&forms[0]).clone()
}

fn verdict_status(v: &str) -> u16 {
    match v {
        "match" => 200,
        "mismatch" => 409,
        "unreachable" => 503,
        _ => 403,
    }
}

/// Statuses meaning "this notary does not speak the extended format here".
pub fn not_offered(status: u16) -> bool {
    matches!(status, 400 | 404 | 405 | 501)
}

/// Reduces one extended response to a vote.
pub fn evaluate_extended(resp: &HttpResponse, keys: &BTreeMap<String, Vec<u8>>, exp: &Expect) -> Outcome {
    let ctype = resp
        .headers
        .get("content-type")
        .map(|c| c.split(';').next().unwrap_or("").trim().to_lowercase())
        .unwrap_or_default();
    if !matches!(resp.status, 200 | 409 | 503 | 403) || ctype != ANSWER_MEDIA_TYPE {
        return Outcome::new(Vote::Unreachable, "status", Some(resp.status), format!("HTTP status {}", resp.status));
    }
    let v = match verify_answer(&resp.body, keys, exp) {
        Ok(v) => v,
        Err(r) => return Outcome::new(Vote::Failure, r.reason.as_str(), Some(resp.status), r.to_string()),
    };
    if verdict_status(&v.verdict) != resp.status {
        return Outcome::new(
            Vote::Failure,
            "response",
            Some(resp.status),
            format!("status {} with signed verdict {}", resp.status, v.verdict),
        );
    }
    let (vote, kind) = match v.verdict.as_str() {
        "match" => (Vote::Success, "match"),
        "mismatch" => (Vote::Failure, "mismatch"),
        "unreachable" => (Vote::Unreachable, "target-unreachable"),
        _ => (Vote::Unreachable, "refused"),
    };
    let mut o = Outcome::new(vote, kind, Some(resp.status), v.detail);
    o.answer = Some(resp.body.clone());
    o
}

/// Checks the member of a match against the statement's target and the fingerprint asked
/// about (`None`: the statement's request, which must then be of its own alg).
fn check_log(
    log: &LogPolicy,
    member: Option<&[u8]>,
    target: &serde_json::Map<String, Value>,
    request: Option<&serde_json::Map<String, Value>>,
    fp: Option<&Fingerprint>,
) -> std::result::Result<Proven, AnswerRejected> {
    let asked = match fp {
        Some(f) => f.clone(),
        None => {
            let alg = request.and_then(|r| s(r.get("alg")));
            match request.and_then(|r| s(r.get("fingerprint"))).map(parse_fingerprint) {
                Some(Ok(f)) if Some(f.algorithm.as_str()) == alg => f,
                _ => return reject(Reject::LogEntry, "the statement names no fingerprint of its alg"),
            }
        }
    };
    check_member(member, log, target, &asked)
}
