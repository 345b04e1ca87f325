"""The extended answer format ``converge-answer/1``, client side (pure, no IO).

Rules (see ``docs/wire-format.md``, "Extended: converge-answer/1"):

* Discovery: a bundle that lists ``"converge-answer/1"`` in ``protocols`` and carries
  ``signing_keys`` (Ed25519 public keys, ``key_id`` = first 8 bytes of SHA-256 of the raw key,
  lower-case hex; ``public_key`` = unpadded base64url of the 32 raw bytes; ``status``
  ``current`` or ``retired``; a retired key has ``valid_until``, unix seconds).
* Request: ``POST /v2/answer`` with a JSON body ``{"host", "port", "fingerprint", "alg",
  "ip"?, "nonce"?}``; the nonce is unpadded base64url of 8-64 random bytes.
* Answer: canonical JSON (RFC 8785) ``{"signature": {"alg": "ed25519", "key_id", "value"},
  "statement": {...}}``; the signature is Ed25519 over the statement's bytes ``T``. The body
  always begins with the fixed ASCII prefix ``{"signature":{"alg":"ed25519","key_id":"<K>",
  "value":"<V>"},"statement":`` and ends with ``}``; ``T`` is what lies between. The client
  never re-serialises: it verifies ``T`` as received and parses ``T`` alone.
* Verification (``docs/wire-format.md``, "Verifying"), in this order, each failure named by
  its ``kind`` (the names of the test vectors): ``malformed`` (size, prefix, final ``}``),
  ``unknown-key`` (``K`` is not a trusted key of the bundle; a retired key only while
  ``now <= valid_until``), ``bad-signature`` (``V`` is not unpadded base64url of 64 bytes
  verifying over ``T``), ``malformed`` (the bounds scan and the strict ``json`` parse of
  ``T``; the statement's ``type``, ``key_id`` = ``K``, ``verdict``, ``target`` object,
  integer ``answered_at``), ``wrong-target`` (host/port; the address asked to probe -- none
  unless the caller named one; the fingerprint asked about when the caller names it),
  ``nonce-mismatch``, ``stale`` (``|now - answered_at| > max_skew``). Any error the bytes
  can cause on the way is one of these kinds, never another exception.
* Votes: ``match`` = success, ``mismatch`` = failure, ``unreachable`` = unreachable (stands
  aside like any unreachable notary), ``refused`` = unreachable (the notary declined to look
  at the target under its address policy: it says nothing about the certificate). A verified
  answer whose HTTP status does not fit its signed verdict is a failure of kind
  ``response``; any verification failure is a failure of the kind named above.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import ed25519
from .errors import BadInput, BundleError, ResponseError
from .fingerprint import Fingerprint, parse_fingerprint
from .legacy import HttpResponse, Vote, check_ip, check_target, parse_http_response
from .signedjson import loads_verified
from .transparency import LogError, LogPolicy, Proven, check_member

FORMAT = "converge-answer/1"
MEDIA_TYPE = "application/vnd.converge.answer+json"
ANSWER_PATH = "/v2/answer"
MAX_ANSWER = 64 * 1024
MAX_SIGNING_KEYS = 8
NONCE_MIN, NONCE_MAX = 8, 64
DEFAULT_NONCE_BYTES = 16
DEFAULT_MAX_SKEW = 300
MAX_SAFE_INT = 2**53 - 1
# the fixed beginning of every answer: key id K and signature V are printable ASCII
# without '"' or '\\'; the statement's bytes T follow, then a final '}'
_PREFIX = re.compile(
    rb'\{"signature":\{"alg":"ed25519","key_id":"([\x20\x21\x23-\x5b\x5d-\x7e]+)",'
    rb'"value":"([\x20\x21\x23-\x5b\x5d-\x7e]+)"\},"statement":'
)
VERDICTS = ("match", "mismatch", "unreachable", "refused")
FAILURE_KINDS = (
    "malformed",
    "unknown-key",
    "bad-signature",
    "wrong-target",
    "nonce-mismatch",
    "stale",
)
# where the statement ends when the answer carries a transparency member
TRANSPARENCY_MEMBER = b',"transparency":'
# the status the notary sends with each signed verdict
VERDICT_STATUS = {"match": 200, "mismatch": 409, "unreachable": 503, "refused": 403}

Mode = Literal["off", "prefer", "fallback", "require"]
MODES: tuple[Mode, ...] = ("off", "prefer", "fallback", "require")


class AnswerRejected(BadInput):
    """An extended answer failed verification; ``kind`` names the failed check."""

    kind = "answer"

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# ---------------------------------------------------------------------------- encodings


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: object) -> bytes:
    """Decode unpadded base64url; raise :class:`ValueError` on anything else."""
    if not isinstance(text, str) or not text.isascii() or "=" in text or len(text) % 4 == 1:
        raise ValueError("expected unpadded base64url")
    if not _B64URL.fullmatch(text):
        raise ValueError("expected unpadded base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_B64URL = re.compile("[A-Za-z0-9_-]*")


# ---------------------------------------------------------------------------- keys


@dataclass(frozen=True, slots=True)
class SigningKey:
    key_id: str
    public_key: Ed25519PublicKey = field(compare=False, repr=False)
    public_key_b64: str = ""
    status: Literal["current", "retired"] = "current"
    valid_until: int | None = None

    def trusted_at(self, now: int) -> bool:
        if self.status == "current":
            return True
        return self.valid_until is not None and now <= self.valid_until

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "alg": "ed25519",
            "key_id": self.key_id,
            "public_key": self.public_key_b64,
            "status": self.status,
        }
        if self.valid_until is not None:
            out["valid_until"] = self.valid_until
        return out


def key_id_of(raw_public: bytes) -> str:
    return hashlib.sha256(raw_public).digest()[:8].hex()


def parse_signing_key(obj: object) -> SigningKey:
    """One ``signing_keys`` entry; raises :class:`BundleError`."""
    if not isinstance(obj, dict):
        raise BundleError("a signing key entry must be an object")
    unknown = set(obj) - {"alg", "key_id", "public_key", "status", "valid_until"}
    if unknown:
        raise BundleError(f"unknown signing key fields: {', '.join(sorted(unknown))}")
    if obj.get("alg") != "ed25519":
        raise BundleError("signing key alg must be ed25519")
    text = obj.get("public_key")
    try:
        raw = unb64url(text)
    except ValueError as e:
        raise BundleError("signing key public_key must be unpadded base64url") from e
    weak = ed25519.weak_key(raw)
    if weak is not None:
        raise BundleError(f"signing key: {weak}")
    kid = obj.get("key_id")
    if kid != key_id_of(raw):
        raise BundleError(f"signing key id {kid!r} does not match its public key")
    status = obj.get("status")
    until = obj.get("valid_until")
    if status == "current":
        if until is not None:
            raise BundleError("a current signing key has no valid_until")
    elif status == "retired":
        if isinstance(until, bool) or not isinstance(until, int) or not 0 < until <= MAX_SAFE_INT:
            raise BundleError("a retired signing key needs valid_until (unix seconds)")
    else:
        raise BundleError("signing key status must be current or retired")
    try:
        pub = Ed25519PublicKey.from_public_bytes(raw)
    except ValueError as e:  # pragma: no cover - any 32 bytes load
        raise BundleError(f"signing key does not load: {e}") from e
    assert isinstance(text, str)
    return SigningKey(kid, pub, text, status, until)


def parse_protocols(obj: object) -> tuple[str, ...]:
    if not isinstance(obj, list) or len(obj) > 16:
        raise BundleError("protocols must be a list of at most 16 strings")
    if not all(isinstance(p, str) and 0 < len(p) <= 64 for p in obj):
        raise BundleError("protocols must be a list of short strings")
    return tuple(obj)


def parse_signing_keys(obj: object) -> tuple[SigningKey, ...]:
    if not isinstance(obj, list) or not obj:
        raise BundleError("signing_keys must be a non-empty list")
    if len(obj) > MAX_SIGNING_KEYS:
        raise BundleError(f"more than {MAX_SIGNING_KEYS} signing keys")
    keys = tuple(parse_signing_key(k) for k in obj)
    ids = [k.key_id for k in keys]
    if len(set(ids)) != len(ids):
        raise BundleError("signing key ids repeat")
    if sum(k.status == "current" for k in keys) != 1:
        raise BundleError("signing_keys must hold exactly one current key")
    return keys


def trusted_keys(keys: Iterable[SigningKey], now: int) -> dict[str, Ed25519PublicKey]:
    """Key id -> public key of the keys trusted at ``now``."""
    return {k.key_id: k.public_key for k in keys if k.trusted_at(now)}


# ---------------------------------------------------------------------------- request


def expected_host(host: str) -> str:
    """The host as the notary names it in ``target.host``: an IP literal in compressed
    form, a DNS name in lower case without a trailing dot."""
    try:
        return ipaddress.ip_address(host.strip("[]")).compressed
    except ValueError:
        name = host.lower()
        return name[:-1] if name.endswith(".") else name


def new_nonce(nbytes: int = DEFAULT_NONCE_BYTES) -> str:
    if not NONCE_MIN <= nbytes <= NONCE_MAX:
        raise ValueError(f"a nonce has {NONCE_MIN}-{NONCE_MAX} bytes")
    return b64url(secrets.token_bytes(nbytes))


def request_body(host: str, port: int, fingerprint: Fingerprint, *, nonce: str | None,
                 ip: str | None = None, transparency: bool = False) -> bytes:
    check_target(host, port)
    doc: dict[str, Any] = {
        "host": host,
        "port": port,
        "fingerprint": fingerprint.colon_hex(),
        "alg": fingerprint.algorithm,
    }
    if ip is not None:
        doc["ip"] = check_ip(ip)
    if nonce is not None:
        doc["nonce"] = nonce
    if transparency:
        doc["transparency"] = True
    return json.dumps(doc, separators=(",", ":")).encode("ascii")


def request_bytes(host: str, port: int, fingerprint: Fingerprint, *, nonce: str | None,
                  ip: str | None = None, transparency: bool = False,
                  keep_alive: bool = False) -> bytes:
    """The whole HTTP/1.0 request (one request per connection, like the legacy client, unless
    ``keep_alive`` asks the notary to keep the connection open for the next one);
    ``transparency``: ask for a proof of inclusion in the notary's log."""
    body = request_body(host, port, fingerprint, nonce=nonce, ip=ip, transparency=transparency)
    head = (
        f"POST {ANSWER_PATH} HTTP/1.0\r\n"
        "Content-Type: application/json\r\n"
        f"Accept: {MEDIA_TYPE}\r\n"
        f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    )
    return head.encode("ascii") + body


# ---------------------------------------------------------------------------- verification


@dataclass(frozen=True, slots=True)
class VerifiedAnswer:
    statement: dict[str, Any]
    verdict: str
    key_id: str
    raw: bytes
    member: bytes | None = None  # the transparency member's value, as received


def split_parts(raw: bytes) -> tuple[str, str, bytes, bytes | None]:
    """``(K, V, T, M)`` of an answer: the fixed prefix with key id ``K`` and signature ``V``,
    the statement bytes ``T`` up to the first ``,"transparency":`` after the prefix (if any),
    the transparency member's value ``M`` from there to the final ``}`` (``None`` when
    absent). :class:`AnswerRejected` ``malformed`` else."""
    if len(raw) > MAX_ANSWER:
        raise AnswerRejected("malformed", f"answer larger than {MAX_ANSWER} bytes")
    m = _PREFIX.match(raw)
    if m is None or not raw.endswith(b"}") or len(raw) < m.end() + 1:
        raise AnswerRejected("malformed", "answer does not have the canonical answer shape")
    body = raw[m.end() : -1]
    cut = body.find(TRANSPARENCY_MEMBER)
    member = None if cut < 0 else body[cut + len(TRANSPARENCY_MEMBER) :]
    signed = body if cut < 0 else body[:cut]
    return m.group(1).decode("ascii"), m.group(2).decode("ascii"), signed, member


def split_answer(raw: bytes) -> tuple[str, str, bytes]:
    """``(K, V, T)`` of an answer (see :func:`split_parts`)."""
    kid, value, signed, _ = split_parts(raw)
    return kid, value, signed


def parse_statement(kid: str, signed: bytes) -> tuple[dict[str, Any], str]:
    """Steps 4-5: the bounds scan, the strict parse and the shape of statement bytes ``T``
    signed under key id ``kid``; :class:`AnswerRejected` ``malformed`` else. Call it on bytes
    whose signature verified."""
    try:
        stmt = loads_verified(signed)
    except (ValueError, RecursionError) as e:
        raise AnswerRejected("malformed", f"statement is not bounded strict JSON: {e}") from e
    if not isinstance(stmt, dict) or stmt.get("type") != FORMAT:
        raise AnswerRejected("malformed", f"not a {FORMAT} statement")
    if stmt.get("key_id") != kid:
        raise AnswerRejected("malformed", "key ids of statement and signature differ")
    verdict = stmt.get("verdict")
    if verdict not in VERDICTS or not isinstance(stmt.get("target"), dict):
        raise AnswerRejected("malformed", "statement lacks a verdict or target")
    answered_at = stmt.get("answered_at")
    if not isinstance(answered_at, int) or isinstance(answered_at, bool):
        raise AnswerRejected("malformed", "answered_at must be an integer")
    assert isinstance(verdict, str)
    return stmt, verdict


def verify_answer(
    raw: bytes,
    keys: Mapping[str, Ed25519PublicKey],
    *,
    host: str | None = None,
    port: int | None = None,
    fingerprint: Fingerprint | None = None,
    nonce: str | None = None,
    now: int | None = None,
    max_skew: int = DEFAULT_MAX_SKEW,
    ip: str | None = None,
    bind_ip: bool = False,
) -> VerifiedAnswer:
    """Check an answer in the documented order; raise :class:`AnswerRejected` and nothing
    else, whatever the bytes (the one parse boundary of an extended answer).

    ``keys``: the trusted keys (see :func:`trusted_keys`). Expectations left ``None`` are not
    checked (an offline verifier may not know them). ``host`` is compared in the notary's
    normal form (:func:`expected_host`). With ``bind_ip`` the statement's ``target.ip`` must
    be ``ip`` (``None``: the client named no address, so an answer about a probe of an
    address someone else chose is ``wrong-target``).
    """
    try:
        kid, value, signed, member = split_parts(raw)
        pub = keys.get(kid)
        if pub is None:
            raise AnswerRejected("unknown-key", f"signing key {kid} is not trusted by the bundle")
        try:
            ed25519.verify(pub, unb64url(value), signed)  # any length but 64 refused there
        except (InvalidSignature, ValueError) as e:
            raise AnswerRejected("bad-signature", "signature does not verify") from e
        stmt, verdict = parse_statement(kid, signed)
        _bind(stmt, host, port, fingerprint, nonce, ip, bind_ip)
    except AnswerRejected:
        raise
    except (ValueError, RecursionError) as e:  # a library's own error escaping a step
        raise AnswerRejected("malformed", f"unreadable answer: {type(e).__name__}: {e}") from e
    answered_at = stmt["answered_at"]
    if now is not None and abs(now - answered_at) > max_skew:
        raise AnswerRejected(
            "stale", f"answer time is {now - answered_at} s from now (max skew {max_skew} s)"
        )
    return VerifiedAnswer(stmt, verdict, kid, raw, member)


def check_log(v: VerifiedAnswer, log: LogPolicy, fingerprint: Fingerprint | None = None) -> Proven:
    """The transparency member of a verified answer (``converge.transparency``, the six
    checks); ``fingerprint``: the one asked about (default: the statement's ``request``).
    Raises :class:`AnswerRejected` of a ``log-*`` kind and nothing else."""
    try:
        if fingerprint is None:
            request = v.statement.get("request")
            if not isinstance(request, dict):
                raise LogError("log-entry", "the statement names no fingerprint")
            fingerprint = parse_fingerprint(str(request.get("fingerprint")))
            if fingerprint.algorithm != request.get("alg"):
                raise LogError("log-entry", "the statement's fingerprint is not of its alg")
        return check_member(v.member, log, target=v.statement["target"], fingerprint=fingerprint)
    except LogError as e:
        raise AnswerRejected(e.kind, str(e)) from e
    except BadInput as e:
        raise AnswerRejected("log-entry", f"the statement's fingerprint: {e}") from e


def _bind(
    stmt: dict[str, Any],
    host: str | None,
    port: int | None,
    fingerprint: Fingerprint | None,
    nonce: str | None,
    ip: str | None,
    bind_ip: bool,
) -> None:
    """Steps 6-7: the statement is about what was asked (``wrong-target``) and echoes the
    nonce (``nonce-mismatch``)."""
    target = stmt["target"]
    if host is not None and (
        target.get("host") != expected_host(host) or target.get("port") != port
    ):
        raise AnswerRejected(
            "wrong-target",
            f"answer is about {target.get('host')}:{target.get('port')}, not {host}:{port}",
        )
    if bind_ip and target.get("ip") != (None if ip is None else expected_host(ip)):
        raise AnswerRejected(
            "wrong-target", f"answer is about a probe of {target.get('ip')}, not {ip}"
        )
    request = stmt.get("request")
    if fingerprint is not None and (
        not isinstance(request, dict)
        or request.get("alg") != fingerprint.algorithm
        or request.get("fingerprint") != fingerprint.colon_hex()
    ):
        raise AnswerRejected("wrong-target", "answer is about another certificate fingerprint")
    if nonce is not None and (not isinstance(request, dict) or request.get("nonce") != nonce):
        raise AnswerRejected("nonce-mismatch", "answer does not echo our nonce")


# ---------------------------------------------------------------------------- outcome


@dataclass(frozen=True, slots=True)
class ExtOutcome:
    """One notary's extended answer reduced to a vote (``kind`` as in the module rules:
    ``match``, ``mismatch``, ``target-unreachable``, ``refused``, a verification failure
    kind, ``response`` or ``status``)."""

    vote: Vote
    kind: str
    status: int | None
    detail: str = ""
    answer: bytes | None = None  # the raw signed answer, when one verified
    verified: VerifiedAnswer | None = None
    proven: Proven | None = None  # what the log proves, when the bundle names a log


_VOTES: dict[str, tuple[Vote, str]] = {
    "match": ("success", "match"),
    "mismatch": ("failure", "mismatch"),
    "unreachable": ("unreachable", "target-unreachable"),
    "refused": ("unreachable", "refused"),
}


def vote_of(verdict: str) -> tuple[Vote, str]:
    """The vote and kind of a verified verdict (see the module rules)."""
    return _VOTES[verdict]


# statuses meaning "this notary does not speak the extended format here"
NOT_OFFERED = frozenset({400, 404, 405, 501})


def evaluate(
    response: HttpResponse,
    keys: Mapping[str, Ed25519PublicKey],
    *,
    host: str,
    port: int,
    fingerprint: Fingerprint,
    nonce: str | None,
    now: int,
    max_skew: int,
    ip: str | None = None,
    log: LogPolicy | None = None,
) -> ExtOutcome:
    """Reduce one response to a vote; the answer must be about ``ip`` exactly (``None``:
    no address named). With ``log`` (the bundle names a transparency log) a ``match`` must
    carry a valid proof of inclusion (:func:`check_log`), else it is a failure of that kind."""
    status = response.status
    ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
    signed = status in VERDICT_STATUS.values() and ctype == MEDIA_TYPE
    if not signed:
        # 400/404/405 (not offered), 503 + Retry-After (capacity), anything else: no answer
        return ExtOutcome("unreachable", "status", status, f"HTTP status {status}")
    try:
        v = verify_answer(
            response.body, keys, host=host, port=port, fingerprint=fingerprint, nonce=nonce,
            now=now, max_skew=max_skew, ip=ip, bind_ip=True,
        )
    except AnswerRejected as e:
        return ExtOutcome("failure", e.kind, status, str(e))
    if VERDICT_STATUS[v.verdict] != status:
        return ExtOutcome(
            "failure", "response", status, f"status {status} with signed verdict {v.verdict}"
        )
    proven = None
    if log is not None and v.verdict == "match":
        try:
            proven = check_log(v, log, fingerprint)
        except AnswerRejected as e:
            return ExtOutcome("failure", e.kind, status, str(e))
    vote, kind = vote_of(v.verdict)
    detail = v.statement.get("detail")
    return ExtOutcome(
        vote, kind, status, detail if isinstance(detail, str) else "", response.body, v, proven
    )


def outcome_from_http(
    raw: bytes,
    keys: Mapping[str, Ed25519PublicKey],
    *,
    host: str,
    port: int,
    fingerprint: Fingerprint,
    nonce: str | None,
    now: int,
    max_skew: int,
    max_bytes: int,
    ip: str | None = None,
    log: LogPolicy | None = None,
) -> tuple[ExtOutcome, HttpResponse | None]:
    try:
        response = parse_http_response(raw, max_bytes=max_bytes)
    except ResponseError as e:
        return ExtOutcome("failure", e.kind, None, str(e)), None
    out = evaluate(
        response, keys, host=host, port=port, fingerprint=fingerprint, nonce=nonce, now=now,
        max_skew=max_skew, ip=ip, log=log,
    )
    return out, response


def request_fingerprint(forms: Sequence[Fingerprint]) -> Fingerprint:
    """The form to ask about: SHA-256 when known (first-class), else the first."""
    for fp in forms:
        if fp.algorithm == "sha256":
            return fp
    return forms[0]


def describe(v: VerifiedAnswer) -> dict[str, Any]:
    """What a verified answer proves, as a JSON object (for ``converge verify-answer``)."""
    s = v.statement
    return {
        "key_id": v.key_id,
        "target": s.get("target"),
        "address": s.get("address"),
        "request": s.get("request"),
        "verdict": v.verdict,
        "detail": s.get("detail"),
        "observations": s.get("observations"),
        "answered_at": s.get("answered_at"),
        "cache": s.get("cache"),
    }


__all__ = [
    "ANSWER_PATH",
    "DEFAULT_MAX_SKEW",
    "FAILURE_KINDS",
    "FORMAT",
    "MEDIA_TYPE",
    "MODES",
    "AnswerRejected",
    "ExtOutcome",
    "Mode",
    "SigningKey",
    "VerifiedAnswer",
    "b64url",
    "check_log",
    "describe",
    "evaluate",
    "expected_host",
    "key_id_of",
    "new_nonce",
    "outcome_from_http",
    "parse_protocols",
    "parse_signing_keys",
    "parse_statement",
    "request_bytes",
    "request_fingerprint",
    "split_answer",
    "split_parts",
    "trusted_keys",
    "unb64url",
    "verify_answer",
    "vote_of",
]
