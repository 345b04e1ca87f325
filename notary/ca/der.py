"""Just enough DER to say *which* extension of a certificate does not parse.

``cryptography`` parses a certificate's extensions all at once and its error rarely names
the culprit ("error parsing asn1 value: ... location: [0]"). To give a one-line reason such
as "the leaf's authorityInfoAccess extension does not parse", :func:`broken_extension`
walks the DER of the certificate itself (definite lengths only, as DER requires; every read
is bounds-checked) and loads a copy holding one extension at a time. Pure; bounded by the
certificate's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography import x509

SEQUENCE = 0x30
OID = 0x06
EXPLICIT_3 = 0xA3  # [3] EXPLICIT Extensions in TBSCertificate


class DERError(ValueError):
    """The bytes are not the DER this module expects."""


@dataclass(frozen=True, slots=True)
class TLV:
    tag: int
    value: bytes

    def encode(self) -> bytes:
        return bytes([self.tag]) + encode_length(len(self.value)) + self.value


def encode_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def read(data: bytes, pos: int = 0) -> tuple[TLV, int]:
    """The TLV at ``pos`` and the position after it; :class:`DERError` if it overruns."""
    if pos + 2 > len(data):
        raise DERError("truncated tag or length")
    tag, first = data[pos], data[pos + 1]
    pos += 2
    if first < 0x80:
        n = first
    else:
        k = first & 0x7F
        if k == 0 or k > 4 or pos + k > len(data):
            raise DERError("bad length")
        n = int.from_bytes(data[pos : pos + k], "big")
        pos += k
    if pos + n > len(data):
        raise DERError("value runs past the end")
    return TLV(tag, data[pos : pos + n]), pos + n


def children(value: bytes) -> list[TLV]:
    out, pos = [], 0
    while pos < len(value):
        tlv, pos = read(value, pos)
        out.append(tlv)
    return out


def oid_text(raw: bytes) -> str:
    """Dotted text of an OBJECT IDENTIFIER's content bytes."""
    if not raw or raw[-1] & 0x80:
        raise DERError("bad OID")
    arcs: list[int] = []
    n = 0
    for b in raw:
        n = (n << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(n)
            n = 0
    first = min(arcs[0] // 40, 2)
    return ".".join(str(a) for a in (first, arcs[0] - 40 * first, *arcs[1:]))


def extension_name(dotted: str) -> str:
    """``cryptography``'s name for a known extension OID (``authorityInfoAccess``), else
    the dotted OID."""
    name = getattr(x509.ObjectIdentifier(dotted), "_name", None)
    return name if isinstance(name, str) and name != "Unknown OID" else dotted


def broken_extension(cert_der: bytes) -> str | None:
    """Which extension makes the certificate's extensions unparseable: ``"X"`` (it does
    not parse alone), ``"duplicate X"``, or ``None`` when none alone is to blame."""
    try:
        (cert,) = children(cert_der)
        tbs, alg, sig = children(cert.value)
        fields = children(tbs.value)
        where = next(i for i, f in enumerate(fields) if f.tag == EXPLICIT_3)
        (exts,) = children(fields[where].value)
        items = children(exts.value)
        oids = [oid_text(children(e.value)[0].value) for e in items]
    except (DERError, StopIteration, ValueError):
        return None
    seen: set[str] = set()
    for dotted in oids:
        if dotted in seen:
            return f"duplicate {extension_name(dotted)}"
        seen.add(dotted)
    for dotted, ext in zip(oids, items, strict=True):
        alone = list(fields)
        alone[where] = TLV(EXPLICIT_3, TLV(SEQUENCE, ext.encode()).encode())
        body = TLV(SEQUENCE, b"".join(f.encode() for f in alone)).encode()
        der = TLV(SEQUENCE, body + alg.encode() + sig.encode()).encode()
        try:
            x509.load_der_x509_certificate(der).extensions  # noqa: B018 - parse it
        except (ValueError, x509.DuplicateExtension, x509.UnsupportedGeneralNameType):
            return extension_name(dotted)
    return None


__all__ = ["DERError", "TLV", "broken_extension", "children", "extension_name", "oid_text",
           "read"]
