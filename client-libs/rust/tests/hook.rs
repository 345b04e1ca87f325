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
