//! The client against real TLS notaries on 127.0.0.1 (fakes with the vectors' test keys):
//! votes, the cache, parallel queries and early decisions, every timeout, pins, both formats.

mod common;

use common::{config_dir, forged_fp, genuine_fp, notary_cert, notary_key, other_cert, other_key, FakeNotary, Mode};
use converge::{Client, Kind};
use serde_json::json;
use std::time::{Duration, Instant};

fn fake(name: &str, mode: Mode) -> FakeNotary {
    FakeNotary::start(name, mode, &notary_cert(), &notary_key(), &genuine_fp())
}

fn kinds(v: &converge::Verdict) -> Vec<String> {
    v.results.iter().map(|r| r.kind.clone()).collect()
}

#[test]
fn three_notaries_confirm_then_a_cache_hit_without_network() {
    let ns = [fake("Org A", Mode::Listed), fake("Org B", Mode::Listed), fake("Org C", Mode::Listed)];
    let c = Client::load(Some(&config_dir(&[&ns[0], &ns[1], &ns[2]], json!({"early-return": false}), false))).unwrap();
    let v = c.check("www.example.org", 443, &genuine_fp()).unwrap();
    assert!(v.trusted);
    assert_eq!(kinds(&v), ["listed", "listed", "listed"]);
    assert!(v.results.iter().all(|r| r.protocol == Some("convergence-v1") && r.status == Some(200)));
    let want = String::from_utf8(
        converge::legacy::request_bytes(
            "www.example.org",
            443,
            &converge::parse_fingerprint(&genuine_fp()).unwrap(),
            None,
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(ns[0].requests.lock().unwrap()[0], want);
    let again = c.check("WWW.example.org", 443, &genuine_fp().to_lowercase()).unwrap();
    assert!(again.from_cache && again.trusted);
    assert_eq!(ns.iter().map(FakeNotary::count).collect::<Vec<_>>(), [1, 1, 1]);
    // twin: another port is another location
    assert!(!c.check("www.example.org", 8443, &genuine_fp()).unwrap().from_cache);
}

#[test]
fn a_forged_certificate_is_untrusted_and_never_cached() {
    let ns = [fake("Org A", Mode::Listed), fake("Org B", Mode::Listed)];
    let c = Client::load(Some(&config_dir(&[&ns[0], &ns[1]], json!({}), false))).unwrap();
    let v = c.check("bank.example", 443, &forged_fp()).unwrap();
    assert!(!v.trusted);
    assert!(!c.check("bank.example", 443, &forged_fp()).unwrap().from_cache);
}

#[test]
fn notaries_are_asked_in_parallel() {
    let ns = [fake("Org A", Mode::Listed), fake("Org B", Mode::Listed), fake("Org C", Mode::Listed)];
    for n in &ns {
        *n.delay.lock().unwrap() = Duration::from_millis(400);
    }
    let c = Client::load(Some(&config_dir(&[&ns[0], &ns[1], &ns[2]], json!({"early-return": false}), false))).unwrap();
    let t0 = Instant::now();
    assert!(c.check("par.example", 443, &genuine_fp()).unwrap().trusted);
    assert!(t0.elapsed() < Duration::from_millis(1100), "{:?}", t0.elapsed());
}

#[test]
fn early_return_and_its_twin() {
    let ns = [fake("Org A", Mode::Mismatch), fake("Org B", Mode::Hang), fake("Org C", Mode::Hang)];
    let c = Client::load(Some(&config_dir(
        &[&ns[0], &ns[1], &ns[2]],
        json!({"notary-agreement": "consensus", "notary-timeout": 3, "total-timeout": 5}),
        false,
    )))
    .unwrap();
    let t0 = Instant::now();
    let v = c.check("early.example", 443, &genuine_fp()).unwrap();
    assert!(!v.trusted && t0.elapsed() < Duration::from_millis(1500));
    assert_eq!(kinds(&v), ["mismatch", "settled", "settled"]);
    let late = Client::load(Some(&config_dir(
        &[&ns[0], &ns[1], &ns[2]],
        json!({"notary-agreement": "consensus", "early-return": false, "notary-timeout": 0.5}),
        false,
    )))
    .unwrap();
    assert_eq!(kinds(&late.check("early.example", 443, &genuine_fp()).unwrap()), ["mismatch", "timeout", "timeout"]);
}

#[test]
fn the_total_timeout_bounds_everything() {
    let ns = [fake("Org A", Mode::Hang), fake("Org B", Mode::Hang)];
    let c =
        Client::load(Some(&config_dir(&[&ns[0], &ns[1]], json!({"notary-timeout": 10, "total-timeout": 0.6}), false)))
            .unwrap();
    let t0 = Instant::now();
    let v = c.check("slow.example", 443, &genuine_fp()).unwrap();
    let took = t0.elapsed();
    assert!(!v.trusted);
    assert!(took >= Duration::from_millis(550) && took < Duration::from_secs(2), "{took:?}");
    assert_eq!(kinds(&v), ["timeout", "timeout"]);
}

#[test]
fn a_wrong_pin_and_garbage_are_failures() {
    let impostor = FakeNotary::start("Org Impostor", Mode::Listed, &other_cert(), &other_key(), &genuine_fp());
    let ns = [fake("Org A", Mode::Garbage), fake("Org B", Mode::Listed)];
    let dir = config_dir(
        &[&impostor, &ns[0], &ns[1]],
        json!({"notary-agreement": "consensus", "early-return": false}),
        false,
    );
    // the impostor's bundle pins the genuine notary certificate
    let f = std::fs::read_dir(dir.join("notaries-available"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains("Impostor"))
        .unwrap();
    let text = std::fs::read_to_string(&f).unwrap();
    std::fs::write(
        &f,
        text.replace(
            &serde_json::to_string(&other_cert()).unwrap()[1..serde_json::to_string(&other_cert()).unwrap().len() - 1],
            &serde_json::to_string(&notary_cert()).unwrap()
                [1..serde_json::to_string(&notary_cert()).unwrap().len() - 1],
        ),
    )
    .unwrap();
    let v = Client::load(Some(&dir)).unwrap().check("pin.example", 443, &genuine_fp()).unwrap();
    assert!(!v.trusted);
    assert_eq!(kinds(&v), ["pin", "response", "listed"]);
    assert_eq!(impostor.count(), 0);
}

#[test]
fn extended_answers_are_bound_and_fresh() {
    let ns = [fake("Org A", Mode::Extended), fake("Org B", Mode::Extended), fake("Org C", Mode::ExtendedStale)];
    let c = Client::load(Some(&config_dir(&[&ns[0], &ns[1], &ns[2]], json!({"early-return": false}), true))).unwrap();
    let v = c.check("ext.example", 443, &genuine_fp()).unwrap();
    assert_eq!(kinds(&v), ["match", "match", "stale"]);
    assert!(v.results.iter().all(|r| r.protocol == Some("converge-answer/1")));
    assert!(v.trusted);
    assert!(ns[0].requests.lock().unwrap()[0].contains("\"nonce\":\""));
    let off = Client::load(Some(&config_dir(&[&ns[0]], json!({"extended": "off"}), true))).unwrap();
    assert_eq!(off.check("ext.example", 443, &genuine_fp()).unwrap().results[0].protocol, Some("convergence-v1"));
}

#[test]
fn bad_input_is_a_typed_error_before_any_notary_is_asked() {
    let n = fake("Org A", Mode::Listed);
    let c = Client::load(Some(&config_dir(&[&n], json!({}), false))).unwrap();
    assert_eq!(c.check("a b", 443, &genuine_fp()).unwrap_err().kind(), Kind::Target);
    assert_eq!(c.check("ok.example", 0, &genuine_fp()).unwrap_err().kind(), Kind::Target);
    assert_eq!(c.check("ok.example", 443, "zz").unwrap_err().kind(), Kind::Fingerprint);
    assert_eq!(n.count(), 0);
    let empty = Client::load(Some(&config_dir(&[], json!({}), false))).unwrap();
    let e = empty.check("ok.example", 443, &genuine_fp()).unwrap_err();
    assert_eq!(e.kind(), Kind::Config);
    assert!(e.message().contains("notaries-enabled"));
}

#[test]
fn a_stale_cache_entry_is_asked_again() {
    let n = fake("Org A", Mode::Listed);
    let now = std::sync::Arc::new(std::sync::Mutex::new(2_000_000_000.0_f64));
    let n2 = now.clone();
    let c = Client::load(Some(&config_dir(&[&n], json!({"cache-lifetime": 60}), false)))
        .unwrap()
        .with_clock(move || *n2.lock().unwrap());
    assert!(!c.check("stale.example", 443, &genuine_fp()).unwrap().from_cache);
    *now.lock().unwrap() += 30.0;
    assert!(c.check("stale.example", 443, &genuine_fp()).unwrap().from_cache);
    *now.lock().unwrap() += 61.0;
    assert!(!c.check("stale.example", 443, &genuine_fp()).unwrap().from_cache);
    assert_eq!(n.count(), 2);
}
