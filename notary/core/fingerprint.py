"""Certificate fingerprints: parsing, normalisation and canonical forms.

Rules:

* A fingerprint is the SHA-1 (20 bytes) or SHA-256 (32 bytes) digest of a DER certificate.
* Input is accepted in any case, either with no separators or with a ``:`` between every
  pair of hex digits, surrounded by optional ASCII white space (space, tab, CR, LF), at most
  :data:`MAX_INPUT` characters in all. Anything else (``-`` or space separators, mixed or
  partial separators, a prefix such as ``sha1:``) is rejected. This is the clients' rule too:
  every case of ``client-libs/vectors/fingerprints.json`` runs through this parser in the
  tests.
* The canonical (wire) form is upper-case hex, colon separated, as the legacy protocol uses.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

from notary.errors import BadFingerprint

Algorithm = Literal["sha1", "sha256"]

_LENGTHS: dict[int, Algorithm] = {20: "sha1", 32: "sha256"}
_SPACE = " \t\r\n"
_COLON_FORM = re.compile(r"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2})*")
_PLAIN_FORM = re.compile(r"[0-9A-Fa-f]+")
MAX_INPUT = 200  # characters; the longest legal form (SHA-256 with separators) is 95


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """A certificate digest and the algorithm that produced it."""

    algorithm: Algorithm
    digest: bytes

    @property
    def canonical(self) -> str:
        """Upper-case colon-separated hex (``8F:C0:...``)."""
        return colon_hex(self.digest)

    def matches(self, sha1: bytes, sha256: bytes) -> bool:
        """Whether this fingerprint names the certificate with these digests."""
        return self.digest == (sha1 if self.algorithm == "sha1" else sha256)


def colon_hex(digest: bytes) -> str:
    """``b'\\x8f\\xc0'`` -> ``'8F:C0'``."""
    return digest.hex(":").upper()


def parse_fingerprint(text: str) -> Fingerprint:
    """Parse a SHA-1 or SHA-256 fingerprint in any accepted form (see the module rules).

    Raises :class:`BadFingerprint` with a message that says what is wrong.
    """
    if len(text) > MAX_INPUT:
        raise BadFingerprint(f"fingerprint too long ({len(text)} characters)")
    s = text.strip(_SPACE)
    if not s:
        raise BadFingerprint("empty fingerprint")
    if ":" in s:
        if not _COLON_FORM.fullmatch(s):
            raise BadFingerprint("fingerprint separators must divide it into byte pairs")
        s = s.replace(":", "")
    elif not _PLAIN_FORM.fullmatch(s):
        raise BadFingerprint("fingerprint must be hexadecimal")
    if len(s) % 2:
        raise BadFingerprint("fingerprint has an odd number of hex digits")
    digest = bytes.fromhex(s)
    algorithm = _LENGTHS.get(len(digest))
    if algorithm is None:
        raise BadFingerprint(
            f"fingerprint is {len(digest)} bytes; expected 20 (SHA-1) or 32 (SHA-256)"
        )
    return Fingerprint(algorithm, digest)


@dataclass(frozen=True, slots=True)
class CertDigests:
    """Both digests of one DER certificate."""

    sha1: bytes
    sha256: bytes

    @classmethod
    def of(cls, der: bytes) -> CertDigests:
        return cls(hashlib.sha1(der).digest(), hashlib.sha256(der).digest())


__all__ = ["Algorithm", "CertDigests", "Fingerprint", "colon_hex", "parse_fingerprint"]
