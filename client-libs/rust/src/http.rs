//! HTTPS with ureq, decided by the notaries: [`agent`] builds a `ureq::Agent` whose every TLS
//! connection is checked for its own origin host and port (optionally through an HTTP CONNECT
//! proxy; the notaries are asked about the origin, never the proxy).
//!
//! ```no_run
//! use std::sync::Arc;
//! let client = Arc::new(converge::Client::load(None)?);
//! let agent = converge::http::agent(client, 443, None)?;
//! match agent.get("https://www.example.org/").call() {
//!     Ok(r) => println!("{}", r.into_string().unwrap_or_default()),
//!     Err(e) => eprintln!("refused: {e}"),
//! }
//! # Ok::<(), converge::Error>(())
//! ```
//!
//! rustls tells a certificate verifier the server name but not the port, and resumes TLS
//! sessions by name, so one `ClientConfig` can only vouch for one origin port. The agent
//! therefore sends every `https` request on an inner agent of the request's port, with its own
//! verifier, TLS session store and connection pool: a session or a pooled connection made on
//! one port is never used on another. ureq's own redirect following is off; redirects are
//! followed here instead (at most [`MAX_REDIRECTS`] hops by default, [`agent_with`] sets the
//! limit), each hop on the inner agent of the port it connects to. A redirect to a non-`https`
//! URL is not followed (the 3xx is returned).

use crate::client::Client;
use crate::error::{Error, Kind, Result};
use crate::tls::client_config;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use url::Url;

/// The most redirects one request follows (ureq's own default).
pub const MAX_REDIRECTS: usize = 5;

/// An HTTP proxy's address and `Proxy-Authorization` value, for CONNECT tunnels.
#[derive(Clone)]
struct HttpProxy {
    server: String,
    port: u16,
    authorization: Option<String>,
}

/// How the plain agents reach an origin: directly, through a CONNECT tunnel of their own
/// (an `http://` proxy), or through ureq's proxy support (SOCKS).
enum Route {
    Direct,
    Tunnel(HttpProxy),
    Ureq(ureq::Proxy),
}

fn route(proxy: Option<&str>) -> Result<Route> {
    let Some(p) = proxy else { return Ok(Route::Direct) };
    let bad = |e: String| Error::new(Kind::Config, format!("proxy {p}: {e}"));
    let checked = ureq::Proxy::new(p).map_err(|e| bad(e.to_string()))?;
    if !p.contains("://") || p.starts_with("http://") {
        let url = Url::parse(&if p.contains("://") { p.to_string() } else { format!("http://{p}") })
            .map_err(|e| bad(e.to_string()))?;
        let server = url.host_str().ok_or_else(|| bad("no host".to_string()))?.to_string();
        let authorization = (!url.username().is_empty()).then(|| {
            use base64::Engine;
            let creds = format!("{}:{}", url.username(), url.password().unwrap_or(""));
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(creds))
        });
        // ureq's default proxy port
        return Ok(Route::Tunnel(HttpProxy { server, port: url.port().unwrap_or(8080), authorization }));
    }
    Ok(Route::Ureq(checked))
}

/// The TLS connector of a plain agent behind an HTTP proxy: the TCP connection ureq opened
/// goes to the proxy (see [`Origins::builder`]); this asks it to `CONNECT host:port` and then
/// runs the port's TLS handshake in the tunnel. ureq's own HTTP proxy support writes the
/// request target in absolute form inside the tunnel, which origin servers need not accept;
/// through this one the origin sees an ordinary request.
struct Tunnel {
    proxy: HttpProxy,
    port: u16,
    tls: Arc<rustls::ClientConfig>,
}

/// The longest CONNECT answer head read from a proxy.
const MAX_PROXY_HEAD: usize = 16 * 1024;

impl ureq::TlsConnector for Tunnel {
    fn connect(
        &self,
        dns_name: &str,
        mut io: Box<dyn ureq::ReadWrite>,
    ) -> std::result::Result<Box<dyn ureq::ReadWrite>, ureq::Error> {
        use std::io::{Read, Write};
        let host = if dns_name.contains(':') && !dns_name.starts_with('[') {
            format!("[{dns_name}]")
        } else {
            dns_name.to_string()
        };
        let auth = self.proxy.authorization.as_ref().map(|a| format!("Proxy-Authorization: {a}\r\n"));
        let head = format!(
            "CONNECT {host}:{p} HTTP/1.1\r\nHost: {host}:{p}\r\n{}\r\n",
            auth.unwrap_or_default(),
            p = self.port
        );
        io.write_all(head.as_bytes())?;
        io.flush()?;
        // byte by byte: nothing of the tunnel's own bytes is read here
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        while !answer.ends_with(b"\r\n\r\n") {
            if answer.len() >= MAX_PROXY_HEAD || io.read(&mut byte)? == 0 {
                return Err(io_error(format!("proxy {}:{}: no answer to CONNECT", self.proxy.server, self.proxy.port)));
            }
            answer.push(byte[0]);
        }
        let status_line = String::from_utf8_lossy(&answer).lines().next().unwrap_or("").to_string();
        match status_line.split(' ').nth(1) {
            Some(code) if code.len() == 3 && code.starts_with('2') => self.tls.connect(dns_name, io),
            _ => Err(io_error(format!(
                "proxy {}:{} refused CONNECT {host}:{}: {status_line}",
                self.proxy.server, self.proxy.port, self.port
            ))),
        }
    }
}

/// One plain agent (no redirects, no middleware) per origin port, sharing the notary client
/// and the proxy.
struct Origins {
    client: Arc<Client>,
    route: Route,
    agents: Mutex<HashMap<u16, ureq::Agent>>,
}

impl Origins {
    fn builder(&self, port: u16) -> ureq::AgentBuilder {
        let tls = client_config(self.client.clone(), port);
        let b = ureq::AgentBuilder::new().redirects(0);
        match &self.route {
            Route::Direct => b.tls_config(tls),
            Route::Ureq(p) => b.tls_config(tls).proxy(p.clone()),
            Route::Tunnel(p) => {
                let addr = format!("{}:{}", p.server, p.port);
                // every name ureq connects to resolves to the proxy, and the tunnel goes to
                // the name ureq hands the TLS connector, on this agent's port
                b.resolver(move |_: &str| std::net::ToSocketAddrs::to_socket_addrs(&addr).map(Iterator::collect))
                    .tls_connector(Arc::new(Tunnel { proxy: p.clone(), port, tls }))
            }
        }
    }

    fn plain(&self, port: u16) -> ureq::Agent {
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        agents.entry(port).or_insert_with(|| self.builder(port).build()).clone()
    }
}

/// Sends every https request and every redirect hop on the plain agent of its port.
struct CheckedRedirects {
    origins: Arc<Origins>,
    redirects: usize,
}

fn io_error(message: String) -> ureq::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, message).into()
}

/// The method and URL of the next hop when `resp` is a redirect ureq would follow.
fn next_hop(resp: &ureq::Response, method: &str) -> Option<(String, Url)> {
    let new_method = match resp.status() {
        301..=303 if method == "GET" || method == "HEAD" => method,
        301..=303 => "GET",
        307 | 308 if ["GET", "HEAD", "OPTIONS", "TRACE"].contains(&method) => method,
        _ => return None,
    };
    let url = Url::parse(resp.get_url()).ok()?.join(resp.header("location")?).ok()?;
    (url.scheme() == "https").then(|| (new_method.to_string(), url))
}

/// A request's headers, each name once (several values joined as HTTP allows).
fn headers_of(request: &ureq::Request) -> Vec<(String, String)> {
    request
        .header_names()
        .into_iter()
        .map(|n| {
            let joined = request.all(&n).join(if n == "cookie" { "; " } else { ", " });
            (n, joined)
        })
        .collect()
}

impl ureq::Middleware for CheckedRedirects {
    fn handle(
        &self,
        request: ureq::Request,
        next: ureq::MiddlewareNext,
    ) -> std::result::Result<ureq::Response, ureq::Error> {
        let url = request.request_url()?.as_url().clone();
        let headers = headers_of(&request);
        let mut method = request.method().to_string();
        // An https request goes out on the plain agent of its own port (ureq connects with the
        // agent of the request it is handed; the body and the deadline stay the caller's).
        let request = match url.port_or_known_default() {
            Some(port) if url.scheme() == "https" => {
                headers.iter().fold(self.origins.plain(port).request_url(&method, &url), |r, (n, v)| r.set(n, v))
            }
            _ => request,
        };
        let mut resp = next.handle(request)?;
        if self.redirects == 0 {
            return Ok(resp);
        }
        // what ureq keeps on a redirect: every header but the body's length and credentials
        let kept: Vec<&(String, String)> = headers
            .iter()
            .filter(|(n, _)| !["content-length", "cookie", "authorization"].contains(&n.as_str()))
            .collect();
        for _ in 0..self.redirects {
            let Some((m, url)) = next_hop(&resp, &method) else { return Ok(resp) };
            let Some(port) = url.port_or_known_default() else { return Ok(resp) };
            let req = kept.iter().fold(self.origins.plain(port).request_url(&m, &url), |r, (n, v)| r.set(n, v));
            resp = req.call()?;
            method = m;
        }
        match next_hop(&resp, &method) {
            Some(_) => Err(io_error(format!("more than {} redirects", self.redirects))),
            None => Ok(resp),
        }
    }
}

/// A ureq agent for HTTPS to any origin, every connection checked for its own host and port
/// (`port`: the origin port it is first used for; other ports get their own verifier, session
/// store and pool), following redirects (at most [`MAX_REDIRECTS`]) to any https origin with
/// each hop checked the same way; `proxy` like `http://host:port` (an invalid proxy is a
/// `config` error).
pub fn agent(client: Arc<Client>, port: u16, proxy: Option<&str>) -> Result<ureq::Agent> {
    let (agent, origins) = build(client, proxy, MAX_REDIRECTS)?;
    origins.plain(port);
    Ok(agent)
}

/// [`agent`] following at most `redirects` redirects (0: a 3xx is the response).
pub fn agent_with(client: Arc<Client>, proxy: Option<&str>, redirects: usize) -> Result<ureq::Agent> {
    Ok(build(client, proxy, redirects)?.0)
}

fn build(client: Arc<Client>, proxy: Option<&str>, redirects: usize) -> Result<(ureq::Agent, Arc<Origins>)> {
    let route = route(proxy)?;
    // plain http (no TLS, nothing to check) goes out on the outer agent, through ureq's proxy
    let outer_proxy = match proxy {
        Some(p) => Some(ureq::Proxy::new(p).map_err(|e| Error::new(Kind::Config, format!("proxy {p}: {e}")))?),
        None => None,
    };
    let origins = Arc::new(Origins { client: client.clone(), route, agents: Mutex::new(HashMap::new()) });
    // The outer agent's own TLS config never connects: every https request is handed to the
    // plain agent of its port.
    let mut outer = ureq::AgentBuilder::new().tls_config(client_config(client, 443)).redirects(0);
    if let Some(p) = outer_proxy {
        outer = outer.proxy(p);
    }
    let outer = outer.middleware(CheckedRedirects { origins: origins.clone(), redirects }).build();
    Ok((outer, origins))
}

/// The port of an `https://` URL (443 when it names none), or `None` for other URLs.
pub fn https_port(url: &str) -> Option<u16> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let after_host = if authority.starts_with('[') { authority.split_once(']')?.1 } else { authority };
    match after_host.rsplit_once(':') {
        Some((_, p)) if !authority.starts_with('[') || after_host.starts_with(':') => p.parse().ok(),
        _ => Some(443),
    }
}

/// [`agent`] for the origin port of `url` (`https://host[:port]/...`).
pub fn agent_for(client: Arc<Client>, url: &str, proxy: Option<&str>) -> Result<ureq::Agent> {
    let port = https_port(url).ok_or_else(|| Error::new(Kind::Target, format!("not an https:// URL: {url}")))?;
    agent(client, port, proxy)
}
