//! The legacy (Convergence v1) protocol, client side (pure): the request bytes, the response
//! framing, the signed bytes `S`, RSA/SHA-1 verification and the reduction of an
//! answer to a vote.

use crate::bundle::{host_ok, PublicKey};
use crate::error::{err, Error, Kind, Result};
use crate::fingerprint::{parse_fingerprint, Algorithm, Fingerprint};
use crate::json::{as_int, bounds_ok, parse_object};
use crate::policy::Vote;
use base64::Engine;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Largest response accepted by default (bytes).
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024;
const MAX_HEADER_BYTES: usize = 16 * 1024;
const MAX_HISTORY_ENTRIES: usize = 1000;

/// Refuses a host or port that cannot be put into `/target/<host>+<port>`.
pub fn check_target(host: &str, port: u32) -> Result<()> {
    if !host_ok(host) || host.starts_with('.') || host.starts_with('-') {
        return err(Kind::Target, format!("invalid target host {host:?}"));
    }
    if !(1..=65535).contains(&port) {
        return err(Kind::Target, format!("invalid target port {port}"));
    }
    Ok(())
}

/// The cache and record key `host:port` (host lower-cased).
pub fn location(host: &str, port: u16) -> String {
    format!("{}:{}", host.to_lowercase(), port)
}

/// An IP address literal in its compressed form, or a `target` error.
pub fn check_ip(ip: &str) -> Result<String> {
    let v4_leading_zero =
        ip.contains('.') && !ip.contains(':') && ip.split('.').any(|o| o.len() > 1 && o.starts_with('0'));
    match ip.parse::<IpAddr>() {
        Ok(a) if !v4_leading_zero => Ok(match a {
            IpAddr::V6(v6) => {
                // every group in hex, as the notary's Python writes addresses
                let s = v6.segments();
                if s[..5] == [0, 0, 0, 0, 0] && s[5] == 0xffff {
                    format!("::ffff:{:x}:{:x}", s[6], s[7])
                } else {
                    v6.to_string()
                }
            }
            IpAddr::V4(v4) => v4.to_string(),
        }),
        _ => err(Kind::Target, format!("invalid target address {ip:?}")),
    }
}

/// The exact request the 2011 add-on sends; `ip` asks the notary to connect to that address.
pub fn request_bytes(host: &str, port: u16, fp: &Fingerprint, ip: Option<&str>) -> Result<Vec<u8>> {
    check_target(host, port as u32)?;
    let suffix = match ip {
        Some(ip) if !ip.is_empty() => format!("/{}", check_ip(ip)?),
        _ => String::new(),
    };
    let body = format!("fingerprint={}", fp.colon_hex());
    Ok(format!(
        "POST /target/{}+{}{} HTTP/1.0\r\nContent-Type: application/x-www-form-urlencoded\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}",
        host.to_lowercase(), port, suffix, body.len(), body
    )
    .into_bytes())
}

/// A split HTTP/1.x response; header names lower-cased, repeated headers joined by ", ".
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

fn latin1(b: &[u8]) -> String {
    b.iter().map(|&c| c as char).collect()
}

fn is_py_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c' | '\x1c' | '\x1d' | '\x1e' | '\x1f' | '\u{85}' | '\u{a0}')
}

/// What Python's `str.strip()` strips from latin-1 text.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn response_err<T>(message: impl Into<String>) -> Result<T> {
    err(Kind::Response, message)
}

/// Splits a complete response read until the server closed. Chunked coding is refused; a
/// Content-Length longer than the body is a truncated response; extra bytes are ignored.
pub fn parse_http_response(raw: &[u8], max_bytes: usize) -> Result<HttpResponse> {
    if raw.len() > max_bytes {
        return response_err(format!("response larger than {max_bytes} bytes"));
    }
    let (sep, sep_len) = match find(raw, b"\r\n\r\n") {
        Some(i) => (i, 4),
        None => match find(raw, b"\n\n") {
            Some(i) => (i, 2),
            None => return response_err("response has no end of headers"),
        },
    };
    if sep > MAX_HEADER_BYTES {
        return response_err("response headers too large");
    }
    let head = latin1(&raw[..sep]).replace("\r\n", "\n");
    let mut lines = head.split('\n');
    let status_line = lines.next().unwrap_or("");
    let status = parse_status_line(status_line).ok_or_else(|| {
        Error::new(Kind::Response, format!("bad status line {:?}", status_line.chars().take(80).collect::<String>()))
    })?;
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return response_err(format!("bad header line {:?}", line.chars().take(80).collect::<String>()));
        };
        if name.is_empty() || name != py_strip(name) {
            return response_err(format!("bad header line {:?}", line.chars().take(80).collect::<String>()));
        }
        let value = py_strip(value).to_string();
        headers.entry(name.to_lowercase()).and_modify(|old| *old = format!("{old}, {value}")).or_insert(value);
    }
    let mut body = raw[sep + sep_len..].to_vec();
    if headers.get("transfer-encoding").is_some_and(|t| t.to_lowercase().contains("chunked")) {
        return response_err("chunked transfer coding is not allowed on notary responses");
    }
    if let Some(cl) = headers.get("content-length") {
        if cl.is_empty() || cl.len() > 12 || !cl.bytes().all(|c| c.is_ascii_digit()) {
            return response_err(format!("bad Content-Length {:?}", cl.chars().take(20).collect::<String>()));
        }
        let n: usize = cl.parse().unwrap_or(usize::MAX);
        if n > body.len() {
            return response_err("truncated response body");
        }
        body.truncate(n);
    }
    Ok(HttpResponse { status, headers, body })
}

fn parse_status_line(line: &str) -> Option<u16> {
    let rest = line.strip_prefix("HTTP/1.")?;
    let mut chars = rest.chars();
    if !matches!(chars.next(), Some('0' | '1')) || chars.next() != Some(' ') {
        return None;
    }
    let rest = &rest[2..];
    let code = rest.get(..3)?;
    if !code.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let after = &rest[3..];
    if !(after.is_empty() || after.starts_with(' ')) {
        return None;
    }
    code.parse().ok()
}

/// One fingerprint of a notary's history for a target.
#[derive(Debug, Clone)]
pub struct HistoryEntry {
    pub fingerprint: Fingerprint,
    pub start: i64,
    pub finish: i64,
}

/// A verified 200/409 body.
#[derive(Debug, Clone)]
pub struct SignedList {
    pub entries: Vec<HistoryEntry>,
    /// `S`: the body up to the last `, "signature": "`, then `}`. The signature covers exactly
    /// these bytes, and `entries` come from them alone.
    pub signed_bytes: Vec<u8>,
    pub signature: Vec<u8>,
}

impl SignedList {
    /// Whether `fp` is in the signed history.
    pub fn lists(&self, fp: &Fingerprint) -> bool {
        self.entries.iter().any(|e| &e.fingerprint == fp)
    }
}

fn timestamp(v: Option<&Value>, what: &str) -> Result<i64> {
    if let Some(Value::String(s)) = v {
        if !s.is_empty() && s.len() <= 12 && s.bytes().all(|c| c.is_ascii_digit()) {
            return Ok(s.parse().unwrap_or(0));
        }
    }
    if let Some(n) = v.and_then(as_int) {
        if (0..1_000_000_000_000).contains(&n) {
            return Ok(n);
        }
    }
    response_err(format!("{what} is not a decimal unix time"))
}

const SIGNATURE_MARKER: &[u8] = b", \"signature\": \"";

/// Frames a 200/409 body: `S` and the signature text (one or more standard base64 characters,
/// at most two `=`, then `"}` as the body's last bytes), or a `response` error.
pub fn split_signed(body: &[u8], max_bytes: usize) -> Result<(Vec<u8>, &str)> {
    if body.len() > max_bytes {
        return response_err(format!("body larger than {max_bytes} bytes"));
    }
    let Some(i) = body.windows(SIGNATURE_MARKER.len()).rposition(|w| w == SIGNATURE_MARKER) else {
        return response_err("body has no signature member");
    };
    let tail = &body[i + SIGNATURE_MARKER.len()..];
    let Some(text) = tail.strip_suffix(b"\"}") else {
        return response_err("the signature must be the last member and the body must end with it");
    };
    let unpadded = text.strip_suffix(b"==").or_else(|| text.strip_suffix(b"=")).unwrap_or(text);
    if unpadded.is_empty() || !unpadded.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/')) {
        return response_err("the signature must be the last member and the body must end with it");
    }
    let mut signed = body[..i].to_vec();
    signed.push(b'}');
    // ASCII checked above
    Ok((signed, std::str::from_utf8(text).unwrap_or_default()))
}

/// Reads the history out of verified bytes `S`: the bounds scan, the parser, then the shape.
pub fn parse_signed_bytes(signed: &[u8]) -> Result<Vec<HistoryEntry>> {
    if !bounds_ok(signed) {
        return response_err("signed bytes nest too deep or hold a number that is not a short integer");
    }
    let Some(obj) = parse_object(signed) else { return response_err("signed bytes are not a JSON object") };
    let Some(Value::Array(list)) = obj.get("fingerprintList") else {
        return response_err("fingerprintList missing or not a list");
    };
    if list.len() > MAX_HISTORY_ENTRIES {
        return response_err(format!("more than {MAX_HISTORY_ENTRIES} history entries"));
    }
    let mut entries = Vec::new();
    for item in list {
        let Value::Object(item) = item else { return response_err("history entry is not an object") };
        let Some(Value::Object(ts)) = item.get("timestamp") else {
            return response_err("history entry has no timestamp object");
        };
        let Some(Value::String(fp_text)) = item.get("fingerprint") else {
            return response_err("history entry has no fingerprint");
        };
        let fingerprint = parse_fingerprint(fp_text)
            .map_err(|e| Error::new(Kind::Response, format!("history entry fingerprint: {}", e.message())))?;
        let start = timestamp(ts.get("start"), "start")?;
        let finish = timestamp(ts.get("finish"), "finish")?;
        entries.push(HistoryEntry { fingerprint, start, finish });
    }
    Ok(entries)
}

/// Checks a 200/409 body in the documented order (docs/wire-format.md, "Verifying a legacy
/// answer"): framing (`response`), the RSASSA-PKCS1-v1_5 SHA-1 signature over `S`
/// (`signature`), then the bounds scan, the parse and the shape of `S` (`response`).
pub fn verify_signed_list(body: &[u8], key: &PublicKey, max_bytes: usize) -> Result<SignedList> {
    let (signed, sig_text) = split_signed(body, max_bytes)?;
    if !key.rsa {
        return err(Kind::Signature, "the notary certificate does not hold an RSA key");
    }
    // Python's b64decode(validate=True): alphabet and padding checked, trailing bits not
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
    );
    let pk = ring::signature::UnparsedPublicKey::new(
        &ring::signature::RSA_PKCS1_1024_8192_SHA1_FOR_LEGACY_USE_ONLY,
        &key.key,
    );
    let signature = match engine.decode(sig_text) {
        Ok(sg) if pk.verify(&signed, &sg).is_ok() => sg,
        _ => return err(Kind::Signature, "signature does not verify against the notary's certificate"),
    };
    let entries = parse_signed_bytes(&signed)?;
    Ok(SignedList { entries, signed_bytes: signed, signature })
}

/// One notary's answer reduced to a vote; `kind` says why.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub vote: Vote,
    /// listed, status-only, mismatch, not-listed, response, signature, inconclusive, status; the
    /// extended kinds (match, ...); or an IO kind (unreachable, timeout, pin).
    pub kind: String,
    pub status: Option<u16>,
    pub detail: String,
    /// A verified extended answer's bytes.
    pub answer: Option<Vec<u8>>,
}

impl Outcome {
    pub(crate) fn new(vote: Vote, kind: &str, status: Option<u16>, detail: impl Into<String>) -> Outcome {
        Outcome { vote, kind: kind.to_string(), status, detail: detail.into(), answer: None }
    }

    pub(crate) fn failure_of(e: &Error, status: Option<u16>) -> Outcome {
        Outcome::new(Vote::Failure, e.kind().as_str(), status, e.message())
    }
}

/// Reduces one response (status and body) to a vote; `wanted` holds the forms of the asked
/// certificate's fingerprint (the asked one first).
pub fn evaluate(status: u16, body: &[u8], wanted: &[Fingerprint], key: &PublicKey, max_bytes: usize) -> Outcome {
    match status {
        200 | 409 => {
            let signed = match verify_signed_list(body, key, max_bytes) {
                Ok(s) => s,
                Err(e) => return Outcome::failure_of(&e, Some(status)),
            };
            if status == 409 {
                return Outcome::new(Vote::Failure, "mismatch", Some(status), "notary sees another certificate");
            }
            if wanted.iter().any(|fp| signed.lists(fp)) {
                return Outcome::new(Vote::Success, "listed", Some(status), "");
            }
            let algs: Vec<Algorithm> = signed.entries.iter().map(|e| e.fingerprint.algorithm).collect();
            if !wanted.iter().any(|fp| algs.contains(&fp.algorithm)) && !signed.entries.is_empty() {
                // a v1 list carries SHA-1 only; asked by SHA-256 alone the pinned 200 decides
                return Outcome::new(
                    Vote::Success,
                    "status-only",
                    Some(status),
                    "list holds no fingerprint of the asked kind",
                );
            }
            Outcome::new(Vote::Failure, "not-listed", Some(status), "200 without the fingerprint in the signed list")
        }
        303 => Outcome::new(Vote::Unreachable, "inconclusive", Some(status), "notary could not decide"),
        _ => Outcome::new(Vote::Unreachable, "status", Some(status), format!("HTTP status {status}")),
    }
}

/// Reduces a whole response (read until the server closed) to a vote; framing errors are
/// failures of kind `response` (the pinned notary itself sent them).
pub fn outcome_from_http(
    raw: &[u8],
    wanted: &[Fingerprint],
    key: &PublicKey,
    max_bytes: usize,
) -> (Outcome, Option<HttpResponse>) {
    match parse_http_response(raw, max_bytes) {
        Err(e) => (Outcome::failure_of(&e, None), None),
        Ok(r) => (evaluate(r.status, &r.body, wanted, key, MAX_RESPONSE_BYTES), Some(r)),
    }
}
