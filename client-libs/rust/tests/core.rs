//! JSON as Python reads and writes it, canonical JSON, framing, policies; and a fixed-seed fuzz
//! of the response parser (never panics, never votes success unless signed).

mod common;

use converge::bundle::certificate_key;
use converge::json::{canonical, parse, py_dumps, py_float_repr};
use converge::legacy::{check_ip, outcome_from_http, parse_http_response};
use converge::parse_fingerprint;
use converge::policy::{decide, settled, Policy, Vote};

#[test]
fn json_is_read_as_python_reads_it() {
    let v = parse(br#"{"b": 1, "2": 2.0, "1": 1e2, "big": 123456789012345678901, "b": -0}"#).unwrap();
    assert_eq!(py_dumps(&v), r#"{"b": 0, "2": 2.0, "1": 100.0, "big": 123456789012345678901}"#);
    assert_eq!(py_dumps(&parse("[\"é\\u2028😀\"]".as_bytes()).unwrap()), r#"["\u00e9\u2028\ud83d\ude00"]"#);
}

#[test]
fn pythons_float_repr() {
    for (x, want) in [
        (1.0, "1.0"),
        (0.1, "0.1"),
        (1e16, "1e+16"),
        (1.5e-5, "1.5e-05"),
        (123456.789, "123456.789"),
        (-0.0, "-0.0"),
        (1e-4, "0.0001"),
    ] {
        assert_eq!(py_float_repr(x), want, "{x}");
    }
}

#[test]
fn canonical_json_subset() {
    assert_eq!(
        canonical(&parse(br#"{"b": [1, "\u00e9"], "a": {"y": null, "x": true}}"#).unwrap()).unwrap(),
        r#"{"a":{"x":true,"y":null},"b":[1,"é"]}"#
    );
    for bad in ["[1.0]", "[1e2]", "[9007199254740992]", r#"{"é": 1}"#] {
        assert!(canonical(&parse(bad.as_bytes()).unwrap()).is_none(), "{bad}");
    }
    assert!(parse(br#"["\ud800"]"#).is_none(), "a lone surrogate is not read");
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
