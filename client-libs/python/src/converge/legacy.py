"""The legacy (v1) notary protocol, client side: request bytes, response framing, the
signed bytes, signature verification and the per-notary outcome (pure, no IO).

Rules (see ``convergence-v1.md``):

* Request: ``POST /target/<host>+<port> HTTP/1.0`` with a form body ``fingerprint=<FP>``,
  ``Connection: close``, no ``Host`` header -- exactly what the 2011 add-on sent.
* Response framing: status line, headers, blank line, body. Chunked transfer coding is
  refused (legacy clients cannot read it); a ``Content-Length`` longer than the body is a
  truncated response; bytes beyond it are ignored.
* Body of 200/409 (``docs/wire-format.md``, "Verifying a legacy answer"): the signed bytes
  ``S`` without their final ``}``, then ``, "signature": "<base64>"}`` as the body's last
  bytes (else ``response``). The signature is RSASSA-PKCS1-v1_5 with SHA-1 over ``S`` (else
  ``signature``). Only ``S`` is then parsed, after the bounds scan, with the standard
  ``json`` parser (strict), and its shape checked (else ``response``): nothing outside the
  signed bytes is ever read. Every error on the way is one of those two kinds.
* Outcome (the add-on's reading, plus signature checks): 200 is a *success* only if the body
  parses, its signature verifies against the notary's certificate key and the fingerprint
  is listed (or, asked by SHA-256 alone, the signed list holds no SHA-256 entry to compare:
  v1 lists carry SHA-1, so the pinned 200 decides); otherwise a *failure*. 409 is a
  *failure*. 303 is *inconclusive*; every other status is a connectivity problem; both are
  ``unreachable`` votes, which may stand aside (see :mod:`converge.policy`).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from .errors import FingerprintError, ResponseError, SignatureError, TargetError
from .fingerprint import Fingerprint, parse_fingerprint
from .signedjson import loads_verified

Vote = Literal["success", "failure", "unreachable"]

LEGACY_FORMAT = "convergence-v1"
MAX_RESPONSE_BYTES = 256 * 1024
MAX_HEADER_BYTES = 16 * 1024
MAX_HISTORY_ENTRIES = 1000
_SIG_MARKER = b', "signature": "'
_SIG_TAIL = re.compile(rb'([A-Za-z0-9+/]+={0,2})"}')
_HOST_RE = re.compile(r"^[A-Za-z0-9._:-]{1,253}$")


# ---------------------------------------------------------------------------- request


def location(host: str, port: int) -> str:
    """The cache/record key ``host:port``. Host names are compared case-insensitively."""
    check_target(host, port)
    return f"{host.lower()}:{port}"


def check_target(host: str, port: int) -> None:
    """Reject a host/port that cannot be put into ``/target/<host>+<port>``."""
    if not isinstance(host, str) or not _HOST_RE.match(host) or host.startswith((".", "-")):
        raise TargetError(f"invalid target host {host!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise TargetError(f"invalid target port {port!r}")


def check_ip(ip: str) -> str:
    """An IP address literal in its compressed form; :class:`TargetError` otherwise."""
    try:
        return ipaddress.ip_address(ip).compressed
    except (ValueError, TypeError) as e:
        raise TargetError(f"invalid target address {ip!r}") from e


def request_bytes(
    host: str, port: int, fingerprint: Fingerprint, ip: str | None = None
) -> bytes:
    """The exact request the legacy add-on sends (colons unescaped in the form body).
    ``ip`` (optional) asks the notary to connect to that address (``/target/<h>+<p>/<ip>``)."""
    check_target(host, port)
    suffix = f"/{check_ip(ip)}" if ip is not None else ""
    body = f"fingerprint={fingerprint.colon_hex()}".encode("ascii")
    head = (
        f"POST /target/{host.lower()}+{port}{suffix} HTTP/1.0\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        "Connection: close\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    )
    return head.encode("ascii") + body


# ---------------------------------------------------------------------------- framing


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes


def parse_http_response(raw: bytes, *, max_bytes: int = MAX_RESPONSE_BYTES) -> HttpResponse:
    """Split a complete HTTP/1.x response read until EOF. Header names are lower-cased."""
    if len(raw) > max_bytes:
        raise ResponseError(f"response larger than {max_bytes} bytes")
    sep = raw.find(b"\r\n\r\n")
    sep_len = 4
    if sep < 0:
        sep = raw.find(b"\n\n")
        sep_len = 2
    if sep < 0:
        raise ResponseError("response has no end of headers")
    if sep > MAX_HEADER_BYTES:
        raise ResponseError("response headers too large")
    head = raw[:sep].decode("latin-1")
    lines = head.replace("\r\n", "\n").split("\n")
    m = re.match(r"^HTTP/1\.[01] (\d{3})(?: .*)?$", lines[0])
    if not m:
        raise ResponseError(f"bad status line {lines[0][:80]!r}")
    status = int(m.group(1))
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise ResponseError(f"bad header line {line[:80]!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    body = raw[sep + sep_len :]
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise ResponseError("chunked transfer coding is not allowed on notary responses")
    if "content-length" in headers:
        cl = headers["content-length"]
        # ASCII digits only: str.isdigit() also accepts "³" and other digits int() refuses
        if not (cl.isascii() and cl.isdigit()) or len(cl) > 12:
            raise ResponseError(f"bad Content-Length {cl[:20]!r}")
        n = int(cl)
        if n > len(body):
            raise ResponseError("truncated response body")
        body = body[:n]
    return HttpResponse(status, headers, body)


# ---------------------------------------------------------------------------- body


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    fingerprint: Fingerprint
    start: int
    finish: int


@dataclass(frozen=True, slots=True)
class SignedList:
    """A verified 200/409 body: the signed bytes ``S`` and what they say."""

    entries: tuple[HistoryEntry, ...]
    signature: bytes
    signed_bytes: bytes  # S: the body before its signature member, then "}"

    def lists(self, fingerprint: Fingerprint) -> bool:
        return any(e.fingerprint == fingerprint for e in self.entries)


def split_body(body: bytes, *, max_bytes: int = MAX_RESPONSE_BYTES) -> tuple[bytes, bytes]:
    """``(S, signature)`` of a body that is ``S`` without its final ``}``, then
    ``, "signature": "<base64>"}`` as its last bytes. :class:`ResponseError` for any other
    shape; :class:`SignatureError` when the base64 does not decode."""
    if len(body) > max_bytes:
        raise ResponseError(f"body larger than {max_bytes} bytes")
    i = body.rfind(_SIG_MARKER)
    if i < 0:
        raise ResponseError("body has no signature member")
    tail = _SIG_TAIL.fullmatch(body, i + len(_SIG_MARKER))
    if tail is None:
        raise ResponseError("the signature member is not the last bytes of the body")
    try:
        signature = base64.b64decode(tail.group(1), validate=True)
    except binascii.Error as e:
        raise SignatureError("signature is not base64") from e
    return body[:i] + b"}", signature


def _timestamp(value: object, what: str) -> int:
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 12:
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**12:
        return value
    raise ResponseError(f"{what} is not a decimal unix time")


def _entry(item: object) -> HistoryEntry:
    if not isinstance(item, dict):
        raise ResponseError("history entry is not an object")
    ts = item.get("timestamp")
    if not isinstance(ts, dict):
        raise ResponseError("history entry has no timestamp object")
    fp_text = item.get("fingerprint")
    if not isinstance(fp_text, str):
        raise ResponseError("history entry has no fingerprint")
    try:
        fp = parse_fingerprint(fp_text)
    except FingerprintError as e:
        raise ResponseError(f"history entry fingerprint: {e}") from e
    if fp.algorithm != "sha1":
        raise ResponseError("history entry fingerprint is not a SHA-1")
    start = _timestamp(ts.get("start"), "start")
    return HistoryEntry(fp, start, _timestamp(ts.get("finish"), "finish"))


def parse_signed(signed: bytes) -> tuple[HistoryEntry, ...]:
    """The history in signed bytes ``S`` (bounds scan, strict parse, shape); raises
    :class:`ResponseError` only. Call it on bytes whose signature verified."""
    try:
        obj = loads_verified(signed)
    except (ValueError, RecursionError) as e:
        raise ResponseError(f"signed bytes are not bounded strict JSON: {e}") from e
    if not isinstance(obj, dict):
        raise ResponseError("signed bytes are not a JSON object")
    fl = obj.get("fingerprintList")
    if not isinstance(fl, list):
        raise ResponseError("fingerprintList missing or not a list")
    if len(fl) > MAX_HISTORY_ENTRIES:
        raise ResponseError(f"more than {MAX_HISTORY_ENTRIES} history entries")
    return tuple(_entry(item) for item in fl)


def verify_body(body: bytes, public_key: object) -> SignedList:
    """The one parse boundary of a 200/409 body: split it, verify RSA/SHA-1 over ``S`` with
    the pinned certificate's key, then parse ``S`` alone. Raises :class:`ResponseError` or
    :class:`SignatureError` and nothing else, whatever the bytes."""
    try:
        signed, signature = split_body(body)
        if not isinstance(public_key, rsa.RSAPublicKey):
            raise SignatureError("the notary certificate does not hold an RSA key")
        try:
            public_key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA1())
        except (InvalidSignature, UnsupportedAlgorithm, ValueError) as e:
            raise SignatureError(
                "signature does not verify against the notary's certificate"
            ) from e
        return SignedList(parse_signed(signed), signature, signed)
    except (ResponseError, SignatureError):
        raise
    except (ValueError, RecursionError) as e:  # a library's own error escaping a step
        raise ResponseError(f"unreadable body: {type(e).__name__}: {e}") from e


# ---------------------------------------------------------------------------- outcome


@dataclass(frozen=True, slots=True)
class Outcome:
    """One notary's answer, reduced to a vote.

    ``kind`` says why: ``listed`` (success), ``status-only`` (success: asked by SHA-256 alone
    and the signed v1 list holds only SHA-1 entries, so the pinned 200 decides), ``mismatch``
    (409), ``not-listed`` (200 without the fingerprint), ``response`` / ``signature`` (a bad
    body), ``inconclusive`` (303), ``status`` (any other HTTP status), or an IO error kind
    (``unreachable``, ``pin``, ...).
    """

    vote: Vote
    kind: str
    status: int | None = None
    detail: str = ""
    history: tuple[HistoryEntry, ...] = field(default=(), repr=False)
    answer: bytes | None = field(default=None, repr=False)  # a verified extended answer
    protocol: str = LEGACY_FORMAT


def evaluate(
    status: int,
    body: bytes,
    fingerprints: Iterable[Fingerprint],
    public_key: object,
) -> Outcome:
    """Reduce one notary response to a vote. ``fingerprints`` are the forms of the asked
    certificate's fingerprint we know (the asked one first; a SHA-1 alias when known)."""
    wanted = tuple(fingerprints)
    if not wanted:
        raise ValueError("at least one fingerprint is needed")
    if status in (200, 409):
        try:
            signed = verify_body(body, public_key)
        except (ResponseError, SignatureError) as e:
            return Outcome("failure", e.kind, status, str(e))
        if status == 409:
            return Outcome(
                "failure", "mismatch", status, "notary sees another certificate", signed.entries
            )
        if any(signed.lists(fp) for fp in wanted):
            return Outcome("success", "listed", status, "", signed.entries)
        listed_algorithms = {e.fingerprint.algorithm for e in signed.entries}
        if not any(fp.algorithm in listed_algorithms for fp in wanted) and signed.entries:
            # A v1 list carries SHA-1 only; asked by SHA-256 alone we cannot match it, so the
            # pinned channel's 200 is the answer.
            return Outcome(
                "success",
                "status-only",
                status,
                "list holds no fingerprint of the asked kind",
                signed.entries,
            )
        return Outcome(
            "failure",
            "not-listed",
            status,
            "200 without the fingerprint in the signed list",
            signed.entries,
        )
    if status == 303:
        return Outcome("unreachable", "inconclusive", status, "notary could not decide")
    return Outcome("unreachable", "status", status, f"HTTP status {status}")


def outcome_from_http(
    raw: bytes,
    fingerprints: Iterable[Fingerprint],
    public_key: object,
    *,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> tuple[Outcome, HttpResponse | None]:
    """A whole HTTP response (read until EOF) to a vote. Framing errors are failures of
    kind ``response``: the pinned notary itself sent them."""
    try:
        response = parse_http_response(raw, max_bytes=max_bytes)
    except ResponseError as e:
        return Outcome("failure", e.kind, None, str(e)), None
    return evaluate(response.status, response.body, fingerprints, public_key), response
