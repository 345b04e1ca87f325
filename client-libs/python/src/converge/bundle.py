"""Notary bundles (``.notary`` files): parsing and validation (pure).

A bundle describes one *logical* notary (an organisation) and its physical hosts. Accepted:

* v1: ``{"version": 1, "name", "hosts": [{host, ssl_port, http_port, certificate}, ...],
  "bundle_location"?, "region"?}``
* v0 (``version`` absent or 0): ``{host, ssl_port, http_port, certificate}``; its name is the
  host name.

Rejected with :class:`~converge.errors.BundleError`: other versions, missing or mistyped
fields, ports outside 1..65535, certificates that are not one PEM certificate, a
``bundle_location`` that is not ``https://...notary``, a ``region`` that is not two letters,
more than :data:`MAX_HOSTS` hosts, files over :data:`MAX_BUNDLE_BYTES`.

Optional v1 fields of the extended format (legacy clients ignore them): ``protocols`` (a list
of protocol names, e.g. ``["convergence-v1", "converge-answer/1"]``) and ``signing_keys``
(Ed25519 keys, validated by :func:`converge.extended.parse_signing_keys`: alg ``ed25519``,
``key_id`` matching the key, base64url of 32 bytes, ``status`` current/retired, a retired key's
``valid_until``). A bundle that lists ``converge-answer/1`` without signing keys is rejected;
:attr:`NotaryBundle.offers_extended` is true when both are present. ``transparency`` names the
notary's log, its witnesses and how many cosignatures a client requires
(:func:`converge.transparency.parse_log_policy`; a malformed member rejects the bundle).

Each host's pin is the SHA-1 of the DER certificate in its PEM.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from .errors import BundleError
from .extended import FORMAT, SigningKey, parse_protocols, parse_signing_keys
from .fingerprint import Fingerprint, fingerprint_of
from .transparency import LogPolicy, parse_log_policy

MAX_BUNDLE_BYTES = 64 * 1024
MAX_HOSTS = 16
MAX_NAME = 200
_HOST_RE = re.compile(r"^[A-Za-z0-9._:-]{1,253}$")
_PEM_RE = re.compile(
    r"^\s*-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----\s*$"
)


@functools.lru_cache(maxsize=256)
def _public_key(der: bytes) -> object:
    """The key of a pinned notary certificate, decoded once (not at every answer)."""
    return x509.load_der_x509_certificate(der).public_key()


@dataclass(frozen=True, slots=True)
class NotaryHost:
    host: str
    ssl_port: int
    http_port: int
    certificate_pem: str
    certificate_der: bytes
    pin: Fingerprint  # SHA-1 of the DER certificate

    def public_key(self) -> object:
        return _public_key(self.certificate_der)


@dataclass(frozen=True, slots=True)
class NotaryBundle:
    name: str
    version: int
    hosts: tuple[NotaryHost, ...]
    bundle_location: str | None = None
    region: str | None = None
    protocols: tuple[str, ...] = ()
    signing_keys: tuple[SigningKey, ...] = ()
    transparency: LogPolicy | None = None

    @property
    def offers_extended(self) -> bool:
        """The bundle advertises ``converge-answer/1`` and carries its signing keys."""
        return FORMAT in self.protocols and bool(self.signing_keys)

    def to_json(self) -> dict[str, Any]:
        """The v1 JSON form (a v0 bundle is upgraded)."""
        out: dict[str, Any] = {"version": 1, "name": self.name}
        if self.bundle_location:
            out["bundle_location"] = self.bundle_location
        if self.region:
            out["region"] = self.region
        out["hosts"] = [
            {
                "host": h.host,
                "ssl_port": h.ssl_port,
                "http_port": h.http_port,
                "certificate": h.certificate_pem,
            }
            for h in self.hosts
        ]
        if self.protocols:
            out["protocols"] = list(self.protocols)
        if self.signing_keys:
            out["signing_keys"] = [k.to_json() for k in self.signing_keys]
        if self.transparency is not None:
            out["transparency"] = self.transparency.to_json()
        return out


def _port(obj: dict[str, Any], key: str) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 65536:
        raise BundleError(f"{key} must be an integer port 1..65535")
    return v


def _host(obj: Any) -> NotaryHost:
    if not isinstance(obj, dict):
        raise BundleError("a host entry must be an object")
    name = obj.get("host")
    if not isinstance(name, str) or not _HOST_RE.match(name):
        raise BundleError("host must be a DNS name or an IP address")
    pem = obj.get("certificate")
    if not isinstance(pem, str) or not _PEM_RE.match(pem):
        raise BundleError(f"certificate of {name} is not one PEM certificate")
    try:
        cert = x509.load_pem_x509_certificate(pem.encode("ascii"))
    except ValueError as e:
        raise BundleError(f"certificate of {name} does not parse: {e}") from e
    der = cert.public_bytes(Encoding.DER)
    return NotaryHost(
        name, _port(obj, "ssl_port"), _port(obj, "http_port"), pem, der, fingerprint_of(der)
    )


def parse_bundle(data: bytes | str | dict[str, Any]) -> NotaryBundle:
    """Parse a bundle from its file bytes (or an already decoded JSON object)."""
    if isinstance(data, dict):
        obj: Any = data
    else:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        if len(raw) > MAX_BUNDLE_BYTES:
            raise BundleError(f"bundle larger than {MAX_BUNDLE_BYTES} bytes")
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise BundleError(f"bundle is not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise BundleError("bundle is not a JSON object")
    version = obj.get("version", 0)
    if isinstance(version, bool) or version not in (0, 1):
        raise BundleError(f"unsupported bundle version {version!r}")
    if version == 0:
        host = _host(obj)
        return NotaryBundle(host.host, 0, (host,))
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise BundleError("name must be a non-empty string")
    hosts = obj.get("hosts")
    if not isinstance(hosts, list) or not hosts:
        raise BundleError("hosts must be a non-empty list")
    if len(hosts) > MAX_HOSTS:
        raise BundleError(f"more than {MAX_HOSTS} hosts")
    location = obj.get("bundle_location")
    if location is not None and (
        not isinstance(location, str)
        or not location.startswith("https://")
        or not location.endswith(".notary")
        or len(location) > 2048
    ):
        raise BundleError("bundle_location must be an https:// URL ending in .notary")
    region = obj.get("region")
    if region is not None and (
        not isinstance(region, str) or not re.fullmatch(r"[A-Za-z]{2}", region)
    ):
        raise BundleError("region must be an ISO-3166 alpha-2 code")
    protocols = parse_protocols(obj["protocols"]) if "protocols" in obj else ()
    signing_keys = parse_signing_keys(obj["signing_keys"]) if "signing_keys" in obj else ()
    if FORMAT in protocols and not signing_keys:
        raise BundleError(f"protocols lists {FORMAT} but the bundle has no signing_keys")
    log = parse_log_policy(obj["transparency"]) if "transparency" in obj else None
    return NotaryBundle(
        name,
        1,
        tuple(_host(h) for h in hosts),
        location,
        region.upper() if region else None,
        protocols,
        signing_keys,
        log,
    )
