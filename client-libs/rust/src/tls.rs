//! The TLS hook: a rustls [`ServerCertVerifier`] that asks the notaries about the server's
//! certificate for `host:port` inside the handshake, so a connection whose certificate they do
//! not vouch for fails before any application data is written. Every rustls-based client takes
//! it (ureq: [`crate::http::agent`]; reqwest: `use_preconfigured_tls`; hyper-rustls, tokio-rustls).
//!
//! rustls tells a verifier the server name but not the port, so one verifier (and one
//! `ClientConfig`) serves one origin port: [`client_config`] takes it.

use crate::client::{Client, Verdict};
use crate::notary_io::provider;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, OtherError, SignatureScheme};
use std::fmt;
use std::sync::Arc;

/// The notaries did not vouch for the server's certificate, or it could not be checked.
#[derive(Debug, Clone)]
pub struct NotTrusted {
    pub host: String,
    pub port: u16,
    /// The verdict, when one was reached.
    pub verdict: Option<Verdict>,
    /// Why no verdict was reached.
    pub error: Option<crate::Error>,
}

impl fmt::Display for NotTrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.verdict, &self.error) {
            (Some(v), _) => {
                write!(f, "converge does not trust {}:{}: certificate not trusted: {}", self.host, self.port, v.reason)
            }
            (None, Some(e)) => {
                write!(f, "converge does not trust {}:{}: certificate not checked: {e}", self.host, self.port)
            }
            (None, None) => write!(f, "converge does not trust {}:{}", self.host, self.port),
        }
    }
}

impl std::error::Error for NotTrusted {}

/// Finds a [`NotTrusted`] in an error's chain (through `std::io::Error` and rustls errors), as
/// HTTP clients wrap the handshake's error.
pub fn not_trusted<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a NotTrusted> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(x) = cur {
        if let Some(n) = x.downcast_ref::<NotTrusted>() {
            return Some(n);
        }
        if let Some(rustls::Error::InvalidCertificate(CertificateError::Other(o))) = x.downcast_ref::<rustls::Error>() {
            if let Some(n) = o.0.downcast_ref::<NotTrusted>() {
                return Some(n);
            }
        }
        if let Some(io) = x.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                if let Some(n) = not_trusted(inner) {
                    return Some(n);
                }
            }
        }
        cur = x.source();
    }
    None
}

/// Asks the notaries about every server certificate for one origin port.
#[derive(Debug)]
pub struct ConvergeVerifier {
    client: Arc<Client>,
    port: u16,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ConvergeVerifier {
    /// A verifier for connections to `port` (the origin's, also behind a proxy).
    pub fn new(client: Arc<Client>, port: u16) -> ConvergeVerifier {
        ConvergeVerifier { client, port, provider: provider() }
    }
}

fn host_of(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(d) => d.as_ref().to_string(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        _ => String::new(),
    }
}

impl ServerCertVerifier for ConvergeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let host = host_of(server_name);
        let refuse =
            |n: NotTrusted| Err(rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(n)))));
        match self.client.check_certificate(&host, self.port, end_entity.as_ref()) {
            Ok(v) if v.trusted => Ok(ServerCertVerified::assertion()),
            Ok(v) => refuse(NotTrusted { host, port: self.port, verdict: Some(v), error: None }),
            Err(e) => refuse(NotTrusted { host, port: self.port, verdict: None, error: Some(e) }),
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A rustls `ClientConfig` whose certificate check asks the notaries about `host:port`
/// (the host is the connection's server name) instead of CA validation.
pub fn client_config(client: Arc<Client>, port: u16) -> Arc<ClientConfig> {
    let v = ConvergeVerifier::new(client, port);
    let cfg = ClientConfig::builder_with_provider(v.provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS 1.2 and 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(v))
        .with_no_client_auth();
    Arc::new(cfg)
}
