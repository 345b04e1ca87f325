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

A bundle's keys (signing keys, the log's key, witnesses' keys) are also refused when they are
read if they are weak (:func:`weak_key`): of small order or not in canonical form. Every
client library makes the same check by the same rule (the shared vectors hold them to it),
so no client depends on its Ed25519 library refusing such keys at signature time (OpenSSL
and Go's crypto/ed25519 do not).
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nacl.bindings import crypto_sign_open
from nacl.exceptions import CryptoError

SIGNATURE_BYTES = 64
KEY_BYTES = 32
_P = 2**255 - 19  # the field prime; an encoded y at or above it is not canonical
# The y coordinates of the eight points of small order (1, 2, 4 and 8): the identity (y = 1),
# (0, -1), the two points with y = 0 and the four with y = +-y8. An encoding's top bit is the
# sign of x and is ignored here: with x = 0 it is not even a valid sign.
_SMALL_ORDER_Y = frozenset({
    0,
    1,
    _P - 1,
    0x05FC536D880238B13933C6D305ACDFD5F098EFF289F4C345B027B2C28F95E826,
    _P - 0x05FC536D880238B13933C6D305ACDFD5F098EFF289F4C345B027B2C28F95E826,
})


def verify(key: Ed25519PublicKey, signature: bytes, message: bytes) -> None:
    """Return if ``signature`` is ``key``'s Ed25519 signature of ``message``; else raise
    :class:`InvalidSignature` (whatever is wrong: length, encoding, a weak key, the check)."""
    if not isinstance(signature, bytes) or len(signature) != SIGNATURE_BYTES:
        raise InvalidSignature("an Ed25519 signature has 64 bytes")
    try:
        crypto_sign_open(signature + message, key.public_bytes_raw())
    except (CryptoError, TypeError, ValueError) as e:
        raise InvalidSignature("signature does not verify") from e


def weak_key(raw: bytes) -> str | None:
    """Why the 32-byte Ed25519 public key ``raw`` must not be trusted, or None.

    Weak: a point of small order (any message has a signature under it that some libraries
    accept: ``R = identity, S = 0`` under the identity) or a y coordinate encoded at or above
    the field prime (libraries disagree on whether such an encoding is a key at all)."""
    if len(raw) != KEY_BYTES:
        return "an Ed25519 public key has 32 bytes"
    y = int.from_bytes(raw, "little") & ((1 << 255) - 1)
    if y >= _P:
        return "an Ed25519 public key not in canonical form"
    if y in _SMALL_ORDER_Y:
        return "an Ed25519 public key of small order"
    return None


__all__ = ["KEY_BYTES", "SIGNATURE_BYTES", "verify", "weak_key"]
