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
//! sessions by name, so one `ClientConfig` can only vouch for one origin port. The agent is
//! therefore built for one port; ureq's own redirect following is off, and redirects are
//! followed here instead (at most [`MAX_REDIRECTS`] hops, each on an agent with its own
//! verifier, TLS session store and connection pool for the port it connects to). A request
//! whose URL names another port than the agent's is refused with an error (use
//! [`agent_for`]); a redirect to a non-`https` URL is not followed (the 3xx is returned).

use crate::client::Client;
use crate::error::{Error, Kind, Result};
use crate::tls::client_config;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use url::Url;

/// The most redirects one request follows (ureq's own default).
pub const MAX_REDIRECTS: usize = 5;

/// One plain agent (no redirects, no middleware) per origin port, sharing the notary client
/// and the proxy.
struct Origins {
    client: Arc<Client>,
    proxy: Option<ureq::Proxy>,
    agents: Mutex<HashMap<u16, ureq::Agent>>,
}

impl Origins {
    fn builder(&self, port: u16) -> ureq::AgentBuilder {
        let b = ureq::AgentBuilder::new().tls_config(client_config(self.client.clone(), port)).redirects(0);
        match &self.proxy {
            Some(p) => b.proxy(p.clone()),
            None => b,
        }
    }

    fn plain(&self, port: u16) -> ureq::Agent {
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        agents.entry(port).or_insert_with(|| self.builder(port).build()).clone()
    }
}

/// Follows redirects for an agent made for `port`: each hop on the plain agent of its port.
struct CheckedRedirects {
    origins: Arc<Origins>,
    port: u16,
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

impl ureq::Middleware for CheckedRedirects {
    fn handle(
        &self,
        request: ureq::Request,
        next: ureq::MiddlewareNext,
    ) -> std::result::Result<ureq::Response, ureq::Error> {
        let url = request.request_url()?.as_url().clone();
        if url.scheme() == "https" && url.port_or_known_default() != Some(self.port) {
            return Err(io_error(format!(
                "this agent checks origins on port {}, not {url} (converge::http::agent_for)",
                self.port
            )));
        }
        // what ureq keeps on a redirect: every header but the body's length and credentials
        let headers: Vec<(String, String)> = request
            .header_names()
            .into_iter()
            .filter(|n| !["content-length", "cookie", "authorization"].contains(&n.as_str()))
            .flat_map(|n| request.all(&n).into_iter().map(|v| (n.clone(), v.to_string())).collect::<Vec<_>>())
            .collect();
        let mut method = request.method().to_string();
        let mut resp = next.handle(request)?;
        for _ in 0..MAX_REDIRECTS {
            let Some((m, url)) = next_hop(&resp, &method) else { return Ok(resp) };
            let Some(port) = url.port_or_known_default() else { return Ok(resp) };
            let mut req = self.origins.plain(port).request_url(&m, &url);
            for (name, value) in &headers {
                req = req.set(name, value);
            }
            resp = req.call()?;
            method = m;
        }
        match next_hop(&resp, &method) {
            Some(_) => Err(io_error(format!("more than {MAX_REDIRECTS} redirects"))),
            None => Ok(resp),
        }
    }
}

/// A ureq agent for HTTPS to origins on `port`, following redirects to any https origin with
/// each hop checked for its own host and port; `proxy` like `http://host:port` (an invalid
/// proxy is a `config` error).
pub fn agent(client: Arc<Client>, port: u16, proxy: Option<&str>) -> Result<ureq::Agent> {
    let proxy = match proxy {
        Some(p) => Some(ureq::Proxy::new(p).map_err(|e| Error::new(Kind::Config, format!("proxy {p}: {e}")))?),
        None => None,
    };
    let origins = Arc::new(Origins { client, proxy, agents: Mutex::new(HashMap::new()) });
    Ok(origins.builder(port).middleware(CheckedRedirects { origins: origins.clone(), port }).build())
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
