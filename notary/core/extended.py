"""The extended answer format ``converge-answer/1`` (see docs/wire-format.md).

An answer is a JSON document ``{"statement": {...}, "signature": {...}}``. The signature is
Ed25519, by a dedicated signing key (not the TLS key), over the RFC 8785 canonical JSON of
``statement``. The statement names the target host and port, the address probed, the
fingerprint asked about and its algorithm, the client's nonce, the verdict, the observation
history (SHA-256 and SHA-1, first/last seen), the notary's answer time and the key id, so an
answer can be checked offline and cannot be replayed for another target, nonce or time.

Everything here is pure: time is an argument, keys are passed in.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from notary.core.canonical import canonical_json
from notary.core.fingerprint import Fingerprint, colon_hex, parse_fingerprint
from notary.core.history import History
from notary.core.target import Target, normalise_host, parse_ip
from notary.errors import BadData, BadInput

FORMAT = "converge-answer/1"
MEDIA_TYPE = "application/vnd.converge.answer+json"
MAX_REQUEST = 2048
MAX_ANSWER = 64 * 1024
NONCE_MIN, NONCE_MAX = 8, 64  # bytes, after base64url decoding

Verdict = Literal["match", "mismatch", "unreachable", "refused"]
VERDICTS: tuple[str, ...] = ("match", "mismatch", "unreachable", "refused")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    if not isinstance(text, str) or not text.isascii() or "=" in text:
        raise BadData("expected unpadded base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as exc:
        raise BadData("expected unpadded base64url") from exc


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    """The first 8 bytes of SHA-256 of the raw public key, hex."""
    return hashlib.sha256(raw_public(key)).digest()[:8].hex()


@dataclass(frozen=True, slots=True)
class ExtRequest:
    target: Target
    fingerprint: Fingerprint
    nonce: str | None  # base64url text, echoed as given


def parse_request(raw: bytes) -> ExtRequest:
    """``{"host", "port", "fingerprint", "alg"?, "ip"?, "nonce"?}`` -> :class:`ExtRequest`."""
    if len(raw) > MAX_REQUEST:
        raise BadInput(f"request larger than {MAX_REQUEST} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        # RecursionError: ~1000 nested brackets fit in the size bound and exhaust the
        # decoder's recursion limit; without this a client could cause a 500.
        raise BadInput("request body is not JSON") from exc
    if not isinstance(doc, dict):
        raise BadInput("request body must be a JSON object")
    unknown = set(doc) - {"host", "port", "fingerprint", "alg", "ip", "nonce"}
    if unknown:
        raise BadInput(f"unknown request fields: {', '.join(sorted(unknown))}")
    host, port = doc.get("host"), doc.get("port")
    if not isinstance(host, str):
        raise BadInput("You must specify a target.")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise BadInput("port must be an integer from 1 to 65535")
    fp_text = doc.get("fingerprint")
    if not isinstance(fp_text, str):
        raise BadInput("You must specify a fingerprint.")
    fp = parse_fingerprint(fp_text)
    alg = doc.get("alg")
    if alg is not None and alg != fp.algorithm:
        raise BadInput(f"fingerprint length does not fit alg {alg!r}")
    ip_text = doc.get("ip")
    ip = None
    if ip_text is not None:
        ip = parse_ip(ip_text) if isinstance(ip_text, str) else None
        if ip is None:
            raise BadInput("ip must be an IP address")
    nonce = doc.get("nonce")
    if nonce is not None:
        try:
            n = len(unb64url(nonce))
        except BadData as exc:
            raise BadInput("nonce must be unpadded base64url") from exc
        if not NONCE_MIN <= n <= NONCE_MAX:
            raise BadInput(f"nonce must decode to {NONCE_MIN}-{NONCE_MAX} bytes")
    return ExtRequest(Target(normalise_host(host), port, ip), fp, nonce)


def statement(
    *,
    target: Target,
    fingerprint: Fingerprint,
    nonce: str | None,
    verdict: Verdict,
    history: History,
    answered_at: int,
    key: str,
    address: str | None = None,
    cache: str = "miss",
    detail: str | None = None,
    ca: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The statement object (to be signed) for one answer.

    ``ca`` (the CA verifier's verdict) is present only when the notary runs a CA verifier
    (``--verifier ca|both``); with the default verifier the statement has no ``ca`` key.
    """
    stmt: dict[str, Any] = {
        "type": FORMAT,
        "target": {
            "host": target.host,
            "port": target.port,
            "ip": target.ip.compressed if target.ip is not None else None,
        },
        "address": address,
        "request": {
            "alg": fingerprint.algorithm,
            "fingerprint": colon_hex(fingerprint.digest),
            "nonce": nonce,
        },
        "verdict": verdict,
        "detail": detail,
        "observations": [
            {
                "sha256": colon_hex(o.sha256),
                "sha1": colon_hex(o.sha1),
                "first_seen": o.first_seen,
                "last_seen": o.last_seen,
            }
            for o in history
        ],
        "answered_at": answered_at,
        "cache": cache,
        "key_id": key,
    }
    if ca is not None:
        stmt["ca"] = ca
    return stmt


def sign_answer(stmt: dict[str, Any], key: Ed25519PrivateKey) -> bytes:
    """The answer document bytes: statement plus Ed25519 signature over its canonical form."""
    sig = key.sign(canonical_json(stmt))
    doc = {
        "statement": stmt,
        "signature": {"alg": "ed25519", "key_id": stmt["key_id"], "value": b64url(sig)},
    }
    return canonical_json(doc)


class AnswerRejected(BadData):
    """An answer failed verification; ``kind`` names the check that failed."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class VerifiedAnswer:
    statement: dict[str, Any]
    verdict: Verdict
    key_id: str


def verify_answer(
    raw: bytes,
    keys: dict[str, Ed25519PublicKey],
    *,
    host: str | None = None,
    port: int | None = None,
    nonce: str | None = None,
    now: int | None = None,
    max_skew: int = 300,
) -> VerifiedAnswer:
    """Verify an answer document; raise :class:`AnswerRejected` naming the failed check.

    ``keys`` maps key ids to trusted public keys. ``host``/``port``/``nonce``/``now`` are the
    expectations to bind (skipped when ``None``: an offline verifier may not know them).
    Kinds: ``malformed``, ``non-canonical``, ``unknown-key``, ``bad-signature``,
    ``wrong-target``, ``nonce-mismatch``, ``stale``.
    """
    if len(raw) > MAX_ANSWER:
        raise AnswerRejected("malformed", "answer too large")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise AnswerRejected("malformed", "answer is not JSON") from exc
    if not isinstance(doc, dict) or set(doc) != {"statement", "signature"}:
        raise AnswerRejected("malformed", "answer must have exactly statement and signature")
    stmt, sig = doc["statement"], doc["signature"]
    if not isinstance(stmt, dict) or not isinstance(sig, dict):
        raise AnswerRejected("malformed", "statement and signature must be objects")
    try:
        if canonical_json(doc) != raw:
            raise AnswerRejected("non-canonical", "answer bytes are not canonical JSON")
    except BadData as exc:
        if isinstance(exc, AnswerRejected):
            raise
        raise AnswerRejected("malformed", exc.message) from exc
    if stmt.get("type") != FORMAT or sig.get("alg") != "ed25519":
        raise AnswerRejected("malformed", f"not a {FORMAT} answer signed with ed25519")
    kid = sig.get("key_id")
    if not isinstance(kid, str) or stmt.get("key_id") != kid:
        raise AnswerRejected("malformed", "key ids of statement and signature differ")
    pub = keys.get(kid)
    if pub is None:
        raise AnswerRejected("unknown-key", f"signing key {kid} is not trusted")
    try:
        signature = unb64url(sig.get("value", ""))
        pub.verify(signature, canonical_json(stmt))
    except (InvalidSignature, BadData) as exc:
        raise AnswerRejected("bad-signature", "signature does not verify") from exc
    verdict = stmt.get("verdict")
    target = stmt.get("target")
    if verdict not in VERDICTS or not isinstance(target, dict):
        raise AnswerRejected("malformed", "statement lacks a verdict or target")
    if host is not None and (target.get("host") != host or target.get("port") != port):
        raise AnswerRejected(
            "wrong-target",
            f"answer is about {target.get('host')}:{target.get('port')}, not {host}:{port}",
        )
    request = stmt.get("request")
    if nonce is not None and (not isinstance(request, dict) or request.get("nonce") != nonce):
        raise AnswerRejected("nonce-mismatch", "answer does not echo our nonce")
    answered_at = stmt.get("answered_at")
    if not isinstance(answered_at, int) or isinstance(answered_at, bool):
        raise AnswerRejected("malformed", "answered_at must be an integer")
    if now is not None and abs(now - answered_at) > max_skew:
        raise AnswerRejected("stale", f"answer time is {now - answered_at} s from now")
    return VerifiedAnswer(stmt, verdict, kid)


__all__ = [
    "FORMAT",
    "MEDIA_TYPE",
    "AnswerRejected",
    "ExtRequest",
    "VerifiedAnswer",
    "b64url",
    "key_id",
    "parse_request",
    "raw_public",
    "sign_answer",
    "statement",
    "unb64url",
    "verify_answer",
]
