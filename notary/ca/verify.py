"""CA verification of a presented chain against a root store. Pure: no clock, no files.

Rules:

* A chain is the list of DER certificates a server presented, leaf first, at most
  :data:`MAX_CHAIN_CERTS` certificates and :data:`MAX_CHAIN_BYTES` bytes.
* Validation is done by ``cryptography.x509.verification`` (the web-PKI server policy) for
  the host name (a DNS name, or an IP address checked against IP SANs), at the validation
  time given as an argument, against a :class:`RootStore`.
* A :class:`RootStore` is either a full store (e.g. Mozilla's, from ``certifi``) or a
  *restricted* store: a subset of the roots of a parent store (the top-k). A restricted
  store remembers its parent so a rejection can say ``not-in-top-k``.
* Every outcome is a :class:`CAVerdict` with one of :data:`VERDICTS` and a reason. When the
  library rejects a chain, the verdict is diagnosed in this order (the first that applies):
  ``bad-chain`` (unparsable), ``self-signed`` (the leaf signs itself), ``expired`` (the
  leaf or an issuer on its presented path is outside its validity), ``wrong-host`` (no SAN
  of the leaf matches), ``not-in-top-k`` (the parent store accepts it), ``unknown-root``
  (the presented path ends at a root, or at an issuer, that the store does not hold),
  ``missing-intermediate`` (the server sent no issuer for the leaf, or the chain verifies
  once known intermediates from a pool are added), ``bad-chain`` (anything else, e.g. a
  signature or constraint failure; the library's message is the reason).
* Every input gets a verdict; nothing a server presents makes this module raise. A
  certificate that cannot be evaluated is ``bad-chain`` with a reason naming the defect
  ("the leaf's authorityInfoAccess extension does not parse", "the leaf has a duplicate
  subjectAltName extension", "the leaf's serial number is not positive"). Parsing errors are
  caught by type where the bytes are parsed (:func:`parse_chain`), which reads every
  certificate's names and extensions up front so later steps meet only parsed objects.
* A host name the web-PKI rules cannot express (an ``_`` in a label, a label over 63
  characters) gets ``wrong-host``: no publicly trusted certificate can be valid for it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509 import verification
from cryptography.x509.oid import NameOID

from notary.ca.der import broken_extension
from notary.errors import BadData

MAX_CHAIN_CERTS = 10
MAX_CHAIN_BYTES = 64 * 1024
MAX_STORE_ROOTS = 10_000

Verdict = Literal[
    "ok",
    "unknown-root",
    "not-in-top-k",
    "expired",
    "wrong-host",
    "missing-intermediate",
    "self-signed",
    "bad-chain",
]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)


def sha256_der(cert: x509.Certificate) -> bytes:
    return hashlib.sha256(cert.public_bytes(Encoding.DER)).digest()


def cert_name(cert: x509.Certificate) -> str:
    """A short human name: the organisation, else the common name, else the RFC 4514 DN."""
    for oid in (NameOID.ORGANIZATION_NAME, NameOID.COMMON_NAME):
        attrs = cert.subject.get_attributes_for_oid(oid)
        if attrs:
            value = attrs[0].value
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return cert.subject.rfc4514_string() or "(empty subject)"


def _label(cert: x509.Certificate) -> str:
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if cn:
        v = cn[0].value
        return v if isinstance(v, str) else v.decode("utf-8", "replace")
    return cert.subject.rfc4514_string()


class RootStore:
    """A set of trust anchors. ``parent`` is the full store a restricted store was cut from."""

    def __init__(
        self, name: str, roots: Iterable[x509.Certificate], parent: RootStore | None = None
    ) -> None:
        unique: dict[bytes, x509.Certificate] = {}
        for cert in roots:
            unique.setdefault(sha256_der(cert), cert)
            if len(unique) > MAX_STORE_ROOTS:
                raise BadData(f"a root store holds at most {MAX_STORE_ROOTS} roots")
        if not unique:
            raise BadData(f"root store {name!r} has no roots")
        self.name = name
        self.parent = parent
        self.roots: dict[bytes, x509.Certificate] = unique
        self._subjects = {c.subject.public_bytes() for c in unique.values()}
        self.store = verification.Store(list(unique.values()))

    def __len__(self) -> int:
        return len(self.roots)

    def __contains__(self, fingerprint: object) -> bool:
        return fingerprint in self.roots

    def holds_subject(self, name: x509.Name) -> bool:
        return name.public_bytes() in self._subjects

    def restrict(self, fingerprints: Sequence[bytes], name: str | None = None) -> RootStore:
        """The sub-store of the given roots (SHA-256 of their DER); each must be held here."""
        missing = [fp.hex() for fp in fingerprints if fp not in self.roots]
        if missing:
            raise BadData(f"roots not in store {self.name!r}: {', '.join(missing[:3])}")
        return RootStore(
            name or f"{self.name}/top-{len(fingerprints)}",
            (self.roots[fp] for fp in fingerprints),
            parent=self,
        )

    def with_roots(self, extra: Iterable[x509.Certificate], name: str) -> RootStore:
        """This store plus more roots (e.g. a test PKI's public roots)."""
        return RootStore(name, [*self.roots.values(), *extra])


@dataclass(frozen=True, slots=True)
class CAVerdict:
    verdict: Verdict
    reason: str
    store: str
    root_sha256: bytes | None = None  # the anchor of the verified path (ok) or the known root
    root_name: str | None = None
    depth: int = 0  # certificates in the verified path, root included (0 unless ok)
    # the chain or the name could not be evaluated at all (a malformed certificate, a name
    # the web-PKI rules cannot express); batch tools count these sites apart
    unevaluable: bool = False

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "store": self.store,
            "root_sha256": self.root_sha256.hex() if self.root_sha256 is not None else None,
        }


def parse_chain(chain: Sequence[bytes]) -> list[x509.Certificate]:
    """DER certificates -> objects; raises :class:`BadData` when empty, too big or unparsable."""
    if not chain:
        raise BadData("the chain is empty")
    if len(chain) > MAX_CHAIN_CERTS:
        raise BadData(f"the chain has more than {MAX_CHAIN_CERTS} certificates")
    if sum(len(c) for c in chain) > MAX_CHAIN_BYTES:
        raise BadData(f"the chain is larger than {MAX_CHAIN_BYTES} bytes")
    return [_load(der, "the leaf" if i == 0 else f"certificate {i + 1} of the chain")
            for i, der in enumerate(chain)]


_PARSE_ERRORS = (ValueError, x509.DuplicateExtension, x509.UnsupportedGeneralNameType)


def _load(der: bytes, role: str) -> x509.Certificate:
    """One certificate, fully parsed (names and extensions), or :class:`BadData` naming the
    defect."""
    with warnings.catch_warnings():
        # a non-positive serial warns on access; it is refused here (RFC 5280 4.1.2.2)
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        try:
            cert = x509.load_der_x509_certificate(der)
        except ValueError as exc:
            raise BadData(f"{role} does not parse ({exc})") from exc
        if cert.serial_number <= 0:
            raise BadData(f"{role}'s serial number is not positive (RFC 5280 4.1.2.2)")
        try:
            cert.subject  # noqa: B018 - parse now, not in the middle of a diagnosis
            cert.issuer  # noqa: B018
            cert.extensions  # noqa: B018
        except _PARSE_ERRORS as exc:
            raise BadData(_extension_defect(der, role, exc)) from exc
    return cert


def load_certificate(der: bytes, role: str = "the certificate") -> x509.Certificate:
    """A fully parsed certificate, or :class:`BadData` naming its defect (see module)."""
    return _load(der, role)


def _extension_defect(der: bytes, role: str, exc: Exception) -> str:
    which = broken_extension(der)
    if which is None:
        return f"{role}'s names or extensions do not parse ({exc})"
    if which.startswith("duplicate "):
        return f"{role} has a {which} extension"
    return f"{role}'s {which} extension does not parse"


class _BadName(BadData):
    """The host name is outside what the web-PKI verifier can check."""


def subject_for(host: str) -> x509.DNSName | x509.IPAddress:
    """The verification subject for a host: an IP address or a DNS name."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return x509.IPAddress(ipaddress.ip_address(text))
    except ValueError:
        pass
    try:
        return x509.DNSName(host.rstrip(".").lower())
    except ValueError as exc:
        raise BadData(f"{host!r} is not a valid DNS name or IP address") from exc


def when(now: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(now, dt.UTC)


def _attempt(
    store: RootStore,
    leaf: x509.Certificate,
    rest: Sequence[x509.Certificate],
    subject: x509.DNSName | x509.IPAddress,
    at: dt.datetime,
) -> list[x509.Certificate] | str:
    builder = verification.PolicyBuilder().store(store.store).time(at)
    try:
        verifier = builder.build_server_verifier(subject)
    except ValueError as exc:  # e.g. "invalid domain name" for "foo_bar.example"
        raise _BadName(str(exc)) from exc
    try:
        return list(verifier.verify(leaf, list(rest)))
    except verification.VerificationError as exc:
        return str(exc).split(" (encountered processing", 1)[0]  # drop the object's repr


def _signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def host_matches(host: str, leaf: x509.Certificate) -> bool:
    """Whether a SAN of ``leaf`` names ``host`` (DNS names with a left-most ``*`` label,
    IP addresses). Used only to explain a rejection; the library decides acceptance."""
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        ip = None
    if ip is not None:
        return ip in san.get_values_for_type(x509.IPAddress)
    name = host.rstrip(".").lower()
    for pattern in san.get_values_for_type(x509.DNSName):
        p = pattern.lower()
        if p == name:
            return True
        if p.startswith("*.") and "." in name and name.split(".", 1)[1] == p[2:]:
            return True
    return False


def _validity(cert: x509.Certificate, at: dt.datetime) -> str | None:
    if at < cert.not_valid_before_utc:
        return f"{_label(cert)} is not valid before {cert.not_valid_before_utc:%Y-%m-%d}"
    if at > cert.not_valid_after_utc:
        return f"{_label(cert)} expired on {cert.not_valid_after_utc:%Y-%m-%d}"
    return None


def _presented_path(certs: Sequence[x509.Certificate]) -> tuple[list[x509.Certificate], str]:
    """Walk issuer links through the presented certificates from the leaf.

    Returns the path and how it ended: ``"root"`` (a self-signed certificate),
    ``"open"`` (the next issuer was not presented) or ``"bad-signature"``.
    """
    path = [certs[0]]
    pool = list(certs[1:])
    while len(path) <= MAX_CHAIN_CERTS:
        top = path[-1]
        if top.issuer == top.subject and _signed_by(top, top):
            return path, "root"
        named = [c for c in pool if c.subject == top.issuer]
        if not named:
            return path, "open"
        nxt = next((c for c in named if _signed_by(top, c)), None)
        if nxt is None:
            return path, "bad-signature"
        pool.remove(nxt)
        path.append(nxt)
    return path, "open"


def verify_chain(
    chain: Sequence[bytes],
    host: str,
    now: int,
    store: RootStore,
    *,
    pool: Sequence[x509.Certificate] = (),
) -> CAVerdict:
    """Validate ``chain`` (leaf first) for ``host`` at time ``now`` (Unix seconds).

    ``pool`` holds intermediates known from elsewhere (e.g. other sites' chains); they are
    used only to tell a missing intermediate from an unknown root, never to accept.
    """
    try:
        certs = parse_chain(chain)
    except BadData as exc:
        return CAVerdict("bad-chain", exc.message, store.name, unevaluable=True)
    at = when(now)
    leaf, rest = certs[0], certs[1:]
    try:
        subject = subject_for(host)
        got = _attempt(store, leaf, rest, subject, at)
        if not isinstance(got, str):
            anchor = got[-1]
            return CAVerdict(
                "ok", f"chains to {_label(anchor)}", store.name, sha256_der(anchor),
                cert_name(anchor), len(got),
            )
        return _diagnose(certs, host, subject, at, store, pool, got)
    except BadData:  # from subject_for or _attempt: the name, never the certificates
        return CAVerdict(
            "wrong-host",
            f"{host} is not a host name the web-PKI rules accept (e.g. '_' or a label over "
            "63 characters): no publicly trusted certificate can be valid for it",
            store.name,
            unevaluable=True,
        )


def _diagnose(
    certs: list[x509.Certificate],
    host: str,
    subject: x509.DNSName | x509.IPAddress,
    at: dt.datetime,
    store: RootStore,
    pool: Sequence[x509.Certificate],
    why: str,
) -> CAVerdict:
    leaf, rest = certs[0], certs[1:]
    name = store.name
    pinned = sha256_der(leaf) in store
    if not pinned and leaf.issuer == leaf.subject and _signed_by(leaf, leaf):
        return CAVerdict("self-signed", f"{_label(leaf)} is self-signed", name)
    path, end = _presented_path(certs)
    for cert in path:
        problem = _validity(cert, at)
        if problem is not None:
            return CAVerdict("expired", problem, name)
    if not host_matches(host, leaf):
        return CAVerdict("wrong-host", f"no subject alternative name of the leaf is {host}", name)
    if store.parent is not None:
        wider = _attempt(store.parent, leaf, rest, subject, at)
        if not isinstance(wider, str):
            anchor = wider[-1]
            return CAVerdict(
                "not-in-top-k",
                f"chains to {_label(anchor)}, which is not among the {len(store)} trusted roots",
                name, sha256_der(anchor), cert_name(anchor),
            )
    top = path[-1]
    if end == "bad-signature":
        return CAVerdict("bad-chain", f"{_label(top)}: the presented issuer did not sign it", name)
    if end == "root":
        if sha256_der(top) in store or store.holds_subject(top.subject):
            return CAVerdict("bad-chain", why, name)
        return CAVerdict("unknown-root", f"the chain ends at {_label(top)}, not a trusted root",
                         name)
    if store.holds_subject(top.issuer):
        return CAVerdict("bad-chain", why, name)
    if pool:
        for candidate in (store, store.parent):
            if candidate is None:
                continue
            completed = _attempt(candidate, leaf, [*rest, *pool], subject, at)
            if not isinstance(completed, str):
                return CAVerdict(
                    "missing-intermediate",
                    f"the server did not send the issuer of {_label(top)}; a known "
                    "intermediate completes the chain", name,
                )
    if top is leaf:
        return CAVerdict(
            "missing-intermediate",
            f"the server sent only the leaf; its issuer {_issuer_label(leaf)} is not a "
            "trusted root",
            name,
        )
    return CAVerdict(
        "unknown-root",
        f"the chain ends at {_label(top)}, whose issuer {_issuer_label(top)} is not trusted",
        name,
    )


def _issuer_label(cert: x509.Certificate) -> str:
    cn = cert.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)
    if cn:
        v = cn[0].value
        return v if isinstance(v, str) else v.decode("utf-8", "replace")
    return cert.issuer.rfc4514_string()


__all__ = [
    "MAX_CHAIN_BYTES",
    "MAX_CHAIN_CERTS",
    "VERDICTS",
    "CAVerdict",
    "RootStore",
    "Verdict",
    "cert_name",
    "host_matches",
    "load_certificate",
    "parse_chain",
    "sha256_der",
    "subject_for",
    "verify_chain",
    "when",
]
