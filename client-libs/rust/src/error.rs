//! Errors: every fallible function returns [`Error`], whose [`Error::kind`] is a stable word
//! shared with the other languages' libraries and the test vectors.

use std::fmt;

/// Which kind of failure: wrong data (retrying does not help) or a failed IO step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// A fingerprint, target, bundle, configuration or response is wrong.
    BadInput,
    /// A connection, the TLS handshake, a pin, a timeout or the cache database failed.
    Io,
}

/// The error kinds shared with the other libraries and the vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Fingerprint,
    Target,
    Response,
    Signature,
    Bundle,
    Config,
    Unreachable,
    Pin,
    CacheIo,
    Timeout,
    Vote,
}

impl Kind {
    /// The word the vectors and the conformance CLI use.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Fingerprint => "fingerprint",
            Kind::Target => "target",
            Kind::Response => "response",
            Kind::Signature => "signature",
            Kind::Bundle => "bundle",
            Kind::Config => "config",
            Kind::Unreachable => "unreachable",
            Kind::Pin => "pin",
            Kind::CacheIo => "cache-io",
            Kind::Timeout => "timeout",
            Kind::Vote => "vote",
        }
    }

    /// The family of this kind.
    pub fn family(self) -> Family {
        match self {
            Kind::Unreachable | Kind::Pin | Kind::CacheIo | Kind::Timeout => Family::Io,
            _ => Family::BadInput,
        }
    }
}

/// Every error of this crate.
#[derive(Debug, Clone)]
pub struct Error {
    kind: Kind,
    message: String,
}

impl Error {
    /// An error of `kind` saying `message`.
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into() }
    }

    /// What failed.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Bad input or IO.
    pub fn family(&self) -> Family {
        self.kind.family()
    }

    /// The message without the kind.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "converge: {}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for Error {}

/// This crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn err<T>(kind: Kind, message: impl Into<String>) -> Result<T> {
    Err(Error::new(kind, message))
}
