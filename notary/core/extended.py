"""The extended answer format ``converge-answer/1`` (see docs/wire-format.md).

An answer is a JSON document ``{"statement": {...}, "signature": {...}}``. The signature is
Ed25519, by a dedicated signing key (not the TLS key), over the RFC 8785 canonical JSON of
``statement``. The statement names the target host and port, the address probed, the
fingerprint asked about and its algorithm, the client's nonce, the verdict, the observation
history (SHA-256 and SHA-1, first/last seen), the notary's answer time and the key id, so an
answer can be checked offline and cannot be replayed for another target, nonce or time.

Everything here is pure: time is an argument, keys are passed in. The notary signs answers
and never verifies them: verification is the client's (``converge.extended.verify_answer``,
the reference the shared vectors and ``tests/extended`` check the signer against).
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from nacl.bindings import crypto_sign, crypto_sign_seed_keypair

from notary.core.canonical import canonical_json
from notary.core.fingerprint import Fingerprint, colon_hex, parse_fingerprint
from notary.core.history import History
from notary.core.target import Target, normalise_host, parse_ip
from notary.errors import BadData, BadInput

FORMAT = "converge-answer/1"
MEDIA_TYPE = "application/vnd.converge.answer+json"
MAX_REQUEST = 2048
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
    transparency: bool = False  # the client asks for the log's inclusion proof


def parse_request(raw: bytes) -> ExtRequest:
    """``{"host", "port", "fingerprint", "alg"?, "ip"?, "nonce"?, "transparency"?}`` ->
    :class:`ExtRequest`."""
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
    unknown = set(doc) - {"host", "port", "fingerprint", "alg", "ip", "nonce", "transparency"}
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
    transparency = doc.get("transparency", False)
    if not isinstance(transparency, bool):
        raise BadInput("transparency must be true or false")
    target = Target(normalise_host(host), port, ip)
    if ip is not None and ip.compressed == target.host:
        # the same target as without ``ip`` (one record, one logged entry with ``ip`` null),
        # yet a statement naming it: two spellings, one of which no log proof can match
        raise BadInput("ip repeats the host; leave it out")
    return ExtRequest(target, fp, nonce, transparency)


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


class Signs(Protocol):
    def sign(self, data: bytes) -> bytes: ...


class AnswerKey:
    """An Ed25519 private key that signs through libsodium (PyNaCl): 25 us a signature
    against 49 us for OpenSSL 3.0 through ``cryptography`` on a 2-CPU Intel Xeon, and an
    answer with a nonce is signed every time. Ed25519 signatures are deterministic (RFC 8032),
    so both give the same bytes for the same key and message."""

    __slots__ = ("_secret",)

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._secret = crypto_sign_seed_keypair(key.private_bytes_raw())[1]

    def sign(self, data: bytes) -> bytes:
        return crypto_sign(data, self._secret)[:64]


def sign_answer(stmt: dict[str, Any], key: Signs) -> bytes:
    """The answer document bytes: statement plus Ed25519 signature over its canonical form.

    The document is the canonical JSON of ``{"signature": ..., "statement": stmt}``, put
    together from the statement's canonical bytes (the ones just signed) instead of
    serialising the statement a second time: in canonical JSON a member's value is written
    the same wherever it stands, and ``signature`` sorts before ``statement``.
    """
    signed = canonical_json(stmt)
    # the signature object written directly, its members in canonical order; base64url
    # needs no escaping and the key id is written as canonical_json writes a string
    sig = ('{"signature":{"alg":"ed25519","key_id":'
           + json.dumps(stmt["key_id"], ensure_ascii=False)
           + ',"value":"' + b64url(key.sign(signed)) + '"},"statement":')
    return sig.encode("utf-8") + signed + b"}"


__all__ = [
    "FORMAT",
    "MEDIA_TYPE",
    "AnswerKey",
    "ExtRequest",
    "Signs",
    "b64url",
    "key_id",
    "parse_request",
    "raw_public",
    "sign_answer",
    "statement",
    "unb64url",
]
