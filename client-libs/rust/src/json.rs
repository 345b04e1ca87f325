//! JSON at the protocol's edges. Parsing is serde_json with `preserve_order` (keys keep their
//! first position, a repeated key its last value, as Python's dict) and `arbitrary_precision`
//! (each number keeps its literal: `443` and `443.0`, big integers). Two rules depend on that:
//!
//! - legacy recipe (a) re-serialises a parsed body the way Python's `json.dumps` does with its
//!   default settings (key order kept, `", "` and `": "` separators, ASCII-only output with
//!   `\uXXXX` escapes, integers as written, floats as Python's `repr`);
//! - the extended format is canonical JSON (RFC 8785) over a subset without floats: a verifier
//!   compares canonical(parse(body)) with the body.

use serde_json::Value;

/// The largest integer canonical JSON accepts (2^53 - 1).
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;
/// Deepest nesting canonical JSON accepts (the root is depth 0).
pub const MAX_CANONICAL_DEPTH: usize = 16;

/// Parses JSON bytes (UTF-8), or `None`.
pub fn parse(bytes: &[u8]) -> Option<Value> {
    serde_json::from_slice(bytes).ok()
}

/// Whether a number literal is written as an integer (no fraction, no exponent).
pub fn is_integer_literal(literal: &str) -> bool {
    let s = literal.strip_prefix('-').unwrap_or(literal);
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

/// The integer a value was written as, when it fits in an i64.
pub fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) if is_integer_literal(&n.to_string()) => n.to_string().parse::<i64>().ok(),
        _ => None,
    }
}

/// A float as Python's `repr` writes it.
pub fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    let e = format!("{:e}", f); // shortest digits: -d.ddde-X
    let neg = e.starts_with('-');
    let e = e.trim_start_matches('-');
    let (mant, exp) = e.split_once('e').unwrap_or((e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let out = if (-4..16).contains(&exp) {
        if exp >= 0 {
            let k = (exp + 1) as usize;
            if digits.len() <= k {
                format!("{}{}.0", digits, "0".repeat(k - digits.len()))
            } else {
                format!("{}.{}", &digits[..k], &digits[k..])
            }
        } else {
            format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
        }
    } else {
        let m = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits };
        let a = exp.abs();
        format!("{}e{}{}{}", m, if exp < 0 { '-' } else { '+' }, if a < 10 { "0" } else { "" }, a)
    };
    if neg {
        format!("-{out}")
    } else {
        out
    }
}

fn py_string(out: &mut String, s: &str) {
    out.push('"');
    for u in s.encode_utf16() {
        match u {
            0x22 => out.push_str("\\\""),
            0x5c => out.push_str("\\\\"),
            0x0a => out.push_str("\\n"),
            0x0d => out.push_str("\\r"),
            0x09 => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            0x20..=0x7e => out.push(u as u8 as char),
            _ => out.push_str(&format!("\\u{u:04x}")),
        }
    }
    out.push('"');
}

fn py_number(literal: &str) -> String {
    if is_integer_literal(literal) {
        let t = literal.trim_start_matches('-');
        if t == "0" {
            "0".into()
        } else {
            literal.to_string()
        }
    } else {
        py_float_repr(literal.parse::<f64>().unwrap_or(f64::NAN))
    }
}

/// `v` serialised as Python's `json.dumps(v)` with default arguments.
pub fn py_dumps(v: &Value) -> String {
    let mut out = String::new();
    py_dump(&mut out, v);
    out
}

fn py_dump(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&py_number(&n.to_string())),
        Value::String(s) => py_string(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_dump(out, x);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_string(out, k);
                out.push_str(": ");
                py_dump(out, x);
            }
            out.push('}');
        }
    }
}

fn canon_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `v` as RFC 8785 canonical JSON, for the subset the extended format uses: objects with ASCII
/// keys, arrays, strings, booleans, null and integers of magnitude at most 2^53 - 1, nested at
/// most 16 deep. `None` when the value is outside the subset.
pub fn canonical(v: &Value) -> Option<String> {
    let mut out = String::new();
    canon(&mut out, v, 0)?;
    Some(out)
}

fn canon(out: &mut String, v: &Value, depth: usize) -> Option<()> {
    if depth > MAX_CANONICAL_DEPTH {
        return None;
    }
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let lit = n.to_string();
            if !is_integer_literal(&lit) {
                return None;
            }
            let x: i64 = lit.parse().ok()?;
            if !(-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&x) {
                return None;
            }
            out.push_str(&x.to_string());
        }
        Value::String(s) => canon_string(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canon(out, x, depth + 1)?;
            }
            out.push(']');
        }
        Value::Object(m) => {
            if !m.keys().all(|k| k.is_ascii()) {
                return None;
            }
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort(); // ASCII keys: byte order is UTF-16 code unit order
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canon_string(out, k);
                out.push(':');
                canon(out, &m[*k], depth + 1)?;
            }
            out.push('}');
        }
    }
    Some(())
}
