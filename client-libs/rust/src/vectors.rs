//! The shared test vectors (client-libs/vectors/*.json) through this library:
//! [`run_vector_case`] computes this implementation's output for one case, in the fields
//! CLIENT-CLI.md names. The conformance CLI prints these outputs; the tests compare them.

use crate::bundle::{certificate_key, parse_bundle, parse_signing_keys, PublicKey};
use crate::config::load_config_with;
use crate::extended::{trusted_keys, verify_answer, Expect, DEFAULT_MAX_SKEW};
use crate::fingerprint::{from_hex, parse_fingerprint};
use crate::json::as_int;
use crate::legacy::{outcome_from_http, request_bytes, verify_signed_list, MAX_RESPONSE_BYTES};
use crate::policy::{cache_decision, decide, parse_policy, settled, Vote};
use crate::transparency::{
    b64, check_member, leaf_hash, open_checkpoint, parse_log_policy, parse_note_key, tree_root, verify_consistency,
    verify_inclusion, LogPolicy, KEY_COSIGNATURE, KEY_ED25519,
};
use crate::Error;
use base64::Engine;
use serde_json::{json, Map, Value};

/// The vector schemas this implementation understands.
pub const VECTOR_SCHEMAS: &[&str] = &[
    "converge-vectors/fingerprints/1",
    "converge-vectors/requests/1",
    "converge-vectors/legacy-signatures/1",
    "converge-vectors/notary-responses/1",
    "converge-vectors/bundles/1",
    "converge-vectors/consensus/1",
    "converge-vectors/cache/1",
    "converge-vectors/extended-answers/1",
    "converge-vectors/config/1",
    "converge-vectors/transparency/1",
];

/// The fields the runner compares, when the case states them.
pub const COMPARED_FIELDS: &[&str] = &[
    "result",
    "error",
    "kind",
    "algorithm",
    "canonical",
    "request",
    "signed_bytes",
    "name",
    "version",
    "hosts",
    "verdict",
    "extended",
    "enabled",
];

fn bytes_of(c: &Map<String, Value>, name: &str) -> Result<Vec<u8>, String> {
    if let Some(h) = c.get(&format!("{name}_hex")).and_then(Value::as_str) {
        return from_hex(h).ok_or_else(|| format!("{name}_hex is not hex"));
    }
    c.get(name).and_then(Value::as_str).map(|s| s.as_bytes().to_vec()).ok_or_else(|| format!("case has no {name}"))
}

fn text<'a>(c: &'a Map<String, Value>, name: &str) -> &'a str {
    c.get(name).and_then(Value::as_str).unwrap_or("")
}

fn num(v: Option<&Value>) -> Option<f64> {
    match v {
        Some(Value::Number(n)) => n.to_string().parse().ok(),
        _ => None,
    }
}

fn vector_key(doc: &Map<String, Value>, name: &str) -> Result<PublicKey, String> {
    let pem = doc
        .get("certificates")
        .and_then(|c| c.get(name))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("certificate {name:?} missing"))?;
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD.decode(b64.trim()).map_err(|e| e.to_string())?;
    certificate_key(&der).ok_or_else(|| format!("certificate {name:?} does not parse"))
}

fn invalid(out: &mut Map<String, Value>, e: &Error) {
    out.insert("result".into(), json!("invalid"));
    out.insert("error".into(), json!(e.kind().as_str()));
}

/// This implementation's output for one case of a vector file (`doc` is the whole file). An
/// `Err` means the case itself is unusable (a harness problem), never a rule violation.
pub fn run_vector_case(doc: &Map<String, Value>, c: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    out.insert("id".into(), c.get("id").cloned().unwrap_or(Value::Null));
    match doc.get("schema").and_then(Value::as_str).unwrap_or("") {
        "converge-vectors/fingerprints/1" => match parse_fingerprint(text(c, "input")) {
            Ok(fp) => {
                out.insert("result".into(), json!("valid"));
                out.insert("algorithm".into(), json!(fp.algorithm.as_str()));
                out.insert("canonical".into(), json!(fp.colon_hex()));
            }
            Err(e) => invalid(&mut out, &e),
        },
        "converge-vectors/requests/1" => {
            let r = parse_fingerprint(text(c, "fingerprint")).and_then(|fp| {
                let port = c.get("port").and_then(as_int).filter(|p| (0..=u16::MAX as i64).contains(p));
                let Some(port) = port else { return Err(Error::new(crate::Kind::Target, "invalid target port")) };
                let ip = text(c, "ip");
                request_bytes(text(c, "host"), port as u16, &fp, (!ip.is_empty()).then_some(ip))
            });
            match r {
                Ok(req) => {
                    out.insert("result".into(), json!("valid"));
                    out.insert("request".into(), json!(String::from_utf8_lossy(&req)));
                }
                Err(e) => invalid(&mut out, &e),
            }
        }
        "converge-vectors/legacy-signatures/1" => {
            let body = bytes_of(c, "body")?;
            let key = vector_key(doc, text(c, "certificate"))?;
            match verify_signed_list(&body, &key, MAX_RESPONSE_BYTES) {
                Ok(s) => {
                    out.insert("result".into(), json!("valid"));
                    out.insert("signed_bytes".into(), json!(String::from_utf8_lossy(&s.signed_bytes)));
                }
                Err(e) => invalid(&mut out, &e),
            }
        }
        "converge-vectors/notary-responses/1" => {
            let mut wanted = Vec::new();
            for x in c.get("fingerprints").and_then(Value::as_array).cloned().unwrap_or_default() {
                match parse_fingerprint(x.as_str().unwrap_or("")) {
                    Ok(fp) => wanted.push(fp),
                    Err(e) => {
                        invalid(&mut out, &e);
                        return Ok(out);
                    }
                }
            }
            let raw = bytes_of(c, "raw")?;
            let key = vector_key(doc, text(c, "certificate"))?;
            let (o, _) = outcome_from_http(&raw, &wanted, &key, MAX_RESPONSE_BYTES);
            out.insert("result".into(), json!(o.vote.as_str()));
            out.insert("kind".into(), json!(o.kind));
        }
        "converge-vectors/bundles/1" => match parse_bundle(&bytes_of(c, "bundle")?) {
            Ok(b) => {
                out.insert("result".into(), json!("valid"));
                out.insert("name".into(), json!(b.name));
                out.insert("version".into(), json!(b.version));
                let hosts: Vec<Value> = b
                    .hosts
                    .iter()
                    .map(|h| json!({"host": h.host, "ssl_port": h.ssl_port, "http_port": h.http_port, "pin": h.pin.colon_hex()}))
                    .collect();
                out.insert("hosts".into(), Value::Array(hosts));
            }
            Err(e) => invalid(&mut out, &e),
        },
        "converge-vectors/consensus/1" => {
            let policy = match parse_policy(text(c, "policy")) {
                Ok(p) => p,
                Err(e) => {
                    invalid(&mut out, &e);
                    return Ok(out);
                }
            };
            let votes: Vec<Vote> = c
                .get("votes")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|v| Vote::parse(v.as_str().unwrap_or("")))
                .collect::<crate::Result<_>>()
                .map_err(|e| e.to_string())?;
            let stand_aside = c.get("stand_aside").and_then(Value::as_bool).unwrap_or(false);
            let pending = c.get("pending").and_then(as_int).unwrap_or(0) as usize;
            let word = |t: bool| if t { "trusted" } else { "untrusted" };
            let r = if pending > 0 {
                settled(policy, &votes, pending, stand_aside).map(word).unwrap_or("unsettled")
            } else {
                word(decide(policy, &votes, stand_aside))
            };
            out.insert("result".into(), json!(r));
        }
        "converge-vectors/cache/1" => {
            let ts = c.get("timestamp").and_then(as_int);
            let now = num(c.get("now")).unwrap_or(0.0);
            let lifetime = num(c.get("lifetime"));
            out.insert("result".into(), json!(cache_decision(ts, now, lifetime).as_str()));
        }
        "converge-vectors/extended-answers/1" => extended_case(doc, c, &mut out)?,
        "converge-vectors/transparency/1" => transparency_case(doc, c, &mut out)?,
        "converge-vectors/config/1" => match config_case(c) {
            Ok(names) => {
                out.insert("result".into(), json!("valid"));
                out.insert("enabled".into(), json!(names));
            }
            Err(e) => invalid(&mut out, &e),
        },
        s => return Err(format!("unknown vector schema {s:?}")),
    }
    Ok(out)
}

fn config_case(c: &Map<String, Value>) -> crate::Result<Vec<String>> {
    let root =
        std::env::temp_dir().join(format!("converge-vector-{}-{}", std::process::id(), crate::extended::new_nonce()));
    let setup = || -> std::io::Result<()> {
        for (rel, t) in c.get("files").and_then(Value::as_object).cloned().unwrap_or_default() {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent"))?;
            std::fs::write(&p, t.as_str().unwrap_or(""))?;
        }
        for (rel, target) in c.get("links").and_then(Value::as_object).cloned().unwrap_or_default() {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent"))?;
            std::os::unix::fs::symlink(target.as_str().unwrap_or(""), &p)?;
        }
        Ok(())
    };
    std::fs::create_dir_all(&root).and_then(|_| setup()).map_err(|e| Error::new(crate::Kind::Config, e.to_string()))?;
    let r = load_config_with(Some(&root), &|_| None).and_then(|cfg| cfg.notaries());
    let _ = std::fs::remove_dir_all(&root);
    let mut names: Vec<String> = r?.into_iter().map(|b| b.name).collect();
    names.sort();
    Ok(names)
}

fn extended_case(doc: &Map<String, Value>, c: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), String> {
    match text(c, "type") {
        "bundle" => match parse_bundle(&bytes_of(c, "bundle")?) {
            Ok(b) => {
                out.insert("result".into(), json!("valid"));
                out.insert("extended".into(), json!(b.offers_extended()));
            }
            Err(e) => {
                out.insert("result".into(), json!("invalid"));
                out.insert("kind".into(), json!(e.kind().as_str()));
            }
        },
        "answer" => {
            let empty = Map::new();
            let exp = c.get("expect").and_then(Value::as_object).unwrap_or(&empty);
            let all = doc.get("signing_keys").and_then(Value::as_object).cloned().unwrap_or_default();
            let entries: Vec<Value> = c
                .get("bundle_keys")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|n| all.get(n.as_str().unwrap_or("")).cloned().unwrap_or(Value::Null))
                .collect();
            let entries = Value::Array(entries);
            let keys = match parse_signing_keys(&entries) {
                Ok(k) => k,
                Err(e) => {
                    invalid(out, &e);
                    return Ok(());
                }
            };
            let now = exp.get("now").and_then(as_int).unwrap_or(0);
            let mut e = Expect {
                host: text(exp, "host").to_string(),
                port: exp.get("port").and_then(as_int).unwrap_or(0),
                nonce: text(exp, "nonce").to_string(),
                now: Some(now),
                max_skew: exp.get("max_skew").and_then(as_int).unwrap_or(DEFAULT_MAX_SKEW),
                ..Expect::default()
            };
            if exp.contains_key("ip") {
                e.bind_ip = true;
                e.ip = text(exp, "ip").to_string();
            }
            if let Some(fp) = exp.get("fingerprint").and_then(Value::as_str) {
                match parse_fingerprint(fp) {
                    Ok(f) => e.fingerprint = Some(f),
                    Err(err) => {
                        invalid(out, &err);
                        return Ok(());
                    }
                }
            }
            match verify_answer(&bytes_of(c, "answer")?, &trusted_keys(&keys, now), &e) {
                Ok(v) => {
                    out.insert("result".into(), json!("valid"));
                    out.insert("verdict".into(), json!(v.verdict));
                }
                Err(r) => {
                    out.insert("result".into(), json!("rejected"));
                    out.insert("kind".into(), json!(r.reason.as_str()));
                }
            }
        }
        t => return Err(format!("unknown case type {t:?}")),
    }
    Ok(())
}

fn hashes(v: Option<&Value>) -> Option<Vec<Vec<u8>>> {
    match v? {
        Value::String(s) => Some(vec![b64(s)?]),
        Value::Array(l) => l.iter().map(|x| x.as_str().and_then(b64)).collect(),
        _ => None,
    }
}

fn unsigned(c: &Map<String, Value>, name: &str) -> Result<u64, String> {
    c.get(name).and_then(Value::as_u64).ok_or_else(|| format!("case has no {name}"))
}

/// One case of `converge-vectors/transparency/1` (the output fields of CLIENT-CLI.md).
fn transparency_case(
    doc: &Map<String, Value>,
    c: &Map<String, Value>,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    let b64text = |h: &[u8]| base64::engine::general_purpose::STANDARD.encode(h);
    let verdict = |ok: bool| json!(if ok { "valid" } else { "invalid" });
    match text(c, "type") {
        "tree" => {
            let size = unsigned(c, "size")? as usize;
            let entries = doc.get("entries").and_then(Value::as_array).ok_or("no entries")?;
            let leaves = entries
                .iter()
                .take(size)
                .map(|e| e.as_str().and_then(b64).map(|e| leaf_hash(&e)))
                .collect::<Option<Vec<_>>>()
                .filter(|l| l.len() == size)
                .ok_or("entries are not base64")?;
            out.insert("result".into(), json!("valid"));
            out.insert("root".into(), json!(b64text(&tree_root(&leaves))));
        }
        "inclusion" => {
            let (leaf, root, proof) = (hashes(c.get("leaf")), hashes(c.get("root")), hashes(c.get("proof")));
            let ok = match (leaf, root, proof) {
                (Some(l), Some(r), Some(p)) if l.len() == 1 && r.len() == 1 => {
                    verify_inclusion(&l[0], unsigned(c, "index")?, unsigned(c, "size")?, &p, &r[0])
                }
                _ => false,
            };
            out.insert("result".into(), verdict(ok));
        }
        "consistency" => {
            let roots = (hashes(c.get("old_root")), hashes(c.get("new_root")), hashes(c.get("proof")));
            let ok = match roots {
                (Some(o), Some(n), Some(p)) if o.len() == 1 && n.len() == 1 => {
                    verify_consistency(unsigned(c, "old_size")?, unsigned(c, "new_size")?, &o[0], &n[0], &p)
                }
                _ => false,
            };
            out.insert("result".into(), verdict(ok));
        }
        "checkpoint" => {
            let log = parse_note_key(text(c, "log"), KEY_ED25519)?;
            let witnesses = c
                .get("witnesses")
                .and_then(Value::as_array)
                .ok_or("no witnesses")?
                .iter()
                .map(|w| parse_note_key(w.as_str().unwrap_or(""), KEY_COSIGNATURE))
                .collect::<Result<Vec<_>, _>>()?;
            let policy =
                LogPolicy { log, url: None, witnesses, min_cosignatures: unsigned(c, "min_cosignatures")? as usize };
            match open_checkpoint(text(c, "checkpoint"), &policy) {
                Ok(ck) => {
                    out.insert("result".into(), json!("valid"));
                    out.insert("size".into(), json!(ck.size));
                    out.insert("root".into(), json!(b64text(&ck.root)));
                }
                Err(r) => {
                    out.insert("result".into(), json!("invalid"));
                    out.insert("kind".into(), json!(r.reason.as_str()));
                }
            }
        }
        "answer" => {
            let exp = c.get("expect").and_then(Value::as_object).ok_or("no expect")?;
            let fp_text = exp
                .get("sha256")
                .and_then(Value::as_str)
                .or_else(|| exp.get("sha1").and_then(Value::as_str))
                .unwrap_or("");
            let fp = parse_fingerprint(fp_text).map_err(|e| e.to_string())?;
            let policy = parse_log_policy(c.get("bundle").ok_or("no bundle")?).map_err(|e| e.to_string())?;
            let member = c.get("transparency").filter(|m| !m.is_null()).map(|m| m.to_string().into_bytes());
            let mut target = Map::new();
            for k in ["host", "port", "ip"] {
                target.insert(k.into(), exp.get(k).cloned().unwrap_or(Value::Null));
            }
            match check_member(member.as_deref(), &policy, &target, &fp) {
                Ok(_) => {
                    out.insert("result".into(), json!("valid"));
                }
                Err(r) => {
                    out.insert("result".into(), json!("rejected"));
                    out.insert("kind".into(), json!(r.reason.as_str()));
                }
            }
        }
        t => return Err(format!("unknown transparency case type {t:?}")),
    }
    Ok(())
}
