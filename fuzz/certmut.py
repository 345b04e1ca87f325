"""Malformed certificates by DER-level edits of a valid chain (for tests and fuzzing).

The notary's own DER reader (:mod:`notary.ca.der`, definite lengths only, which is all DER
has), chains from the shared synthetic PKI (:mod:`replay.pki`), the surgery on a leaf's
``TBSCertificate`` that each defect needs, and re-signing with the issuer's key so that the
defect is the only thing wrong (except where the defect *is* the signature).
:func:`defects` lists the named cases; :func:`mutate_extensions` is the fuzz target's
mutator.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding

from notary.ca.der import EXPLICIT_3, OID, SEQUENCE, TLV, children, read
from replay.pki import key_pem, make_ca, make_leaf, new_key

# -- DER: the notary's reader (notary.ca.der) and the two writers the surgery needs -------------

OCTET_STRING = 0x04
BOOLEAN = 0x01
INTEGER = 0x02


def seq(items: list[TLV], tag: int = SEQUENCE) -> TLV:
    return TLV(tag, b"".join(i.encode() for i in items))


def oid(dotted: str) -> TLV:
    parts = [int(p) for p in dotted.split(".")]
    body = [40 * parts[0] + parts[1], *parts[2:]]
    out = bytearray()
    for n in body:
        chunk = [n & 0x7F]
        n >>= 7
        while n:
            chunk.append(0x80 | (n & 0x7F))
            n >>= 7
        out += bytes(reversed(chunk))
    return TLV(OID, bytes(out))


# -- a valid chain to start from --------------------------------------------------------------


@dataclass
class Chain:
    root: x509.Certificate
    root_key: ec.EllipticCurvePrivateKey
    leaf: x509.Certificate
    leaf_key: ec.EllipticCurvePrivateKey

    @property
    def root_der(self) -> bytes:
        return self.root.public_bytes(Encoding.DER)


def make_chain(host: str, now: dt.datetime, *, san: list[str] | None = None) -> Chain:
    """A root and a leaf for ``host`` (EC P-256), valid around ``now`` (the shared synthetic
    PKI, :mod:`replay.pki`)."""
    root = make_ca("Mutation Test Root", "", now, serial=1)
    leaf_key = new_key()
    leaf = make_leaf(san or [host], root, leaf_key, now - dt.timedelta(days=1))
    return Chain(root.cert, root.key, leaf, leaf_key)


# -- surgery ----------------------------------------------------------------------------------


def split_cert(der: bytes) -> tuple[list[TLV], TLV, TLV]:
    """(TBS fields, signature algorithm, signature value) of a certificate."""
    cert, _ = read(der)
    tbs, alg, sig = children(cert.value)
    return children(tbs.value), alg, sig


def assemble(tbs_fields: list[TLV], alg: TLV, key: ec.EllipticCurvePrivateKey) -> bytes:
    """Sign the TBS with ``key`` (ECDSA SHA-256, the algorithm ``alg`` names) and wrap it."""
    tbs = seq(tbs_fields).encode()
    sig = key.sign(tbs, ec.ECDSA(hashes.SHA256()))
    return TLV(SEQUENCE, tbs + alg.encode() + TLV(0x03, b"\x00" + sig).encode()).encode()


def _extensions(fields: list[TLV]) -> tuple[int, list[TLV]]:
    for i, f in enumerate(fields):
        if f.tag == EXPLICIT_3:
            (exts,) = children(f.value)
            return i, children(exts.value)
    raise ValueError("the certificate has no extensions")


def _with_extensions(fields: list[TLV], exts: list[TLV]) -> list[TLV]:
    i, _ = _extensions(fields)
    out = list(fields)
    out[i] = seq([seq(exts)], EXPLICIT_3)
    return out


def _ext_oid(ext: TLV) -> bytes:
    return children(ext.value)[0].value


def _replace_value(ext: TLV, value: bytes) -> TLV:
    parts = children(ext.value)
    parts[-1] = TLV(OCTET_STRING, value)
    return seq(parts)


OIDS = {
    "san": oid("2.5.29.17").value,
    "eku": oid("2.5.29.37").value,
    "aia": oid("1.3.6.1.5.5.7.1.1").value,
}


def edit_leaf(chain: Chain, edit: Callable[[list[TLV]], list[TLV]], *, resign: bool = True
              ) -> bytes:
    fields, alg, sig = split_cert(chain.leaf.public_bytes(Encoding.DER))
    new = edit(fields)
    if resign:
        return assemble(new, alg, chain.root_key)
    return TLV(SEQUENCE, seq(new).encode() + alg.encode() + sig.encode()).encode()


def _set_ext(name: str, value: bytes, critical: bool = False) -> Callable[[list[TLV]], list[TLV]]:
    def edit(fields: list[TLV]) -> list[TLV]:
        _, exts = _extensions(fields)
        hit = [e for e in exts if _ext_oid(e) == OIDS[name]]
        if hit:
            exts = [(_replace_value(e, value) if e is hit[0] else e) for e in exts]
        else:
            crit = [TLV(BOOLEAN, b"\xff")] if critical else []
            exts = [*exts, seq([TLV(OID, OIDS[name]), *crit, TLV(OCTET_STRING, value)])]
        return _with_extensions(fields, exts)
    return edit


def _duplicate_first(fields: list[TLV]) -> list[TLV]:
    _, exts = _extensions(fields)
    return _with_extensions(fields, [*exts, exts[0]])


def _unknown_critical(fields: list[TLV]) -> list[TLV]:
    _, exts = _extensions(fields)
    extra = seq([oid("1.3.6.1.4.1.55555.1"), TLV(BOOLEAN, b"\xff"),
                 TLV(OCTET_STRING, TLV(0x05, b"").encode())])
    return _with_extensions(fields, [*exts, extra])


def _serial(value: bytes) -> Callable[[list[TLV]], list[TLV]]:
    def edit(fields: list[TLV]) -> list[TLV]:
        out = list(fields)
        out[1] = TLV(INTEGER, value)  # fields[0] is [0] version, [1] the serial
        return out
    return edit


def _truncated_signature(chain: Chain) -> bytes:
    fields, alg, sig = split_cert(chain.leaf.public_bytes(Encoding.DER))
    short = TLV(0x03, sig.value[: len(sig.value) // 2])
    return TLV(SEQUENCE, seq(fields).encode() + alg.encode() + short.encode()).encode()


@dataclass(frozen=True)
class Defect:
    name: str
    host: str
    leaf: bytes  # DER of the defective leaf, issued by the chain's root
    root: bytes  # DER of the root that issued it
    key_pem: bytes  # the leaf's private key (PKCS#8 PEM), to serve it over TLS


def defects(now: dt.datetime) -> list[Defect]:
    """Every named defect, each on a fresh chain for its own host name."""
    out: list[Defect] = []

    def add(name: str, host: str, build: Callable[[Chain], bytes],
            san: list[str] | None = None) -> None:
        chain = make_chain(host, now, san=san)
        out.append(Defect(name, host, build(chain), chain.root_der, key_pem(chain.leaf_key)))

    add("san-not-der", "san.test", lambda c: edit_leaf(c, _set_ext("san", b"\x30\x05\x82\x03ab")))
    add("empty-eku", "eku.test", lambda c: edit_leaf(c, _set_ext("eku", b"\x30\x00")))
    add("duplicate-extension", "dup.test", lambda c: edit_leaf(c, _duplicate_first))
    add("malformed-aia", "aia.test",
        lambda c: edit_leaf(c, _set_ext("aia", bytes.fromhex("3003020100"))))
    add("zero-serial", "zero.test", lambda c: edit_leaf(c, _serial(b"\x00")))
    add("negative-serial", "neg.test", lambda c: edit_leaf(c, _serial(b"\xff\x01")))
    add("unknown-critical-extension", "crit.test", lambda c: edit_leaf(c, _unknown_critical))
    add("truncated-signature", "sig.test", _truncated_signature)
    add("underscore-name", "foo_bar.example.test",
        lambda c: c.leaf.public_bytes(Encoding.DER))
    long_label = "a" * 70
    add("over-long-label", f"{long_label}.test", lambda c: c.leaf.public_bytes(Encoding.DER))
    return out


def with_extension_value(chain: Chain, data: bytes) -> bytes:
    """The leaf with extension ``data[0] % n`` holding ``data[1:]`` as its value, re-signed
    (the fuzz target's input format)."""
    def edit(fields: list[TLV]) -> list[TLV]:
        _, exts = _extensions(fields)
        exts = list(exts)
        i = data[0] % len(exts) if data else 0
        exts[i] = _replace_value(exts[i], data[1:])
        return _with_extensions(fields, exts)
    return edit_leaf(chain, edit)


def mutate_extensions(chain: Chain, rng: random.Random) -> bytes:
    """The leaf with random edits of one extension's bytes (or the list), re-signed."""
    def edit(fields: list[TLV]) -> list[TLV]:
        _, exts = _extensions(fields)
        i = rng.randrange(len(exts))
        value = bytearray(children(exts[i].value)[-1].value)
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(4)
            if op == 0 and value:
                value[rng.randrange(len(value))] = rng.randrange(256)
            elif op == 1 and value:
                del value[rng.randrange(len(value)):]
            elif op == 2:
                value.insert(rng.randrange(len(value) + 1), rng.randrange(256))
            else:
                exts = [*exts, exts[i]]
        exts = list(exts)
        exts[i] = _replace_value(exts[i], bytes(value))
        return _with_extensions(fields, exts)
    return edit_leaf(chain, edit)


def pem(der: bytes) -> bytes:
    """PEM armour for DER certificate bytes (however malformed inside)."""
    b64 = base64.b64encode(der).decode("ascii")
    lines = [b64[i : i + 64] for i in range(0, len(b64), 64)]
    return ("-----BEGIN CERTIFICATE-----\n" + "\n".join(lines)
            + "\n-----END CERTIFICATE-----\n").encode("ascii")


__all__ = ["Chain", "Defect", "defects", "make_chain", "mutate_extensions", "pem",
           "with_extension_value"]
