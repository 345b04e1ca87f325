//! Every shared vector file through run_vector_case, compared the way the conformance runner
//! compares (each field the case states); no expected failures.

mod common;

use converge::vectors::{run_vector_case, COMPARED_FIELDS, VECTOR_SCHEMAS};
use serde_json::{Map, Value};

fn load(name: &str) -> Map<String, Value> {
    let text = std::fs::read_to_string(common::vectors().join(name)).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v.as_object().unwrap().clone()
}

fn normal(v: &Value) -> Value {
    // numbers compared by value (the vector file's literals against ours)
    serde_json::from_str::<Value>(&v.to_string().replace(".0,", ",")).unwrap_or(v.clone())
}

/// The output fields of a transparency case type beyond the common ones (in the other types
/// `size` and `root` are inputs).
fn type_fields(c: &Map<String, Value>) -> &'static [&'static str] {
    match c.get("type").and_then(Value::as_str) {
        Some("tree") => &["root"],
        Some("checkpoint") => &["size", "root"],
        _ => &[],
    }
}

fn diff(c: &Map<String, Value>, out: &Map<String, Value>) -> Vec<String> {
    COMPARED_FIELDS
        .iter()
        .chain(type_fields(c))
        .filter(|f| c.contains_key(**f) && normal(&c[**f]) != normal(out.get(**f).unwrap_or(&Value::Null)))
        .map(|f| f.to_string())
        .collect()
}

/// The notary signer's canonical JSON: clients never re-serialise.
const NOTARY_ONLY_SCHEMA: &str = "converge-vectors/canonical-json/1";

/// Vector schemas this library does not implement yet (the conformance runner lists them as
/// expected failures in clients.toml); a schema it supports must not stay here.
const NOT_YET_SUPPORTED: &[&str] = &[];

#[test]
fn not_yet_supported_schemas_are_not_supported() {
    for s in NOT_YET_SUPPORTED {
        assert!(!VECTOR_SCHEMAS.contains(s), "{s} is supported now: run its vectors");
    }
}

#[test]
fn every_vector_file_passes() {
    let mut files: Vec<String> = std::fs::read_dir(common::vectors())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().to_string()))
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    assert!(files.len() >= VECTOR_SCHEMAS.len());
    let mut total = 0;
    let mut failures = Vec::new();
    for f in files {
        let doc = load(&f);
        if doc["schema"] == NOTARY_ONLY_SCHEMA {
            continue;
        }
        if NOT_YET_SUPPORTED.contains(&doc["schema"].as_str().unwrap_or("")) {
            eprintln!("{f}: schema {} not implemented yet, not run", doc["schema"]);
            continue;
        }
        assert!(VECTOR_SCHEMAS.contains(&doc["schema"].as_str().unwrap()), "{f}: schema");
        for c in doc["tests"].as_array().unwrap() {
            let c = c.as_object().unwrap();
            let out = run_vector_case(&doc, c).unwrap_or_else(|e| panic!("{f} case {}: {e}", c["id"]));
            let d = diff(c, &out);
            if !d.is_empty() {
                failures.push(format!("{f} case {} ({}): {d:?}: {}", c["id"], c["comment"], Value::Object(out)));
            }
            total += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(total > 600, "only {total} cases");
}

#[test]
fn the_comparison_catches_a_wrong_output() {
    let doc = load("fingerprints.json");
    let c = doc["tests"][0].as_object().unwrap();
    let mut out = run_vector_case(&doc, c).unwrap();
    assert!(diff(c, &out).is_empty());
    out.insert("canonical".into(), Value::String("00".into()));
    assert_eq!(diff(c, &out), vec!["canonical".to_string()]);
    let mut unknown = doc.clone();
    unknown.insert("schema".into(), Value::String("converge-vectors/unknown/1".into()));
    assert!(run_vector_case(&unknown, c).is_err());
}
