//! End to end through the rustls hook with ureq: the genuine site loads; the forged one fails
//! before a single byte of the request reaches it (the must-fail twin), directly and through
//! a CONNECT proxy (the origin is asked about, not the proxy).

mod common;

use common::{config_dir, genuine_fp, notary_cert, notary_key, other_cert, other_key, FakeNotary, Mode, Site};
use converge::tls::not_trusted;
use converge::Client;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

fn proxy(divert: Option<u16>) -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let a2 = asked.clone();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let a = a2.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && c.read(&mut b).unwrap_or(0) == 1 {
                    head.push(b[0]);
                }
                let line = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_string();
                a.lock().unwrap().push(line.clone());
                let port = divert
                    .unwrap_or_else(|| line.split(' ').nth(1).unwrap().rsplit(':').next().unwrap().parse().unwrap());
                let up = TcpStream::connect(("127.0.0.1", port)).unwrap();
                c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").unwrap();
                let (mut c2, mut up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut up2, &mut c2));
                let mut up = up;
                let _ = std::io::copy(&mut c, &mut up);
            });
        }
    });
    (port, asked)
}

fn setup() -> (Arc<Client>, Site, Site, Vec<FakeNotary>) {
    let ns = vec![
        FakeNotary::start("Org A", Mode::Listed, &notary_cert(), &notary_key(), &genuine_fp()),
        FakeNotary::start("Org B", Mode::Listed, &notary_cert(), &notary_key(), &genuine_fp()),
    ];
    let dir = config_dir(&[&ns[0], &ns[1]], json!({"notary-agreement": "consensus"}), false);
    let genuine = Site::start(&notary_cert(), &notary_key(), "genuine");
    let forged = Site::start(&other_cert(), &other_key(), "forged");
    (Arc::new(Client::load(Some(&dir)).unwrap()), genuine, forged, ns)
}

#[test]
fn ureq_through_the_hook_genuine_loads_forged_refused_before_the_request() {
    let (client, genuine, forged, _ns) = setup();
    let agent = converge::http::agent(client.clone(), genuine.port, None).unwrap();
    let body = agent.get(&format!("https://127.0.0.1:{}/", genuine.port)).call().unwrap().into_string().unwrap();
    assert_eq!(body, "genuine");
    let agent = converge::http::agent(client, forged.port, None).unwrap();
    let err = agent.get(&format!("https://127.0.0.1:{}/", forged.port)).call().unwrap_err();
    let nt = not_trusted(&err).expect("a NotTrusted in the error's chain");
    assert!(nt.verdict.as_ref().is_some_and(|v| !v.trusted));
    assert_eq!(forged.requests.load(Ordering::SeqCst), 0);
}

#[test]
fn through_a_connect_proxy_the_origin_is_asked_about_and_an_attackers_proxy_is_caught() {
    let (client, genuine, forged, ns) = setup();
    let (honest, asked) = proxy(None);
    let agent =
        converge::http::agent(client.clone(), genuine.port, Some(&format!("http://127.0.0.1:{honest}"))).unwrap();
    assert_eq!(
        agent.get(&format!("https://127.0.0.1:{}/", genuine.port)).call().unwrap().into_string().unwrap(),
        "genuine"
    );
    assert!(asked.lock().unwrap()[0].starts_with(&format!("CONNECT 127.0.0.1:{} ", genuine.port)));
    assert!(ns[0].requests.lock().unwrap()[0].contains(&format!("+{} HTTP", genuine.port)));
    let (evil, _) = proxy(Some(forged.port));
    let agent = converge::http::agent(client, genuine.port, Some(&format!("http://127.0.0.1:{evil}"))).unwrap();
    let err = agent.get(&format!("https://127.0.0.1:{}/", genuine.port)).call().unwrap_err();
    assert!(not_trusted(&err).is_some(), "{err}");
    assert_eq!(forged.requests.load(Ordering::SeqCst), 0);
}

/// The path of a request target, also in absolute form (`https://host:port/path`).
fn origin_form(target: &str) -> &str {
    match target.strip_prefix("https://") {
        Some(rest) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    }
}

/// A site on two ports sharing one TLS server config (so one session cache, as one attacker's
/// box would): port Q redirects `/` to port P and `/same` to `/final` on Q. The notaries see the
/// presented certificate at Q; at P they see another one, until `vouch_p`.
fn redirecting_sites() -> (Site, Site, Vec<FakeNotary>, Arc<Client>) {
    let cfg = common::server_config(&notary_cert(), &notary_key());
    let p = Site::listen(cfg.clone(), Arc::new(|_: &str| common::ok_reply("at P")));
    let to_p = format!("https://127.0.0.1:{}/", p.port);
    let q = Site::listen(
        cfg,
        // the path of the request line (ureq writes the absolute form inside a CONNECT tunnel)
        Arc::new(move |line: &str| match line.split(' ').nth(1).map(origin_form) {
            Some("/") => common::redirect_reply(&to_p),
            Some("/same") => common::redirect_reply("/final"),
            _ => common::ok_reply("at Q"),
        }),
    );
    let ns = vec![
        FakeNotary::start("Org A", Mode::Listed, &notary_cert(), &notary_key(), &genuine_fp()),
        FakeNotary::start("Org B", Mode::Listed, &notary_cert(), &notary_key(), &genuine_fp()),
    ];
    for n in &ns {
        n.views.lock().unwrap().insert(format!("127.0.0.1:{}", p.port), common::forged_fp());
    }
    let dir = config_dir(&[&ns[0], &ns[1]], json!({"notary-agreement": "consensus"}), false);
    (p, q, ns, Arc::new(Client::load(Some(&dir)).unwrap()))
}

#[test]
fn every_redirect_hop_is_checked_for_its_own_host_and_port() {
    let (p, q, ns, client) = redirecting_sites();
    let (relay, _) = proxy(None);
    for via in [None, Some(format!("http://127.0.0.1:{relay}"))] {
        let agent = converge::http::agent(client.clone(), q.port, via.as_deref()).unwrap();
        // twin: a redirect on the same origin is followed
        let same = agent.get(&format!("https://127.0.0.1:{}/same", q.port)).call().unwrap();
        assert_eq!(same.into_string().unwrap(), "at Q", "via {via:?}");
        // Q -> P: the hop to P is checked for P (the notaries see another certificate there),
        // not accepted on Q's verifier or a session resumed from Q
        let err = agent.get(&format!("https://127.0.0.1:{}/", q.port)).call().unwrap_err();
        let nt = not_trusted(&err).unwrap_or_else(|| panic!("via {via:?}: {err}"));
        assert_eq!(nt.port, p.port);
        assert_eq!(p.requests.load(Ordering::SeqCst), 0, "via {via:?}: the request reached P");
        // a request naming another port than the agent's is refused, not checked as Q
        assert!(agent.get(&format!("https://127.0.0.1:{}/", p.port)).call().is_err());
        assert_eq!(p.requests.load(Ordering::SeqCst), 0);
    }
    // twin: once the notaries see that certificate at P too, the cross-port redirect is followed
    for n in &ns {
        n.views.lock().unwrap().clear();
    }
    let agent = converge::http::agent(client, q.port, None).unwrap();
    assert_eq!(agent.get(&format!("https://127.0.0.1:{}/", q.port)).call().unwrap().into_string().unwrap(), "at P");
}
