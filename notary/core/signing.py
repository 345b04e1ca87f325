"""Signatures over response bytes (pure computation; keys are loaded by the IO layer)."""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa


class LegacySigner:
    """RSASSA-PKCS1-v1_5 with SHA-1, as the legacy protocol requires."""

    def __init__(self, key: rsa.RSAPrivateKey) -> None:
        self._key = key

    def sign(self, payload: bytes) -> bytes:
        return self._key.sign(payload, padding.PKCS1v15(), hashes.SHA1())

    @property
    def public_key(self) -> rsa.RSAPublicKey:
        return self._key.public_key()


def verify_legacy(public_key: rsa.RSAPublicKey, payload: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is a valid legacy signature of ``payload`` under the key."""
    try:
        public_key.verify(signature, payload, padding.PKCS1v15(), hashes.SHA1())
    except InvalidSignature:
        return False
    return True


__all__ = ["LegacySigner", "verify_legacy"]
