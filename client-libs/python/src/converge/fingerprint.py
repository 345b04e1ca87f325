"""Certificate fingerprints: parsing, normalisation and computation (pure).

Accepted text forms: 40 (SHA-1) or 64 (SHA-256) hexadecimal digits, any case, either with no
separators or with a colon between every pair of digits (``8F:C0:...``). Surrounding ASCII
whitespace is ignored. Anything else -- mixed separators, other separators, odd lengths,
other digest sizes, non-hex characters, more than :data:`MAX_FINGERPRINT_TEXT` characters --
raises :class:`~converge.errors.FingerprintError`.

The canonical form, used on the wire and in the cache, is upper-case colon-separated hex
(59 characters for SHA-1, as the legacy protocol sends it).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

from .errors import FingerprintError

Algorithm = Literal["sha1", "sha256"]

MAX_FINGERPRINT_TEXT = 200
_SIZES: dict[int, Algorithm] = {20: "sha1", 32: "sha256"}
_COLON_FORM = re.compile(r"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2})*")
_PLAIN_FORM = re.compile(r"[0-9A-Fa-f]+")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """A certificate digest with its algorithm."""

    algorithm: Algorithm
    digest: bytes

    def colon_hex(self) -> str:
        """Canonical form: ``8F:C0:...`` (upper case, colon separated)."""
        return self.digest.hex(":").upper()

    def plain_hex(self) -> str:
        """Lower-case hex without separators."""
        return self.digest.hex()

    def __str__(self) -> str:
        return self.colon_hex()


def parse_fingerprint(text: str) -> Fingerprint:
    """Parse a SHA-1 or SHA-256 fingerprint in any accepted form (see the module docstring)."""
    if not isinstance(text, str):
        raise FingerprintError("fingerprint must be a string")
    if len(text) > MAX_FINGERPRINT_TEXT:
        raise FingerprintError(f"fingerprint longer than {MAX_FINGERPRINT_TEXT} characters")
    s = text.strip(" \t\r\n")
    if not s:
        raise FingerprintError("empty fingerprint")
    if ":" in s:
        if not _COLON_FORM.fullmatch(s):
            raise FingerprintError("colon-separated fingerprints need two hex digits per byte")
        hexdigits = s.replace(":", "")
    else:
        if not _PLAIN_FORM.fullmatch(s):
            raise FingerprintError("fingerprint contains a non-hex character")
        if len(s) % 2:
            raise FingerprintError("odd number of hex digits")
        hexdigits = s
    digest = bytes.fromhex(hexdigits)
    algorithm = _SIZES.get(len(digest))
    if algorithm is None:
        raise FingerprintError(
            f"a fingerprint has 20 (SHA-1) or 32 (SHA-256) bytes, not {len(digest)}"
        )
    return Fingerprint(algorithm, digest)


def as_fingerprint(value: str | Fingerprint) -> Fingerprint:
    """Accept either a :class:`Fingerprint` or its text form."""
    if isinstance(value, Fingerprint):
        return value
    return parse_fingerprint(value)


def fingerprint_of(der: bytes, algorithm: Algorithm = "sha1") -> Fingerprint:
    """Fingerprint of a DER-encoded certificate."""
    if algorithm == "sha1":
        return Fingerprint("sha1", hashlib.sha1(der).digest())
    if algorithm == "sha256":
        return Fingerprint("sha256", hashlib.sha256(der).digest())
    raise FingerprintError(f"unknown algorithm {algorithm!r}")
