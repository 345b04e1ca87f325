//! HTTPS with ureq, decided by the notaries: [`agent`] builds a `ureq::Agent` for one origin
//! port (optionally through an HTTP CONNECT proxy; the notaries are asked about the origin).
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

use crate::client::Client;
use crate::error::{Error, Kind, Result};
use crate::tls::client_config;
use std::sync::Arc;

/// A ureq agent for HTTPS to origins on `port`; `proxy` like `http://host:port` (an invalid
/// proxy is a `config` error).
pub fn agent(client: Arc<Client>, port: u16, proxy: Option<&str>) -> Result<ureq::Agent> {
    let mut b = ureq::AgentBuilder::new().tls_config(client_config(client, port));
    if let Some(p) = proxy {
        b = b.proxy(ureq::Proxy::new(p).map_err(|e| Error::new(Kind::Config, format!("proxy {p}: {e}")))?);
    }
    Ok(b.build())
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
