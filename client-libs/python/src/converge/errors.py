"""The two error families of the client.

* :class:`BadInput` -- the data is wrong: a fingerprint, a notary response, a signature, a
  bundle or a configuration file does not satisfy its rules. Retrying does not help.
* :class:`IOFailure` -- an IO step failed: a connection, a TLS handshake, a pin check, a
  timeout, the cache database. Retrying later may help.

Every error has a stable ``kind`` string; the shared test vectors name these kinds, so other
languages' libraries use the same words.
"""

from __future__ import annotations

import ssl


class ConvergeError(Exception):
    """Base class of every error raised by this package."""

    kind = "error"


class BadInput(ConvergeError, ValueError):
    """Data that breaks a rule (a 400-class problem)."""

    kind = "bad-input"


class FingerprintError(BadInput):
    kind = "fingerprint"


class TargetError(BadInput):
    """A target host name or port that cannot be put into a notary request."""

    kind = "target"


class ResponseError(BadInput):
    """A notary response that cannot be parsed (framing, JSON shape, limits)."""

    kind = "response"


class SignatureError(BadInput):
    """A notary response whose signature does not verify."""

    kind = "signature"


class BundleError(BadInput):
    kind = "bundle"


class ConfigError(BadInput):
    kind = "config"


class IOFailure(ConvergeError, OSError):
    """An IO step failed (a 5xx/connectivity-class problem)."""

    kind = "io"


class NotaryUnreachable(IOFailure):
    kind = "unreachable"


class PinMismatch(IOFailure):
    """The notary's TLS certificate is not the one pinned by its bundle."""

    kind = "pin"


class CacheIOError(IOFailure):
    kind = "cache-io"


class TargetIOError(IOFailure):
    """Fetching the target's own certificate failed (used by ``converge check``)."""

    kind = "target-io"


class NotTrusted(ConvergeError, ssl.SSLCertVerificationError):
    """Raised by the TLS hooks when converge does not trust the peer's certificate.

    It is an :class:`ssl.SSLCertVerificationError`, so HTTP libraries report it the way they
    report a failed CA validation. ``verdict`` carries the full decision.
    """

    kind = "not-trusted"

    def __init__(self, message: str, verdict: object = None) -> None:
        super().__init__(message)
        self.verdict = verdict
