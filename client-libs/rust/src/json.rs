//! Reading JSON: serde_json, strictly (one RFC 8259 text, UTF-8; `NaN`, comments, trailing
//! commas and non-string member names refused; the last of repeated member names counts), and
//! the bounds scan every client runs over verified bytes before parsing them
//! (docs/wire-format.md, "The bounds scan").

use serde_json::{Map, Value};

/// The largest integer a bundle's `valid_until` may hold (2^53 - 1).
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;
/// The most levels of `[`/`{` open at once in verified bytes (the top-level object is 1).
pub const MAX_DEPTH: usize = 32;
/// The most digits of a number in verified bytes (every number is an integer).
pub const MAX_INTEGER_DIGITS: usize = 15;

/// Parses one JSON text, or `None`.
pub fn parse(bytes: &[u8]) -> Option<Value> {
    serde_json::from_slice(bytes).ok()
}

/// Parses one JSON text that must be an object, or `None`.
pub fn parse_object(bytes: &[u8]) -> Option<Map<String, Value>> {
    match parse(bytes)? {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

/// The integer a value was written as (no fraction or exponent), when it fits in an i64.
pub fn as_int(v: &Value) -> Option<i64> {
    v.as_i64()
}

fn is_integer_token(t: &[u8]) -> bool {
    let d = t.strip_prefix(b"-").unwrap_or(t);
    !d.is_empty() && d.len() <= MAX_INTEGER_DIGITS && d.iter().all(u8::is_ascii_digit) && (d == b"0" || d[0] != b'0')
}

/// The bounds scan: outside strings, at most [`MAX_DEPTH`] levels open at once, and every
/// number token (a maximal run of `-+.0-9eE` starting with `-` or a digit) an integer of at
/// most [`MAX_INTEGER_DIGITS`] digits. Everything else is left to the parser.
pub fn bounds_ok(b: &[u8]) -> bool {
    let (mut depth, mut i) = (0usize, 0usize);
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            c if c == b'-' || c.is_ascii_digit() => {
                let end = b[i..]
                    .iter()
                    .position(|c| !matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .map_or(b.len(), |n| i + n);
                if !is_integer_token(&b[i..end]) {
                    return false;
                }
                i = end - 1;
            }
            _ => {}
        }
        i += 1;
    }
    true
}
