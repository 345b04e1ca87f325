//! Ask Convergence notaries whether the certificate you were shown for `host:port` is the one
//! they see from their own network paths.
//!
//! Same contract as the Python, C, Go, Java and TypeScript libraries: the shared configuration
//! directory and `.notary` bundles, the SQLite cache of the 2011 add-on, notaries asked in
//! parallel under the consensus, majority or minority policy with stand-aside, legacy
//! Convergence v1 answers (RSA/SHA-1 over the exact bytes) and extended `converge-answer/1`
//! answers (Ed25519, RFC 8785 canonical JSON, bound to target, fingerprint, nonce and time),
//! and the bounce relay.
//!
//! - [`converge`] / [`Client`]: a verdict for (host, port, fingerprint);
//! - [`tls::client_config`] / [`tls::ConvergeVerifier`]: the rustls hook;
//! - [`http::agent`]: a ureq agent on that hook (feature `ureq`, on by default).

pub mod bundle;
pub mod cache;
pub mod client;
pub mod config;
pub mod error;
pub mod extended;
pub mod fingerprint;
#[cfg(feature = "ureq")]
pub mod http;
pub mod json;
pub mod legacy;
pub mod notary_io;
pub mod policy;
pub mod tls;
pub mod transparency;
pub mod vectors;

pub use bundle::{parse_bundle, Bundle, NotaryHost, SigningKey};
pub use client::{converge, shared_client, CheckOptions, Client, Verdict};
pub use config::{load_config, Config, ExtendedMode};
pub use error::{Error, Family, Kind, Result};
pub use fingerprint::{parse_fingerprint, Algorithm, Fingerprint};
pub use notary_io::NotaryResult;
pub use policy::{Policy, Vote};
pub use tls::{ConvergeVerifier, NotTrusted};

/// This crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
