"""The notary's one error hierarchy.

Two families never share a class:

* :class:`BadInput` -- the request or the data is bad (the client's fault). 4xx.
* :class:`IOFailure` -- an IO step failed (a target, the store, the network). 5xx.

Every error carries the HTTP status it maps to and a message safe to show the client.
The HTTP layer maps them to responses in exactly one place (``notary.http.errors``).
"""

from __future__ import annotations


class NotaryError(Exception):
    """Base of every error the notary raises on purpose."""

    status: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# -- bad input ------------------------------------------------------------------------------


class BadInput(NotaryError):
    """The request or data is malformed or not allowed."""

    status = 400


class BadTarget(BadInput):
    """The ``/target/<host>+<port>[/<ip>]`` path is malformed."""


class BadFingerprint(BadInput):
    """A fingerprint is not SHA-1 or SHA-256 hex."""


class MissingFingerprint(BadInput):
    """A POST did not carry a fingerprint."""


class TooLarge(BadInput):
    """An input is larger than its configured bound."""

    status = 413


class SlowRequest(BadInput):
    """The client did not send its request body within the body timeout."""

    status = 408


class TargetRefused(BadInput):
    """The target's address is refused by the notary's address policy."""

    status = 403


class RateLimited(BadInput):
    """The client sent more requests than its per-address rate limit allows."""

    status = 429

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BadConfig(BadInput):
    """A configuration value or file is invalid."""


class BadData(BadInput):
    """Stored or received data does not parse (e.g. a response body, a key file)."""


# -- IO failures ----------------------------------------------------------------------------


class IOFailure(NotaryError):
    """An IO step failed."""

    status = 503


class TargetUnreachable(IOFailure):
    """The target could not be resolved, connected to or handshaken with in time."""


class ProbeCapacityFull(IOFailure):
    """Every probe slot is busy; the client should retry shortly."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StoreUnavailable(IOFailure):
    """The durable store failed."""


class TooManyConnections(IOFailure):
    """The notary holds more open connections than its cap; the client should retry."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


__all__ = [
    "BadConfig",
    "BadData",
    "BadFingerprint",
    "BadInput",
    "BadTarget",
    "IOFailure",
    "MissingFingerprint",
    "NotaryError",
    "ProbeCapacityFull",
    "SlowRequest",
    "RateLimited",
    "StoreUnavailable",
    "TargetRefused",
    "TargetUnreachable",
    "TooLarge",
    "TooManyConnections",
]
