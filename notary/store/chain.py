"""The stored form of a presented chain. Pure.

``b"C1"`` then, per certificate (leaf first), a 4-byte big-endian length and the DER bytes.
At most :data:`~notary.ca.verify.MAX_CHAIN_CERTS` certificates and
:data:`~notary.ca.verify.MAX_CHAIN_BYTES` DER bytes; anything else is
:class:`~notary.errors.BadData`.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from notary.ca.verify import MAX_CHAIN_BYTES, MAX_CHAIN_CERTS
from notary.errors import BadData

MAGIC = b"C1"
DIGEST = 32  # bytes of a certificate's SHA-256, the key of a deduplicated certificate
_LEN = struct.Struct(">I")


def check_chain(chain: Sequence[bytes]) -> None:
    """The bounds of a storable chain (BadData outside them)."""
    if not chain or len(chain) > MAX_CHAIN_CERTS or sum(map(len, chain)) > MAX_CHAIN_BYTES:
        raise BadData("a stored chain has 1 to 10 certificates and at most 64 KiB")


def encode_chain(chain: Sequence[bytes]) -> bytes:
    check_chain(chain)
    return MAGIC + b"".join(_LEN.pack(len(c)) + c for c in chain)


def decode_chain(raw: bytes) -> tuple[bytes, ...]:
    if not raw.startswith(MAGIC):
        raise BadData("stored chain has an unknown format")
    out: list[bytes] = []
    pos, total = len(MAGIC), 0
    while pos < len(raw):
        if len(out) >= MAX_CHAIN_CERTS or pos + _LEN.size > len(raw):
            raise BadData("stored chain is malformed")
        (n,) = _LEN.unpack_from(raw, pos)
        pos += _LEN.size
        total += n
        if n == 0 or total > MAX_CHAIN_BYTES or pos + n > len(raw):
            raise BadData("stored chain is malformed")
        out.append(raw[pos : pos + n])
        pos += n
    if not out:
        raise BadData("stored chain is empty")
    return tuple(out)


def chain_digests(chain: Sequence[bytes]) -> list[bytes]:
    """Each certificate's SHA-256 (leaf first): the deduplicated store's keys."""
    return [hashlib.sha256(c).digest() for c in chain]


__all__ = ["DIGEST", "chain_digests", "check_chain", "decode_chain", "encode_chain"]
