//! One hostile notary among honest ones (issue 31): a genuine notary and one that answers each
//! hostile form. Every check returns a verdict; the genuine notary's vote is intact; the hostile
//! one gets the vote the contract names (its twin, the same notary answering within the
//! bounds, gets the other vote).

mod common;

use common::{
    config_dir, genuine_fp, legacy_list, notary_cert, notary_key, signed_list, FakeNotary, Forms, LegacyForm, Mode,
    TextForm,
};
use converge::Client;
use serde_json::json;
use std::collections::BTreeMap;

const OTHER: &str = "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33";

/// `levels` open brackets (below the top-level object) and their closes.
fn nested(levels: usize) -> String {
    format!("{}{}", "[".repeat(levels), "]".repeat(levels))
}

fn entry_list(first: &str, last: &str) -> String {
    let (a, b) = (legacy_list("", first), legacy_list("", last));
    // {"fingerprintList": [A], "fingerprintList": [B]}
    format!("{}, {}", &a[..a.len() - 1], &b[1..])
}

const LEGACY: &[(&str, LegacyForm, &str)] = &[
    ("genuine", |g, sign| signed_list(&legacy_list("", g), sign), "success/listed"),
    (
        "list spliced after the signature",
        |g, sign| {
            let b = signed_list(&legacy_list("", OTHER), sign);
            let l = legacy_list("", g);
            format!("{}, {}", &b[..b.len() - 1], &l[1..])
        },
        "failure/response",
    ),
    (
        "member after the signature",
        |g, sign| {
            let b = signed_list(&legacy_list("", g), sign);
            format!("{}, \"x\": 1}}", &b[..b.len() - 1])
        },
        "failure/response",
    ),
    ("byte after the brace", |g, sign| signed_list(&legacy_list("", g), sign) + "\n", "failure/response"),
    (
        "malformed JSON after the signature",
        |g, sign| {
            let b = signed_list(&legacy_list("", g), sign);
            format!("{}\", ]}}", &b[..b.len() - 2])
        },
        "failure/response",
    ),
    (
        "second signature member",
        |g, sign| {
            let s = legacy_list("", g);
            format!("{}, \"signature\": \"{}\", \"signature\": \"{}\"}}", &s[..s.len() - 1], sign(&s), sign(&s))
        },
        "failure/signature",
    ),
    (
        "signature over other bytes",
        |g, sign| {
            let s = legacy_list("", g);
            format!("{}, \"signature\": \"{}\"}}", &s[..s.len() - 1], sign(&format!("{s} ")))
        },
        "failure/signature",
    ),
    ("repeated list, the last counts", |g, sign| signed_list(&entry_list(OTHER, g), sign), "success/listed"),
    ("repeated list, the last counts (twin)", |g, sign| signed_list(&entry_list(g, OTHER), sign), "failure/not-listed"),
    (
        "15-digit integer",
        |g, sign| signed_list(&legacy_list(&format!("\"x\": {}, ", "9".repeat(15)), g), sign),
        "success/listed",
    ),
    (
        "16-digit integer",
        |g, sign| signed_list(&legacy_list(&format!("\"x\": {}, ", "9".repeat(16)), g), sign),
        "failure/response",
    ),
    (
        "5000-digit integer",
        |g, sign| signed_list(&legacy_list(&format!("\"x\": {}, ", "7".repeat(5000)), g), sign),
        "failure/response",
    ),
    ("32 levels", |g, sign| signed_list(&legacy_list(&format!("\"x\": {}, ", nested(31)), g), sign), "success/listed"),
    (
        "33 levels",
        |g, sign| signed_list(&legacy_list(&format!("\"x\": {}, ", nested(32)), g), sign),
        "failure/response",
    ),
    ("number key", |g, sign| signed_list(&legacy_list("1.5: 1, ", g), sign), "failure/response"),
    ("NaN", |g, sign| signed_list(&legacy_list("\"x\": NaN, ", g), sign), "failure/response"),
    (
        "lone surrogate in the fingerprint",
        |g, sign| signed_list(&legacy_list("", &format!("\\ud800{}", &g[6..])), sign),
        "failure/response",
    ),
    ("comment", |g, sign| signed_list(&legacy_list("/* */ ", g), sign), "failure/response"),
];

/// Asks a genuine notary and one answering each form; returns the cases whose votes are wrong.
fn run(mode: Mode, extended: bool, genuine_vote: &str, forms: Vec<(&str, Forms, &str)>) -> Vec<String> {
    let genuine = FakeNotary::start("Org A", mode, &notary_cert(), &notary_key(), &genuine_fp());
    let hostile = FakeNotary::start("Org B", mode, &notary_cert(), &notary_key(), &genuine_fp());
    let mut settings = json!({"early-return": false, "notary-agreement": "majority"});
    if extended {
        settings["extended"] = json!("require");
    }
    let mut wrong = Vec::new();
    for (name, form, want) in forms {
        *hostile.forms.lock().unwrap() = form;
        let c = Client::load(Some(&config_dir(&[&genuine, &hostile], settings.clone(), extended))).unwrap();
        let v = c.check("www.example.org", 443, &genuine_fp()).unwrap_or_else(|e| panic!("{name}: no verdict: {e}"));
        let got: BTreeMap<String, String> =
            v.results.iter().map(|r| (r.name.clone(), format!("{}/{}", r.vote.as_str(), r.kind))).collect();
        if got["Org A"] != genuine_vote || got["Org B"] != want {
            wrong.push(format!("{name}: {got:?}, want Org B {want}"));
        }
    }
    wrong
}

#[test]
fn a_hostile_legacy_notary_among_honest_ones() {
    let forms = LEGACY.iter().map(|(n, f, w)| (*n, Forms { legacy: Some(*f), ..Forms::default() }, *w)).collect();
    let wrong = run(Mode::Listed, false, "success/listed", forms);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn member(stmt: &str, m: &str) -> String {
    format!("{{{m},{}", &stmt[1..])
}

const EXTENDED: &[(&str, Option<TextForm>, Option<TextForm>, &str)] = &[
    ("genuine", None, None, "success/match"),
    ("repeated verdict, the last counts", Some(|s| member(s, r#""verdict":"mismatch""#)), None, "success/match"),
    (
        "repeated verdict, the last counts (twin)",
        Some(|s| format!("{},\"verdict\":\"mismatch\"}}", &s[..s.len() - 1])),
        None,
        "failure/response",
    ),
    ("15-digit integer", Some(|s| member(s, &format!("\"x\":{}", "9".repeat(15)))), None, "success/match"),
    ("5000-digit integer", Some(|s| member(s, &format!("\"x\":{}", "7".repeat(5000)))), None, "failure/malformed"),
    ("32 levels", Some(|s| member(s, &format!("\"x\":{}", nested(31)))), None, "success/match"),
    ("33 levels", Some(|s| member(s, &format!("\"x\":{}", nested(32)))), None, "failure/malformed"),
    ("number key", Some(|s| member(s, "1:1")), None, "failure/malformed"),
    ("NaN", Some(|s| member(s, "\"x\":NaN")), None, "failure/malformed"),
    ("lone surrogate", Some(|s| member(s, r#""x":"\ud800""#)), None, "failure/malformed"),
    ("member after the statement", None, Some(|a| format!("{},\"x\":1}}", &a[..a.len() - 1])), "failure/bad-signature"),
    ("byte after the brace", None, Some(|a| format!("{a}\n")), "failure/malformed"),
    ("unknown key id", None, Some(|a| a.replacen("\"key_id\":\"", "\"key_id\":\"0", 1)), "failure/unknown-key"),
    (
        "reordered prefix",
        None,
        Some(|a| a.replacen("{\"signature\":{\"alg\"", "{\"signature\":{ \"alg\"", 1)),
        "failure/malformed",
    ),
];

#[test]
fn a_hostile_extended_notary_among_honest_ones() {
    let forms = EXTENDED
        .iter()
        .map(|(n, st, an, w)| (*n, Forms { statement: *st, answer: *an, ..Forms::default() }, *w))
        .collect();
    let wrong = run(Mode::Extended, true, "success/match", forms);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
