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
        // a request naming another port than the agent's is checked for that port, not as Q
        let err = agent.get(&format!("https://127.0.0.1:{}/", p.port)).call().unwrap_err();
        assert_eq!(not_trusted(&err).map(|n| n.port), Some(p.port), "via {via:?}: {err}");
        assert_eq!(p.requests.load(Ordering::SeqCst), 0);
    }
    // twin: once the notaries see that certificate at P too, the cross-port redirect is followed
    for n in &ns {
        n.views.lock().unwrap().clear();
    }
    let agent = converge::http::agent(client, q.port, None).unwrap();
    assert_eq!(agent.get(&format!("https://127.0.0.1:{}/", q.port)).call().unwrap().into_string().unwrap(), "at P");
}

fn body(agent: &ureq::Agent, url: &str) -> String {
    agent.get(url).call().unwrap().into_string().unwrap()
}

#[test]
fn a_session_made_on_one_port_is_not_resumed_on_another() {
    // P and Q share one TLS server config, so a session made at Q resumes at P
    let (p, q, ns, client) = redirecting_sites();
    let (at_q, at_p) = (format!("https://127.0.0.1:{}/final", q.port), format!("https://127.0.0.1:{}/", p.port));
    let agent = converge::http::agent(client.clone(), q.port, None).unwrap();
    assert_eq!(body(&agent, &at_q), "at Q");
    // the same agent at P: checked for P (the notaries see another certificate there)
    let err = agent.get(&at_p).call().unwrap_err();
    assert_eq!(not_trusted(&err).map(|n| n.port), Some(p.port), "{err}");
    assert_eq!(p.requests.load(Ordering::SeqCst), 0);
    // must-fail twin: one rustls config for both ports serves P's page (a session resumed
    // from Q, or P checked as Q)
    let one_config =
        ureq::AgentBuilder::new().tls_config(converge::tls::client_config(client, q.port)).redirects(0).build();
    assert_eq!(body(&one_config, &at_q), "at Q");
    assert_eq!(body(&one_config, &at_p), "at P");
    // genuine twin: once the notaries see that certificate at P too, the agent loads it
    for n in &ns {
        n.views.lock().unwrap().clear();
    }
    assert_eq!(body(&agent, &at_p), "at P");
}

#[test]
fn without_redirects_a_3xx_is_the_response() {
    let (p, q, _ns, client) = redirecting_sites();
    let url = format!("https://127.0.0.1:{}/", q.port);
    let agent = converge::http::agent_with(client.clone(), None, 0).unwrap();
    let r = agent.get(&url).call().unwrap();
    assert_eq!((r.status(), r.header("location")), (302, Some(format!("https://127.0.0.1:{}/", p.port).as_str())));
    assert_eq!(p.requests.load(Ordering::SeqCst), 0);
    // twin: with redirects the hop to P is made (and refused there)
    let err = converge::http::agent_with(client, None, 1).unwrap().get(&url).call().unwrap_err();
    assert_eq!(not_trusted(&err).map(|n| n.port), Some(p.port), "{err}");
}

#[test]
fn inside_the_connect_tunnel_the_origin_gets_an_origin_form_request() {
    let (client, _genuine, _forged, _ns) = setup();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let seen = lines.clone();
    let site = Site::listen(
        common::server_config(&notary_cert(), &notary_key()),
        Arc::new(move |line: &str| {
            seen.lock().unwrap().push(line.to_string());
            common::ok_reply("genuine")
        }),
    );
    let (relay, asked) = proxy(None);
    let via = format!("http://127.0.0.1:{relay}");
    let url = format!("https://127.0.0.1:{}/x?y=1", site.port);
    let agent = converge::http::agent(client.clone(), site.port, Some(&via)).unwrap();
    assert_eq!(body(&agent, &url), "genuine");
    assert_eq!(lines.lock().unwrap().as_slice(), ["GET /x?y=1 HTTP/1.1"]);
    assert!(asked.lock().unwrap()[0].starts_with(&format!("CONNECT 127.0.0.1:{} ", site.port)));
    // must-fail twin: ureq's own proxy support writes the absolute form in the tunnel
    let ureq_proxy = ureq::AgentBuilder::new()
        .tls_config(converge::tls::client_config(client.clone(), site.port))
        .proxy(ureq::Proxy::new(&via).unwrap())
        .build();
    assert_eq!(body(&ureq_proxy, &url), "genuine");
    assert_eq!(lines.lock().unwrap()[1], format!("GET {url} HTTP/1.1"));
    // a proxy that refuses the CONNECT: an error, no request
    let refusing = TcpListener::bind("127.0.0.1:0").unwrap();
    let refusing_port = refusing.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in refusing.incoming().flatten() {
            let mut b = [0u8; 1024];
            let _ = c.read(&mut b);
            let _ = c.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let agent = converge::http::agent(client, site.port, Some(&format!("http://127.0.0.1:{refusing_port}"))).unwrap();
    let err = agent.get(&url).call().unwrap_err();
    assert!(err.to_string().contains("403"), "{err}");
    assert_eq!(site.requests.load(Ordering::SeqCst), 2);
}
