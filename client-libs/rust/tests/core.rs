//! The strict JSON reader and the bounds scan, framing, policies; and a fixed-seed fuzz
//! of the response parser (never panics, never votes success unless signed).

mod common;

use converge::bundle::{certificate_key, weak_key};
use converge::json::{bounds_ok, parse_object};
use converge::legacy::{check_ip, outcome_from_http, parse_http_response};
use converge::parse_fingerprint;
use converge::policy::{decide, settled, Policy, Vote};

#[test]
fn json_is_read_strictly_and_the_last_repeated_name_counts() {
    let v = parse_object(br#"{"a": 1, "b": ["x"], "a": 2}"#).unwrap();
    assert_eq!(v["a"], 2, "the last of repeated names counts");
    assert!(parse_object(b" {\"a\": \"\\u00e9\"}\n").is_some(), "white space around the text");
    for bad in [
        &br#"{"a": 1,}"#[..],
        br#"{"a": [01]}"#,
        b"{\"a\": \"a\tb\"}",
        br#"{"a" 1}"#,
        b"{\"a\": \"\xff\"}",
        br#"{"a": 1} x"#,
        br#"{"a": NaN}"#,
        br#"{"a": Infinity}"#,
        br#"{1: 2}"#,
        br#"{"a": 1} // c"#,
        br#"/* c */ {}"#,
        br#"{"a": "\ud800"}"#,
        b"{\"a\": 1}\x00",
        br#"[1]"#,
    ] {
        assert!(parse_object(bad).is_none(), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn the_bounds_scan_and_its_twins() {
    let deep = |n: usize| format!("{}{{}}{}", "[".repeat(n - 1), "]".repeat(n - 1));
    for (ok, refused) in [
        (deep(32), deep(33)),
        (r#"{"a": 999999999999999}"#.into(), r#"{"a": 9999999999999999}"#.into()),
        ("[-1, 0]".into(), "[-01]".into()),
        (r#"["1.5", "1e5", "\"[[[", "\\"]"#.into(), "[1.5]".into()),
        (r#"{"a": "]]]]"}"#.into(), r#"{"a": 1e5}"#.into()),
        ("[0]".into(), "[-0.0]".into()),
        ("[0]".into(), "[1E2]".into()),
    ] {
        assert!(bounds_ok(ok.as_bytes()), "{ok:.40} refused");
        assert!(!bounds_ok(refused.as_bytes()), "{refused:.40} accepted");
    }
    assert!(bounds_ok(format!(r#"["{}"]"#, "9".repeat(5000)).as_bytes()), "digits inside a string");
}

#[test]
fn ip_literals_in_the_notarys_form() {
    assert_eq!(check_ip("2001:0db8:0:0:0:0:0:1").unwrap(), "2001:db8::1");
    assert_eq!(check_ip("::ffff:1.2.3.4").unwrap(), "::ffff:102:304");
    assert!(check_ip("01.2.3.4").is_err());
    assert!(check_ip("fe80::1%eth0").is_err());
}

#[test]
fn framing_refuses_what_a_notary_must_not_send() {
    assert!(parse_http_response(b"HTTP/1.0 200 X\r\nContent-Length: 10\r\n\r\nshort", 1 << 20).is_err());
    assert!(parse_http_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 1 << 20).is_err());
    assert!(parse_http_response(b"HTTP/1.0 200 X\r\n bad: header\r\n\r\n", 1 << 20).is_err());
    let r =
        parse_http_response(b"HTTP/1.0 200 X\r\nA: 1\r\na: 2\r\nContent-Length: 2\r\n\r\nokEXTRA", 1 << 20).unwrap();
    assert_eq!(r.headers["a"], "1, 2");
    assert_eq!(r.body, b"ok");
}

#[test]
fn policies() {
    use Vote::*;
    assert!(decide(Policy::Consensus, &[Success, Unreachable], true));
    assert!(!decide(Policy::Consensus, &[Success, Unreachable], false));
    assert!(decide(Policy::Majority, &[Success, Failure], true));
    assert!(!decide(Policy::Minority, &[], true));
    assert_eq!(settled(Policy::Consensus, &[Failure], 2, true), Some(false));
    assert_eq!(settled(Policy::Majority, &[Success], 2, true), None);
}

/// xorshift64: a fixed-seed generator, so that a failure replays.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn fuzz_the_response_parser_with_a_fixed_seed() {
    let key = certificate_key(&common::der_of(&common::notary_cert())).unwrap();
    let rsa = common::rsa_key(&common::notary_key());
    let fp = common::genuine_fp();
    let list = format!("{{\"fingerprintList\": [{{\"timestamp\": {{\"start\": \"1323389219\", \"finish\": \"1324691510\"}}, \"fingerprint\": \"{fp}\"}}]}}");
    let sig = common::legacy_sign(&rsa, list.as_bytes());
    use base64::Engine;
    let body = format!(
        "{}, \"signature\": \"{}\"}}",
        &list[..list.len() - 1],
        base64::engine::general_purpose::STANDARD.encode(sig)
    );
    let good =
        format!("HTTP/1.0 200 X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())
            .into_bytes();
    let wanted = vec![parse_fingerprint(&fp).unwrap()];
    assert_eq!(outcome_from_http(&good, &wanted, &key, 1 << 20).0.kind, "listed");
    let tokens: [&[u8]; 12] = [b"{", b"}", b"[", b"]", b"\"", b",", b":", b"\\", b"\r\n", b"1e999", b"-0", b"\xff"];
    let mut rng = Rng(20111206);
    let (mut responses, mut signatures) = (0, 0);
    for _ in 0..3000 {
        let mut b = good.clone();
        for _ in 0..=rng.below(4) {
            let at = rng.below(b.len());
            match rng.below(10) {
                0..=2 => b[at] = rng.next() as u8,
                3..=4 => {
                    let n = (1 + rng.below(8)).min(b.len() - at);
                    b.drain(at..at + n);
                }
                5..=7 => {
                    let t = tokens[rng.below(tokens.len())];
                    b.splice(at..at, t.iter().copied());
                }
                _ => {
                    let (x, y) = (rng.below(b.len()), rng.below(b.len()));
                    let piece = b[x.min(y)..x.max(y)].to_vec();
                    b.splice(at..at, piece);
                }
            }
            if b.is_empty() {
                b.push(b'x');
            }
        }
        let (o, r) = outcome_from_http(&b, &wanted, &key, 1 << 20);
        match o.kind.as_str() {
            "response" => responses += 1,
            "signature" => signatures += 1,
            _ => {}
        }
        if o.vote == Vote::Success {
            assert_eq!(r.unwrap().status, 200, "only a signed 200 may vote success");
        }
    }
    assert!(responses > 100 && signatures > 10, "{responses} {signatures}");
}

#[test]
fn https_ports_of_urls() {
    use converge::http::https_port;
    assert_eq!(https_port("https://example.org/"), Some(443));
    assert_eq!(https_port("https://example.org:8443/x"), Some(8443));
    assert_eq!(https_port("https://[::1]:4433/"), Some(4433));
    assert_eq!(https_port("https://[::1]/"), Some(443));
    assert_eq!(https_port("https://u:p@h:9/"), Some(9));
    assert_eq!(https_port("http://example.org/"), None);
}

#[test]
fn weak_ed25519_keys_are_named_and_a_sound_key_is_not() {
    let with = |first: &[(usize, u8)], fill: u8| {
        let mut k = [fill; 32];
        for &(i, b) in first {
            k[i] = b;
        }
        k
    };
    let identity = with(&[(0, 1)], 0);
    let identity_signed = with(&[(0, 1), (31, 0x80)], 0);
    let y8 = [
        0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0, 0xd5, 0xdf,
        0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05,
    ];
    let p_plus_3 = with(&[(0, 0xf0), (31, 0x7f)], 0xff);
    let small = Some("an Ed25519 public key of small order");
    assert_eq!(weak_key(&identity), small);
    assert_eq!(weak_key(&identity_signed), small);
    assert_eq!(weak_key(&y8), small);
    assert_eq!(weak_key(&p_plus_3), Some("an Ed25519 public key not in canonical form"));
    assert_eq!(weak_key(&identity[..31]), Some("an Ed25519 public key has 32 bytes"));
    // the twin: a freshly generated key, and p - 2 (canonical, not of small order, even if
    // off the curve: only small order and non-canonical encodings are refused)
    use ring::signature::KeyPair;
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
    let pair = ring::signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    assert_eq!(weak_key(pair.public_key().as_ref()), None);
    assert_eq!(weak_key(&with(&[(0, 0xeb), (31, 0x7f)], 0xff)), None);
}

#[test]
fn one_key_named_twice_in_the_transparency_member_is_refused() {
    use converge::transparency::{b64, key_id, parse_log_policy, KEY_COSIGNATURE};
    use serde_json::{json, Value};
    let text = std::fs::read_to_string(common::vectors().join("transparency.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let key = |k: &str| doc["keys"][k].as_str().unwrap().to_string();
    let (log, w1, w2) = (key("log"), key("witness-1"), key("witness-2"));
    // a key's raw 32 bytes under another witness name, with that name's key id
    let renamed = |vkey: &str, name: &str| {
        let raw = b64(vkey.splitn(3, '+').nth(2).unwrap()).unwrap();
        let id: String = key_id(name, KEY_COSIGNATURE, &raw[1..]).iter().map(|b| format!("{b:02x}")).collect();
        let mut typed = raw.clone();
        typed[0] = KEY_COSIGNATURE;
        format!("{name}+{id}+{}", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, typed))
    };
    let member = |witnesses: &[&str]| {
        let list: Vec<Value> =
            witnesses.iter().map(|v| json!({"name": v.split('+').next().unwrap(), "vkey": v})).collect();
        json!({"log": log, "witnesses": list, "min_cosignatures": witnesses.len()})
    };
    let twice = "transparency names one key twice (two witnesses, or a witness and the log)";
    let w1_again = renamed(&w1, "witness.test/other");
    let log_as_witness = renamed(&log, "witness.test/log-key");
    for (what, witnesses) in [
        ("one key under two witness names", [&w1[..], &w1_again]),
        ("the log's key as a witness's", [&w2, &log_as_witness]),
    ] {
        let e = parse_log_policy(&member(&witnesses)).unwrap_err();
        assert_eq!(e.kind().as_str(), "bundle", "{what}");
        assert!(e.to_string().contains(twice), "{what}: {e}");
    }
    // twin: two witnesses with their own keys parse; each renamed key parses without the key
    // it repeats
    let ok = parse_log_policy(&member(&[&w1, &w2])).unwrap();
    assert_eq!((ok.witnesses.len(), ok.min_cosignatures), (2, 2));
    assert!(parse_log_policy(&member(&[&w1_again])).is_ok());
    let mut other_log = member(&[&log_as_witness]);
    other_log["log"] = key("other-log").into();
    assert!(parse_log_policy(&other_log).is_ok(), "the log key as a witness key, with another log key");
}
