"""Shared pieces of the vector generator: the TEST-ONLY keys, the real 2011 data, made-up
fingerprints, and helpers that build legacy bodies and HTTP responses byte for byte."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

HERE = Path(__file__).resolve().parent
KEYS = HERE / "keys"
LEGACY = HERE / "legacy-2011"

Case = dict[str, Any]


def _pem(name: str) -> str:
    return (KEYS / name).read_text()


def _key(name: str) -> rsa.RSAPrivateKey:
    k = serialization.load_pem_private_key((KEYS / name).read_bytes(), password=None)
    assert isinstance(k, rsa.RSAPrivateKey)
    return k


TEST_KEY = _key("test-notary-key.pem")
OTHER_KEY = _key("test-other-key.pem")
TC_BUNDLE = json.loads((LEGACY / "thoughtcrime.notary").read_text())
CERTS = {
    "test-notary": _pem("test-notary-cert.pem"),
    "test-other": _pem("test-other-cert.pem"),
    "thoughtcrime-1": TC_BUNDLE["hosts"][0]["certificate"],
    "thoughtcrime-2": TC_BUNDLE["hosts"][1]["certificate"],
}


def fp(label: str, n: int = 20) -> str:
    """A made-up certificate fingerprint (canonical form), stable across runs."""
    d = hashlib.sha256(label.encode()).digest()[:n]
    return ":".join(f"{b:02X}" for b in d)


FP_A, FP_B, FP_C = fp("site-a"), fp("site-b"), fp("site-c")
FP_A256 = fp("site-a-256", 32)


def signed_payload(entries: list[tuple[int, int, str]]) -> bytes:
    items = ", ".join(
        f'{{"timestamp": {{"start": "{a}", "finish": "{b}"}}, "fingerprint": "{f}"}}'
        for a, b, f in entries
    )
    return ('{"fingerprintList": [' + items + "]}").encode()


def sign(key: rsa.RSAPrivateKey, data: bytes) -> str:
    return base64.b64encode(key.sign(data, padding.PKCS1v15(), hashes.SHA1())).decode()


def body_for(payload: bytes, signature: str) -> bytes:
    return payload[:-1] + b', "signature": "' + signature.encode() + b'"}'


def legacy_signed(payload: bytes, key: rsa.RSAPrivateKey = TEST_KEY) -> bytes:
    """A body whose signed bytes are exactly ``payload``, whatever they hold."""
    return body_for(payload, sign(key, payload))


def legacy_body(entries: list[tuple[int, int, str]], key: rsa.RSAPrivateKey = TEST_KEY) -> bytes:
    p = signed_payload(entries)
    return body_for(p, sign(key, p))


def http(
    status: int,
    body: bytes,
    *,
    reason: str = "",
    headers: list[str] | None = None,
    content_length: bool = True,
    eol: str = "\r\n",
) -> str:
    hs = [f"HTTP/1.0 {status} {reason or 'X'}", "Content-Type: application/json"]
    if content_length:
        hs.append(f"Content-Length: {len(body)}")
    hs += headers or []
    return eol.join(hs) + eol + eol + body.decode()


def numbered(cases: list[Case]) -> list[Case]:
    for i, c in enumerate(cases, 1):
        c["id"] = i
        c.setdefault("flags", [])
    return [dict(sorted(c.items(), key=lambda kv: _ORDER.get(kv[0], 50))) for c in cases]


_ORDER = {"id": 0, "comment": 1, "flags": 2}
