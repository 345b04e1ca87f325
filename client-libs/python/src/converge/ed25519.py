"""Ed25519 signature checks through libsodium (PyNaCl).

Every extended answer carries a fresh Ed25519 signature (the client's nonce makes each one
new, so none can be remembered), and checking it is on the path of every query. libsodium
checks one in about 55 us on a 2-CPU Intel Xeon against 112 us for OpenSSL 3.0 through
``cryptography`` (docs/benchmarks.md). It is also the stricter of the two: it refuses public
keys of small order and non-canonical points, under which OpenSSL accepts the signature
``R = identity, S = 0`` for any message.

Keys stay :class:`cryptography`'s ``Ed25519PublicKey`` objects (loaded once from a bundle);
only the check goes through libsodium. Failures raise ``cryptography``'s
:class:`InvalidSignature`, as ``Ed25519PublicKey.verify`` does, so callers keep one error.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nacl.bindings import crypto_sign_open
from nacl.exceptions import CryptoError

SIGNATURE_BYTES = 64


def verify(key: Ed25519PublicKey, signature: bytes, message: bytes) -> None:
    """Return if ``signature`` is ``key``'s Ed25519 signature of ``message``; else raise
    :class:`InvalidSignature` (whatever is wrong: length, encoding, a weak key, the check)."""
    if not isinstance(signature, bytes) or len(signature) != SIGNATURE_BYTES:
        raise InvalidSignature("an Ed25519 signature has 64 bytes")
    try:
        crypto_sign_open(signature + message, key.public_bytes_raw())
    except (CryptoError, TypeError, ValueError) as e:
        raise InvalidSignature("signature does not verify") from e


__all__ = ["SIGNATURE_BYTES", "verify"]
