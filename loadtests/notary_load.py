"""Shared parts of the locust scenarios: options, target lists, and response validation.

Every response is validated, not just counted:

* 200 and 409 must carry a body that splits into signed bytes and a signature
  (convergence-v1), and the signature must verify under the public key of the certificate
  given with ``--notary-cert`` -- whose SHA-1 must equal the pin the notary announces on its
  info page (checked once per process at start).
* A 200 for a submitted SHA-1 fingerprint must list that fingerprint; a 409 must list some
  fingerprint and not the submitted one.
* Every ``/target`` response must carry ``Cache-Status``; its hit/miss part is reported as
  the request name suffix so locust's table splits notary-cache hits from live probes.
* 503 with ``Retry-After`` (capacity or store) and 429 are reported as failures with their
  reason, because a load test should see them.

Options (after ``--`` nothing; locust parses them itself; also valid in ``locust.conf``):
``--notary-cert PATH`` (required), ``--targets FILE`` (a ``replay farm`` targets list:
``host,port,fingerprint[,role]`` with a header), ``--workload FILE`` (trace scenario),
``--speed X``, ``--trace-workers N``.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent.lock
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from locust import events
from locust.exception import StopUser

from notary.core import legacy
from notary.core.fingerprint import colon_hex, parse_fingerprint
from notary.core.signing import verify_legacy
from notary.errors import BadData, BadFingerprint

MAX_TARGETS = 1_000_000
MAX_VERIFIED = 10_000  # verified bodies remembered per process


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--notary-cert", default="", include_in_web_ui=False,
                        help="the notary's certificate (PEM) whose key signs its answers")
    parser.add_argument("--targets", default="", include_in_web_ui=False,
                        help="targets list: host,port,fingerprint[,role] with a header")
    parser.add_argument("--workload", default="", include_in_web_ui=False,
                        help="trace scenario: a replay workload file (or t,host,port,fp CSV)")
    parser.add_argument("--speed", type=float, default=1.0, include_in_web_ui=False,
                        help="trace scenario: replay speed factor")
    parser.add_argument("--trace-workers", type=int, default=1, include_in_web_ui=False,
                        help="trace scenario: number of locust workers sharing the trace")
    parser.add_argument("--trace-users", type=int, default=20, include_in_web_ui=False,
                        help="trace scenario: users in all (each worker takes its share)")


@dataclass(frozen=True, slots=True)
class LoadTarget:
    host: str
    port: int
    fingerprint: str  # as given (SHA-1 or SHA-256, any accepted form)
    role: str = ""  # farm role: good, rotating, mitm, dead, slow ("" when not given)

    @property
    def path(self) -> str:
        return f"/target/{self.host}+{self.port}"


def read_targets(path: str) -> list[LoadTarget]:
    """A ``replay farm`` targets list; rows with role ``dead``/``slow`` are kept (they load
    the negative cache and probe timeouts as real traffic does)."""
    out: list[LoadTarget] = []
    with Path(path).open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or not {"host", "port", "fingerprint"} <= set(
            reader.fieldnames
        ):
            raise ValueError(f"{path}: expected a header with host,port,fingerprint")
        for row in reader:
            out.append(LoadTarget(row["host"], int(row["port"]), row["fingerprint"],
                                  row.get("role") or ""))
            if len(out) >= MAX_TARGETS:
                break
    if not out:
        raise ValueError(f"{path}: no targets")
    return out


class Validator:
    """Checks signed answers against the notary's pinned certificate."""

    def __init__(self, cert_pem: bytes) -> None:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = cert.public_key()
        if not isinstance(key, rsa.RSAPublicKey):
            raise ValueError("the notary certificate must carry an RSA key")
        self.key = key
        self.pin_sha1 = colon_hex(
            hashlib.sha1(cert.public_bytes(serialization.Encoding.DER)).digest()
        )
        self._verified: dict[bytes, frozenset[str]] = {}

    def signed_list(self, body: bytes) -> frozenset[str] | str:
        """The fingerprints a correctly signed body lists, or why the body is not valid.

        Cached answers are byte-identical, so verified bodies are remembered (bounded): the
        signature of the exact same bytes is checked once per process.
        """
        known = self._verified.get(body)
        if known is not None:
            return known
        try:
            payload, sig = legacy.split_body(body)
        except BadData as exc:
            return f"unsigned body: {exc.message}"
        if not verify_legacy(self.key, payload, sig):
            return "signature does not verify under the pinned certificate"
        try:
            listed = frozenset(e["fingerprint"] for e in json.loads(payload)["fingerprintList"])
        except (ValueError, KeyError, TypeError):
            return "signed payload is not a fingerprint list"
        if not listed:
            return "empty fingerprint list"
        if len(self._verified) >= MAX_VERIFIED:
            self._verified.clear()
        self._verified[body] = listed
        return listed

    def check(self, status: int, body: bytes, submitted: str | None) -> str | None:
        """``None`` if the response is valid, else why not."""
        if status not in (200, 409):
            return f"HTTP {status}: {body[:120].decode('utf-8', 'replace').strip()}"
        listed = self.signed_list(body)
        if isinstance(listed, str):
            return listed
        if submitted is None:
            return None
        try:
            fp = parse_fingerprint(submitted)
        except BadFingerprint:
            return "bad fingerprint in the targets list"
        if fp.algorithm != "sha1":
            return None  # the legacy list names SHA-1 only
        present = fp.canonical in listed
        if status == 200 and not present:
            return "200 without the submitted fingerprint in the list"
        if status == 409 and present:
            return "409 although the submitted fingerprint is listed"
        return None


_validator: Validator | str | None = None
_validator_lock = gevent.lock.Semaphore()


def validator(host: str, cert_path: str) -> Validator | str:
    """This process's validator, or why there is none (every response then fails with it).

    The first call checks the certificate against the pin the notary announces.
    """
    global _validator
    if _validator is not None:
        return _validator
    with _validator_lock:  # one fetch per process, however many users start at once
        if _validator is None:
            _validator = _make_validator(host, cert_path)
    return _validator


def _make_validator(host: str, cert_path: str) -> Validator | str:
    if not cert_path:
        raise StopUser("--notary-cert is required: answers are validated, not counted")
    v = Validator(Path(cert_path).read_bytes())
    req = urllib.request.Request(host.rstrip("/") + "/", headers={"Accept": "application/json"})
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # trust comes from the pin check just below
    with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
        info = json.loads(resp.read())
    if info.get("pin_sha1") != v.pin_sha1:
        return (f"pin mismatch: --notary-cert has SHA-1 {v.pin_sha1}, the notary pins "
                f"{info.get('pin_sha1')}")
    return v


_targets: dict[str, list[LoadTarget]] = {}


def targets(environment: Any, roles: tuple[str, ...] = ("", "good")) -> list[LoadTarget]:
    """This process's targets from ``--targets`` with one of ``roles`` (read once)."""
    path = environment.parsed_options.targets
    if not path:
        raise StopUser("--targets is required for this scenario")
    key = f"{path}|{','.join(roles)}"
    if key not in _targets:
        chosen = [t for t in read_targets(path) if t.role in roles]
        if not chosen:
            raise StopUser(f"{path}: no targets with role {roles}")
        _targets[key] = chosen
    return _targets[key]


def random_sha1(rng: random.Random) -> str:
    return colon_hex(rng.randbytes(20))


def cache_label(headers: Any) -> str:
    cs = headers.get("Cache-Status", "") or ""
    if "; hit" in cs:
        return "hit"
    if "fwd=stale" in cs:
        return "stale"
    if "fwd=miss" in cs:
        return "miss"
    return "none"


def post_validated(user: Any, target: LoadTarget, fingerprint: str, name: str,
                   *, unreachable_ok: bool = False) -> None:
    """POST one validation and mark it failed unless the answer is valid.

    The request is reported as ``name [hit]``, ``name [miss]``, ``name [stale]`` or
    ``name [none]`` after the notary's ``Cache-Status``. With ``unreachable_ok`` a 503 for
    an unreachable target (a dead site in a trace) counts as a correct answer.
    """
    v = validator(user.host, user.environment.parsed_options.notary_cert)
    with user.client.post(target.path, data={"fingerprint": fingerprint}, name=name,
                          catch_response=True) as resp:
        resp.request_meta["name"] = f"{name} [{cache_label(resp.headers or {})}]"
        body = resp.content or b""
        if "Cache-Status" not in (resp.headers or {}):
            resp.failure("response without Cache-Status")
            return
        if isinstance(v, str):
            resp.failure(v)
            return
        cs = resp.headers.get("Cache-Status", "")
        if unreachable_ok and resp.status_code == 503 and cs.endswith("detail=unreachable"):
            resp.success()
            return
        why = v.check(resp.status_code, body, fingerprint)
        if why is not None:
            resp.failure(why)
        else:
            resp.success()


__all__ = ["LoadTarget", "Validator", "cache_label", "post_validated", "random_sha1",
           "read_targets", "targets", "validator"]
