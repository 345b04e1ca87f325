//! Certificate fingerprints: SHA-1 (the 2011 protocol) or SHA-256.

use crate::error::{err, Kind, Result};
use std::fmt;

/// Bounds the text form of a fingerprint (in characters).
pub const MAX_FINGERPRINT_TEXT: usize = 200;

/// The digest algorithm of a fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Sha1,
    Sha256,
}

impl Algorithm {
    /// `sha1` or `sha256`.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Sha1 => "sha1",
            Algorithm::Sha256 => "sha256",
        }
    }
}

/// A certificate digest with its algorithm.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    pub algorithm: Algorithm,
    pub digest: Vec<u8>,
}

impl Fingerprint {
    /// The canonical form: upper-case hex, a colon between bytes.
    pub fn colon_hex(&self) -> String {
        colon_hex(&self.digest)
    }

    /// The fingerprint of a DER certificate.
    pub fn of(der: &[u8], algorithm: Algorithm) -> Fingerprint {
        let alg = match algorithm {
            Algorithm::Sha1 => &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
            Algorithm::Sha256 => &ring::digest::SHA256,
        };
        Fingerprint { algorithm, digest: ring::digest::digest(alg, der).as_ref().to_vec() }
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.colon_hex())
    }
}

pub(crate) fn colon_hex(bytes: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        s.push(D[(b >> 4) as usize] as char);
        s.push(D[(b & 15) as usize] as char);
    }
    s
}

pub(crate) fn hex_lower(bytes: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(D[(b >> 4) as usize] as char);
        s.push(D[(b & 15) as usize] as char);
    }
    s
}

pub(crate) fn from_hex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

/// Parses 40 (SHA-1) or 64 (SHA-256) hex digits in any case, either with no separators or with
/// a colon between every pair; surrounding spaces, tabs, CR and LF are ignored. Anything else
/// is an error of kind `fingerprint`.
pub fn parse_fingerprint(text: &str) -> Result<Fingerprint> {
    if text.chars().count() > MAX_FINGERPRINT_TEXT {
        return err(Kind::Fingerprint, format!("fingerprint longer than {MAX_FINGERPRINT_TEXT} characters"));
    }
    let s = text.trim_matches(|c| c == ' ' || c == '\t' || c == '\r' || c == '\n');
    if s.is_empty() {
        return err(Kind::Fingerprint, "empty fingerprint");
    }
    let digits: String = if s.contains(':') {
        let mut out = String::new();
        for g in s.split(':') {
            if g.len() != 2 || !g.bytes().all(|c| c.is_ascii_hexdigit()) {
                return err(Kind::Fingerprint, "colon-separated fingerprints need two hex digits per byte");
            }
            out.push_str(g);
        }
        out
    } else {
        if !s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return err(Kind::Fingerprint, "fingerprint contains a non-hex character");
        }
        if s.len() % 2 != 0 {
            return err(Kind::Fingerprint, "odd number of hex digits");
        }
        s.to_string()
    };
    let digest = from_hex(&digits).ok_or_else(|| crate::Error::new(Kind::Fingerprint, "not hex"))?;
    match digest.len() {
        20 => Ok(Fingerprint { algorithm: Algorithm::Sha1, digest }),
        32 => Ok(Fingerprint { algorithm: Algorithm::Sha256, digest }),
        n => err(Kind::Fingerprint, format!("a fingerprint has 20 (SHA-1) or 32 (SHA-256) bytes, not {n}")),
    }
}
