"""The synthetic web PKI of every world (the target farm, the root-store worlds, the fuzzing
chains): :func:`make_ca` and :func:`make_leaf` in the web-PKI profile, and for the target farm
several roots, intermediates under them, one leaf
certificate per site, and the attacker's and the careless operator's certificates:

* forgeries (what a man in the middle shows): from a rogue intermediate under root 0, the
  most popular (``popular``: every CA store accepts it); from one under the least popular
  root (``tail``: a full store accepts it, a top-k store does not); from a rogue root that no
  store holds (``untrusted``: CA validation refuses it too);
* genuine but misconfigured sites (``misconfigured``): an expired leaf, a self-signed one, or
  a leaf sent without its intermediate; CA validation refuses them, perspectives do not.

Certificates carry the key identifiers the web-PKI profile requires (SKI/AKI), so a CA
verifier (docs/rootstore.md) judges them only on their trust path.

Keys: every root and intermediate has its own EC P-256 key. Leaves under one root share one
EC P-256 key (``leaf-<root>.key``): a site's identity here is its certificate (and therefore
its fingerprint), not its key, and sharing keeps generating thousands of sites to a few
seconds. Everything is written under ``<state>/pki`` and ``<state>/certs`` and reused on the
next start; only missing certificates are made. ``now`` is an argument, never read here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from replay.errors import ReplayInputError, ReplayIOError

LEAF_DAYS = 90
CA_DAYS = 3650
ROGUE = "rogue"


def fingerprint_sha1(der: bytes) -> str:
    """The legacy notary fingerprint form: SHA-1, colon-separated upper-case hex."""
    return ":".join(f"{b:02X}" for b in hashlib.sha1(der).digest())


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else []
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn[:64])])


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_atomic(path: Path, data: bytes) -> None:
    try:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as exc:
        raise ReplayIOError(f"cannot write {path}: {exc}") from exc


def pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


@dataclass
class CA:
    """A certificate authority: its key and certificate (``name``: its file stem, if any)."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    name: str = ""

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def make_ca(cn: str, org: str, now: dt.datetime, parent: CA | None = None,
            days: int = CA_DAYS, path_length: int | None = 0, *,
            key: ec.EllipticCurvePrivateKey | None = None, serial: int | None = None,
            backdate: dt.timedelta = dt.timedelta(days=30)) -> CA:
    """A root (``parent`` None) or an intermediate (at most ``path_length`` CAs below it),
    in the web-PKI profile (SKI, AKI, critical basic constraints and key usage)."""
    key = key or new_key()
    pub = key.public_key()
    b = (x509.CertificateBuilder().subject_name(_name(cn, org))
         .issuer_name(parent.cert.subject if parent else _name(cn, org))
         .public_key(pub).serial_number(serial or x509.random_serial_number())
         .not_valid_before(now - backdate)
         .not_valid_after(now + dt.timedelta(days=days))
         .add_extension(x509.BasicConstraints(ca=True, path_length=None if parent is None
                                              else path_length), critical=True)
         .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                      key_encipherment=False, data_encipherment=False,
                                      key_agreement=False, key_cert_sign=True, crl_sign=True,
                                      encipher_only=False, decipher_only=False), critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(pub), critical=False))
    if parent is not None:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            parent.key.public_key()), critical=False)
    return CA(key, b.sign(parent.key if parent else key, hashes.SHA256()))


def make_leaf(names: list[str], issuer: CA | None, key: ec.EllipticCurvePrivateKey,
              not_before: dt.datetime, days: int = LEAF_DAYS) -> x509.Certificate:
    """A server certificate for ``names`` (the first, cut to 64 characters, as CN) in the
    web-PKI profile; ``issuer`` None: self-signed."""
    subject = _name(names[0])
    b = (x509.CertificateBuilder().subject_name(subject)
         .issuer_name(issuer.cert.subject if issuer else subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(not_before).not_valid_after(not_before + dt.timedelta(days=days))
         .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]),
                        critical=False)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                        critical=False))
    signer = issuer.key if issuer else key
    b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
        signer.public_key()), critical=False)
    return b.sign(signer, hashes.SHA256())


class SyntheticPKI:
    """Roots ``root-0..N-1``, intermediates ``int-<root>-<k>``, a rogue intermediate
    ``rogue-int`` under root 0, leaf keys."""

    def __init__(self, directory: Path, roots: int, now: dt.datetime) -> None:
        if not 1 <= roots <= 64:
            raise ReplayInputError("roots must be in 1..64")
        self.dir = directory
        self.now = now
        self.roots: list[CA] = []
        self.intermediates: list[list[CA]] = []
        self.leaf_keys: list[ec.EllipticCurvePrivateKey] = []
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ReplayIOError(f"cannot create {directory}: {exc}") from exc
        for r in range(roots):
            root = self._load_or_make(f"root-{r}", f"Synthetic Root CA {r}", None)
            self.roots.append(root)
            ints = [self._load_or_make(f"int-{r}-{k}", f"Synthetic Issuing CA {r}.{k}", root)
                    for k in range(2 if r < 3 else 1)]
            self.intermediates.append(ints)
            self.leaf_keys.append(self._load_or_make_key(f"leaf-{r}"))
        self.rogue = self._load_or_make(ROGUE, "Intercepting Proxy CA", None)
        self.rogue_int = self._load_or_make(f"{ROGUE}-int", "Intercepting Issuing CA",
                                            self.roots[0])
        self.rogue_tail_int = self._load_or_make(f"{ROGUE}-tail-int",
                                                 "Intercepting Issuing CA (tail root)",
                                                 self.roots[-1])
        self.rogue_own_int = self._load_or_make(f"{ROGUE}-own-int",
                                                "Intercepting Issuing CA (own root)",
                                                self.rogue)
        self.rogue_leaf_key = self._load_or_make_key("leaf-rogue")

    def _load_or_make_key(self, stem: str) -> ec.EllipticCurvePrivateKey:
        path = self.dir / f"{stem}.key"
        if path.exists():
            key = serialization.load_pem_private_key(path.read_bytes(), None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ReplayInputError(f"{path}: not an EC key")
            return key
        key = new_key()
        write_atomic(path, key_pem(key))
        return key

    def _load_or_make(self, stem: str, cn: str, parent: CA | None) -> CA:
        cert_path = self.dir / f"{stem}.pem"
        key = self._load_or_make_key(stem)
        if cert_path.exists():
            return CA(key, x509.load_pem_x509_certificate(cert_path.read_bytes()), stem)
        auth = make_ca(cn, "Converge Synthetic PKI", self.now, parent, key=key,
                       backdate=dt.timedelta(days=1))
        auth.name = stem
        write_atomic(cert_path, auth.pem)
        return auth

    def leaf_key_path(self, root: int) -> Path:
        return self.dir / f"leaf-{root}.key"

    def issue(self, host: str, root: int, variant: int = 0) -> bytes:
        """PEM of a leaf for ``host`` under ``root`` followed by its intermediate."""
        if not 0 <= root < len(self.roots):
            raise ReplayInputError(f"no root {root}")
        ints = self.intermediates[root]
        issuer = ints[hashlib.sha1(host.encode()).digest()[0] % len(ints)]
        cert = self._leaf(host, issuer, self.leaf_keys[root], variant)
        return cert.public_bytes(serialization.Encoding.PEM) + issuer.pem

    def forge(self, host: str, kind: str = "popular") -> bytes:
        """PEM of a forged certificate for ``host`` followed by its rogue intermediate (what
        intercepted clients are shown), ``kind`` ``popular`` (under root 0), ``tail`` (under
        the last root) or ``untrusted`` (under a root no store holds). The key is
        :meth:`rogue_key_path`."""
        issuer = {"popular": self.rogue_int, "tail": self.rogue_tail_int,
                  "untrusted": self.rogue_own_int}.get(kind)
        if issuer is None:
            raise ReplayInputError(f"unknown forgery kind {kind!r}")
        cert = self._leaf(host, issuer, self.rogue_leaf_key, 0)
        return cert.public_bytes(serialization.Encoding.PEM) + issuer.pem

    def rogue_key_path(self) -> Path:
        return self.dir / "leaf-rogue.key"

    def misconfigured(self, host: str, root: int, kind: str) -> bytes:
        """PEM of a genuine site's certificate that CA validation refuses: ``expired`` (with
        its intermediate), ``self-signed`` (signed by the root's leaf key itself) or
        ``leaf-only`` (issued under ``root`` but sent without the intermediate). The key is
        :meth:`leaf_key_path` of ``root``."""
        key = self.leaf_keys[root]
        if kind == "self-signed":
            return pem(make_leaf([host], None, key, self.now - dt.timedelta(days=1)))
        issuer = self.intermediates[root][0]
        if kind == "expired":
            cert = self._leaf(host, issuer, key, LEAF_DAYS + 30)
            return cert.public_bytes(serialization.Encoding.PEM) + issuer.pem
        if kind == "leaf-only":
            return self._leaf(host, issuer, key, 0).public_bytes(serialization.Encoding.PEM)
        raise ReplayInputError(f"unknown misconfiguration {kind!r}")

    def _leaf(self, host: str, issuer: CA, key: ec.EllipticCurvePrivateKey,
              variant: int) -> x509.Certificate:
        return make_leaf([host], issuer, key, self.now - dt.timedelta(days=1 + variant))


def first_cert_der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


__all__ = ["CA", "CA_DAYS", "LEAF_DAYS", "SyntheticPKI", "der", "fingerprint_sha1",
           "first_cert_der", "key_pem", "make_ca", "make_leaf", "new_key", "pem", "write_atomic"]
