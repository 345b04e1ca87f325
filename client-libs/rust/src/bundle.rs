//! `.notary` bundles: one logical notary (an organisation) with its physical hosts, each
//! pinned to its TLS certificate; v1 bundles may also offer the extended answer format with
//! its Ed25519 signing keys.

use crate::error::{err, Kind, Result};
use crate::fingerprint::{hex_lower, Algorithm, Fingerprint};
use crate::json::as_int;
use base64::Engine;
use serde_json::{Map, Value};

/// Largest bundle file accepted (bytes).
pub const MAX_BUNDLE_BYTES: usize = 64 * 1024;
/// Most hosts in one bundle.
pub const MAX_BUNDLE_HOSTS: usize = 16;
/// Most signing keys in one bundle.
pub const MAX_SIGNING_KEYS: usize = 8;
/// The protocol name of the extended answer format.
pub const EXTENDED_FORMAT: &str = "converge-answer/1";
/// The protocol name of the 2011 wire format.
pub const LEGACY_FORMAT: &str = "convergence-v1";

/// A certificate's public key, as the signature checks need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// `true` for RSA (the legacy signatures need RSA).
    pub rsa: bool,
    /// For RSA: the RSAPublicKey DER (the SubjectPublicKeyInfo's bit string).
    pub key: Vec<u8>,
}

/// The public key of a DER certificate, or `None` when it does not parse (as one certificate,
/// nothing after it).
pub fn certificate_key(der: &[u8]) -> Option<PublicKey> {
    let (rest, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    if !rest.is_empty() {
        return None;
    }
    let spki = cert.public_key();
    let rsa = spki.algorithm.algorithm.to_id_string() == "1.2.840.113549.1.1.1";
    Some(PublicKey { rsa, key: spki.subject_public_key.data.to_vec() })
}

/// One physical host of a notary.
#[derive(Debug, Clone)]
pub struct NotaryHost {
    pub host: String,
    pub ssl_port: u16,
    pub http_port: u16,
    /// The PEM text of its certificate, as in the bundle.
    pub certificate_pem: String,
    /// The certificate's DER bytes.
    pub certificate_der: Vec<u8>,
    /// The certificate's public key (verifies legacy signatures).
    pub key: PublicKey,
    /// SHA-1 of the certificate: the connection's pin.
    pub pin: Fingerprint,
}

/// One Ed25519 key of the extended format.
#[derive(Debug, Clone)]
pub struct SigningKey {
    pub key_id: String,
    /// The raw 32-byte public key.
    pub public_key: Vec<u8>,
    /// `current` or `retired`.
    pub current: bool,
    /// Retired keys: trusted until this unix time (seconds).
    pub valid_until: i64,
}

impl SigningKey {
    /// A current key always, a retired one while `now <= valid_until`.
    pub fn trusted_at(&self, now: i64) -> bool {
        self.current || now <= self.valid_until
    }
}

/// One logical notary, parsed from a `.notary` file.
#[derive(Debug, Clone)]
pub struct Bundle {
    pub name: String,
    pub version: u8,
    pub hosts: Vec<NotaryHost>,
    pub bundle_location: Option<String>,
    pub region: Option<String>,
    pub protocols: Vec<String>,
    pub signing_keys: Vec<SigningKey>,
    /// The notary's transparency log, its witnesses and how many cosignatures a client
    /// requires (`None`: no log; docs/transparency.md, "Clients").
    pub transparency: Option<crate::transparency::LogPolicy>,
}

impl Bundle {
    /// Whether the bundle advertises `converge-answer/1` and carries its signing keys.
    pub fn offers_extended(&self) -> bool {
        self.protocols.iter().any(|p| p == EXTENDED_FORMAT) && !self.signing_keys.is_empty()
    }
}

fn bundle_err<T>(message: impl Into<String>) -> Result<T> {
    err(Kind::Bundle, message)
}

pub(crate) fn host_ok(host: &str) -> bool {
    (1..=253).contains(&host.len())
        && host.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
}

fn is_pem_space(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\x0c' | '\r' | ' ')
}

/// The DER of a text holding exactly one PEM certificate (the bundle's strict form).
fn pem_der(pem: &str) -> Option<std::result::Result<Vec<u8>, ()>> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let s = pem.trim_matches(is_pem_space);
    let body = s.strip_prefix(BEGIN)?.strip_suffix(END)?;
    let body = body.strip_prefix("\r\n").or_else(|| body.strip_prefix('\n'))?;
    if body.is_empty()
        || !body.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=' | b'\r' | b'\n'))
    {
        return None;
    }
    let b64: String = body.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    Some(base64::engine::general_purpose::STANDARD.decode(b64).map_err(|_| ()))
}

fn port(obj: &Map<String, Value>, key: &str) -> Result<u16> {
    match obj.get(key).and_then(as_int) {
        Some(n) if (1..=65535).contains(&n) => Ok(n as u16),
        _ => bundle_err(format!("{key} must be an integer port 1..65535")),
    }
}

fn parse_host(v: &Value) -> Result<NotaryHost> {
    let Value::Object(obj) = v else { return bundle_err("a host entry must be an object") };
    let host = match obj.get("host") {
        Some(Value::String(h)) if host_ok(h) => h.clone(),
        _ => return bundle_err("host must be a DNS name or an IP address"),
    };
    let pem = match obj.get("certificate") {
        Some(Value::String(p)) => p.clone(),
        _ => return bundle_err(format!("certificate of {host} is not one PEM certificate")),
    };
    let der = match pem_der(&pem) {
        None => return bundle_err(format!("certificate of {host} is not one PEM certificate")),
        Some(Err(())) => return bundle_err(format!("certificate of {host} does not parse")),
        Some(Ok(d)) => d,
    };
    let Some(key) = certificate_key(&der) else {
        return bundle_err(format!("certificate of {host} does not parse"));
    };
    let ssl_port = port(obj, "ssl_port")?;
    let http_port = port(obj, "http_port")?;
    let pin = Fingerprint::of(&der, Algorithm::Sha1);
    Ok(NotaryHost { host, ssl_port, http_port, certificate_pem: pem, certificate_der: der, key, pin })
}

/// The y coordinates, 32 bytes little-endian with the top bit (x's sign) clear, of the eight
/// points of small order: 0, 1, p - 1, y8 and p - y8 (the identity has y = 1).
const SMALL_ORDER_Y: [[u8; 32]; 5] = [
    [0; 32],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [
        0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
    ],
    [
        0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0, 0xd5, 0xdf,
        0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05,
    ],
    [
        0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f, 0x2a, 0x20,
        0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a,
    ],
];

/// Why the raw Ed25519 public key `raw` must not be trusted, or `None`: not 32 bytes, its y
/// (the key with bit 255, x's sign, cleared) at or above p = 2^255 - 19 ("not in canonical
/// form"), or the y of a point of small order, under which some Ed25519 libraries accept
/// `R = identity, S = 0` as a signature of any message. Plain byte comparisons; keys off the
/// curve are not refused here.
pub fn weak_key(raw: &[u8]) -> Option<&'static str> {
    let Ok(raw) = <[u8; 32]>::try_from(raw) else { return Some("an Ed25519 public key has 32 bytes") };
    let mut y = raw;
    y[31] &= 0x7f;
    if y[31] == 0x7f && y[1..31].iter().all(|&b| b == 0xff) && y[0] >= 0xed {
        return Some("an Ed25519 public key not in canonical form");
    }
    if SMALL_ORDER_Y.contains(&y) {
        return Some("an Ed25519 public key of small order");
    }
    None
}

/// The key id of a raw Ed25519 public key: the first 8 bytes of its SHA-256, lower-case hex.
pub fn key_id_of(raw: &[u8]) -> String {
    hex_lower(&ring::digest::digest(&ring::digest::SHA256, raw).as_ref()[..8])
}

pub(crate) fn unb64url(text: &str) -> Option<Vec<u8>> {
    if text.len() % 4 == 1 || !text.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_') {
        return None;
    }
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone)
            .with_decode_allow_trailing_bits(true),
    );
    engine.decode(text).ok()
}

pub(crate) fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn parse_signing_key(v: &Value) -> Result<SigningKey> {
    let Value::Object(k) = v else { return bundle_err("a signing key entry must be an object") };
    for name in k.keys() {
        if !matches!(name.as_str(), "alg" | "key_id" | "public_key" | "status" | "valid_until") {
            return bundle_err(format!("unknown signing key field {name:?}"));
        }
    }
    if k.get("alg").and_then(Value::as_str) != Some("ed25519") {
        return bundle_err("signing key alg must be ed25519");
    }
    let Some(raw) = k.get("public_key").and_then(Value::as_str).and_then(unb64url) else {
        return bundle_err("signing key public_key must be unpadded base64url");
    };
    if raw.len() != 32 {
        return bundle_err("an Ed25519 public key has 32 bytes");
    }
    if let Some(weak) = weak_key(&raw) {
        return bundle_err(format!("signing key: {weak}"));
    }
    let kid = k.get("key_id").and_then(Value::as_str).map(str::to_string);
    if kid.as_deref() != Some(key_id_of(&raw).as_str()) {
        return bundle_err(format!("signing key id {kid:?} does not match its public key"));
    }
    let until = k.get("valid_until");
    match k.get("status").and_then(Value::as_str) {
        Some("current") => {
            if matches!(until, Some(u) if !u.is_null()) {
                return bundle_err("a current signing key has no valid_until");
            }
            Ok(SigningKey { key_id: kid.unwrap_or_default(), public_key: raw, current: true, valid_until: 0 })
        }
        Some("retired") => match until.and_then(as_int) {
            Some(n) if n > 0 && n <= crate::json::MAX_SAFE_INTEGER => {
                Ok(SigningKey { key_id: kid.unwrap_or_default(), public_key: raw, current: false, valid_until: n })
            }
            _ => bundle_err("a retired signing key needs valid_until (unix seconds)"),
        },
        _ => bundle_err("signing key status must be current or retired"),
    }
}

/// Parses a list of signing key entries (a bundle's `signing_keys`).
pub fn parse_signing_keys(v: &Value) -> Result<Vec<SigningKey>> {
    let Value::Array(list) = v else { return bundle_err("signing_keys must be a non-empty list") };
    if list.is_empty() {
        return bundle_err("signing_keys must be a non-empty list");
    }
    if list.len() > MAX_SIGNING_KEYS {
        return bundle_err(format!("more than {MAX_SIGNING_KEYS} signing keys"));
    }
    let mut out: Vec<SigningKey> = Vec::new();
    for x in list {
        let k = parse_signing_key(x)?;
        if out.iter().any(|o| o.key_id == k.key_id) {
            return bundle_err("signing key ids repeat");
        }
        out.push(k);
    }
    if out.iter().filter(|k| k.current).count() != 1 {
        return bundle_err("signing_keys must hold exactly one current key");
    }
    Ok(out)
}

fn parse_protocols(v: &Value) -> Result<Vec<String>> {
    let Value::Array(list) = v else { return bundle_err("protocols must be a list of at most 16 strings") };
    if list.len() > 16 {
        return bundle_err("protocols must be a list of at most 16 strings");
    }
    list.iter()
        .map(|x| match x.as_str() {
            Some(s) if (1..=64).contains(&s.chars().count()) => Ok(s.to_string()),
            _ => bundle_err("protocols must be a list of short strings"),
        })
        .collect()
}

/// Parses and validates a `.notary` file (v1, or the version-less v0 form).
pub fn parse_bundle(data: &[u8]) -> Result<Bundle> {
    if data.len() > MAX_BUNDLE_BYTES {
        return bundle_err(format!("bundle larger than {MAX_BUNDLE_BYTES} bytes"));
    }
    let Some(doc) = crate::json::parse(data) else { return bundle_err("bundle is not JSON") };
    let Value::Object(obj) = &doc else { return bundle_err("bundle is not a JSON object") };
    let version = match obj.get("version") {
        None => 0,
        Some(Value::Number(n)) => {
            let x = n.to_string().parse::<f64>().unwrap_or(f64::NAN);
            if x == 0.0 {
                0
            } else if x == 1.0 {
                1
            } else {
                return bundle_err("unsupported bundle version");
            }
        }
        Some(_) => return bundle_err("unsupported bundle version"),
    };
    if version == 0 {
        let h = parse_host(&doc)?;
        return Ok(Bundle {
            name: h.host.clone(),
            version: 0,
            hosts: vec![h],
            bundle_location: None,
            region: None,
            protocols: vec![],
            signing_keys: vec![],
            transparency: None,
        });
    }
    let name = match obj.get("name") {
        Some(Value::String(n)) if !n.trim().is_empty() && n.chars().count() <= 200 => n.clone(),
        _ => return bundle_err("name must be a non-empty string"),
    };
    let hosts = match obj.get("hosts") {
        Some(Value::Array(h)) if !h.is_empty() => h,
        _ => return bundle_err("hosts must be a non-empty list"),
    };
    if hosts.len() > MAX_BUNDLE_HOSTS {
        return bundle_err(format!("more than {MAX_BUNDLE_HOSTS} hosts"));
    }
    let bundle_location = match obj.get("bundle_location") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.starts_with("https://") && s.ends_with(".notary") && s.chars().count() <= 2048 => {
            Some(s.clone())
        }
        _ => return bundle_err("bundle_location must be an https:// URL ending in .notary"),
    };
    let region = match obj.get("region") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.len() == 2 && s.bytes().all(|c| c.is_ascii_alphabetic()) => Some(s.to_uppercase()),
        _ => return bundle_err("region must be an ISO-3166 alpha-2 code"),
    };
    let hosts = hosts.iter().map(parse_host).collect::<Result<Vec<_>>>()?;
    let protocols = match obj.get("protocols") {
        Some(p) => parse_protocols(p)?,
        None => vec![],
    };
    let signing_keys = match obj.get("signing_keys") {
        Some(k) => parse_signing_keys(k)?,
        None => vec![],
    };
    if protocols.iter().any(|p| p == EXTENDED_FORMAT) && signing_keys.is_empty() {
        return bundle_err(format!("protocols lists {EXTENDED_FORMAT} but the bundle has no signing_keys"));
    }
    let transparency = match obj.get("transparency") {
        Some(t) => Some(crate::transparency::parse_log_policy(t)?),
        None => None,
    };
    Ok(Bundle { name, version: 1, hosts, bundle_location, region, protocols, signing_keys, transparency })
}
