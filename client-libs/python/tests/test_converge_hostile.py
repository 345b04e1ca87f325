"""One hostile notary among honest ones (issue #31), over real TLS on 127.0.0.1.

A genuine notary and a hostile one are asked together. The hostile one answers, validly
signed with its pinned key, each hostile form: a list spliced after the signature, a
5000-digit integer, nesting one level past the bound, NaN, a number as a member name, a byte
after the closing brace; in the legacy format and in the extended one. The verdict must come
back with the genuine notary's success and the hostile notary's failure vote of the documented
kind, never an exception and never the genuine vote lost. Each form has a twin (the nearest
well-formed answer, signed the same way) that the client accepts: the test fails if a refusal
comes from anything but the hostile bytes.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from converge import Client
from converge.bundle import NotaryBundle, parse_bundle
from converge.extended import FORMAT, MEDIA_TYPE, b64url, key_id_of
from converge_fixtures import FakeNotary, TlsTarget, make_config
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

Respond = Callable[[bytes, bytes], bytes]  # (request head, request body) -> response bytes

ED_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
ED_RAW = ED_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
ED_KID = key_id_of(ED_RAW)


@dataclass
class HostileNotary(FakeNotary):
    """A notary on 127.0.0.1 whose every answer is ``respond(head, body)``."""

    respond: Respond | None = None
    extended: bool = False

    def _answer(self, s: ssl.SSLSocket, key: Any) -> None:
        request = self._read_request(s)
        if request is not None and self.respond is not None:
            s.sendall(self.respond(*request))

    def bundle(self, name: str, **kw: Any) -> NotaryBundle:
        doc = super().bundle(name, **kw).to_json()
        if self.extended:
            doc["protocols"] = ["convergence-v1", FORMAT]
            doc["signing_keys"] = [{"alg": "ed25519", "key_id": ED_KID, "status": "current",
                                    "public_key": b64url(ED_RAW)}]
        return parse_bundle(doc)


def _http(status: int, body: bytes, ctype: str = "application/json") -> bytes:
    head = f"HTTP/1.0 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


# ------------------------------------------------------------------ legacy forms


def _entry(fp: str) -> str:
    stamp = '{"start": "1700000000", "finish": "1700000100"}'
    return f'{{"timestamp": {stamp}, "fingerprint": "{fp}"}}'


def _rsa_signature(key: rsa.RSAPrivateKey, signed: bytes) -> bytes:
    return base64.b64encode(key.sign(signed, padding.PKCS1v15(), hashes.SHA1()))


def _legacy(key: rsa.RSAPrivateKey, signed: bytes, after: bytes = b"") -> bytes:
    """The body: ``signed`` without its ``}``, its signature member, then ``after``."""
    return signed[:-1] + b', "signature": "' + _rsa_signature(key, signed) + b'"}' + after


def _with_member(fp: str, value: str) -> bytes:
    return f'{{"fingerprintList": [{_entry(fp)}], "n": {value}}}'.encode()


# form -> (hostile body, twin body) from (key, asked fingerprint, another fingerprint)
LegacyForm = Callable[[rsa.RSAPrivateKey, str, str], tuple[bytes, bytes]]
LEGACY_FORMS: dict[str, LegacyForm] = {
    "splice after the signature": lambda k, fp, other: (
        _legacy(k, f'{{"fingerprintList": [{_entry(other)}]}}'.encode())[:-1]
        + f', "fingerprintList": [{_entry(fp)}]}}'.encode(),
        _legacy(k, f'{{"fingerprintList": [{_entry(fp)}]}}'.encode()),
    ),
    "5000-digit integer": lambda k, fp, _: (
        _legacy(k, _with_member(fp, "9" * 5000)), _legacy(k, _with_member(fp, "9" * 15))
    ),
    "deep nesting": lambda k, fp, _: (  # the object is level 1: 32 more is one too many
        _legacy(k, _with_member(fp, "[" * 32 + "]" * 32)),
        _legacy(k, _with_member(fp, "[" * 31 + "]" * 31)),
    ),
    "NaN": lambda k, fp, _: (_legacy(k, _with_member(fp, "NaN")),
                             _legacy(k, _with_member(fp, "null"))),
    "number key": lambda k, fp, _: (_legacy(k, _with_member(fp, "{1: 2}")),
                                    _legacy(k, _with_member(fp, '{"1": 2}'))),
    "bytes after the brace": lambda k, fp, _: (
        _legacy(k, _with_member(fp, "0"), after=b"\n"), _legacy(k, _with_member(fp, "0"))
    ),
}


@pytest.fixture()
def genuine(pki: dict[str, Any], target: TlsTarget) -> Iterator[FakeNotary]:
    n = FakeNotary(pki["notaries"][0], pki["tmp"],
                   seen={f"127.0.0.1:{target.port}": pki["target"]}).start()
    yield n
    n.stop()


def _check_pair(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, genuine: FakeNotary,
    respond: Respond, *, extended: bool,
) -> dict[str, tuple[str, str]]:
    hostile = HostileNotary(pki["notaries"][3], pki["tmp"], respond=respond,
                            extended=extended).start()
    try:
        bundles = [genuine.bundle("Genuine"), hostile.bundle("Hostile")]
        with Client(make_config(tmp_path, bundles, cache_lifetime=None)) as c:
            v = c.check("127.0.0.1", target.port, pki["target"].sha1)
    finally:
        hostile.stop()
    assert v.trusted  # majority: the genuine success carries it either way
    return {r.name: (r.vote, r.kind) for r in v.results}


@pytest.mark.parametrize("twin", [False, True], ids=["hostile", "twin"])
@pytest.mark.parametrize("form", sorted(LEGACY_FORMS))
def test_legacy_hostile_notary_beside_a_genuine_one(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, genuine: FakeNotary, form: str,
    twin: bool,
) -> None:
    key = serialization.load_pem_private_key(pki["notaries"][3].key_pem, None)
    assert isinstance(key, rsa.RSAPrivateKey)
    hostile_body, twin_body = LEGACY_FORMS[form](key, pki["target"].sha1, pki["forged"].sha1)
    body = twin_body if twin else hostile_body
    votes = _check_pair(tmp_path, pki, target, genuine, lambda h, b: _http(200, body),
                        extended=False)
    assert votes["Genuine"] == ("success", "listed")
    assert votes["Hostile"] == (("success", "listed") if twin else ("failure", "response"))


# ------------------------------------------------------------------ extended forms


def _statement(request: bytes, verdict: str = "match") -> bytes:
    """The statement bytes T a notary signs for ``request`` (keys sorted, no white space)."""
    asked = json.loads(request)
    stmt = {
        "type": FORMAT, "key_id": ED_KID, "verdict": verdict, "detail": None,
        "target": {"host": asked["host"], "port": asked["port"], "ip": None},
        "address": None, "observations": [], "answered_at": int(time.time()), "cache": "miss",
        "request": {"alg": asked["alg"], "fingerprint": asked["fingerprint"],
                    "nonce": asked.get("nonce")},
    }
    return json.dumps(stmt, sort_keys=True, separators=(",", ":")).encode()


def _prefix(signed: bytes) -> bytes:
    value = b64url(ED_KEY.sign(signed))
    return (f'{{"signature":{{"alg":"ed25519","key_id":"{ED_KID}","value":"{value}"}},'
            '"statement":').encode()


def _answer(signed: bytes, after: bytes = b"") -> bytes:
    return _prefix(signed) + signed + b"}" + after


def _member(request: bytes, value: str) -> bytes:
    return b'{"n":' + value.encode() + b"," + _statement(request)[1:]


ExtendedForm = Callable[[bytes], tuple[bytes, bytes, str]]  # -> (hostile, twin, kind)
EXTENDED_FORMS: dict[str, ExtendedForm] = {
    "splice after the signature": lambda r: (
        _prefix(_statement(r, "mismatch")) + _statement(r, "mismatch") + b',"statement":'
        + _statement(r) + b"}",
        _answer(_statement(r)),
        "bad-signature",
    ),
    "5000-digit integer": lambda r: (
        _answer(_member(r, "9" * 5000)), _answer(_member(r, "9" * 15)), "malformed"
    ),
    "deep nesting": lambda r: (
        _answer(_member(r, "[" * 32 + "]" * 32)), _answer(_member(r, "[" * 31 + "]" * 31)),
        "malformed",
    ),
    "NaN": lambda r: (_answer(_member(r, "NaN")), _answer(_member(r, "null")), "malformed"),
    "number key": lambda r: (
        _answer(_member(r, "{1:2}")), _answer(_member(r, '{"1":2}')), "malformed"
    ),
    "bytes after the brace": lambda r: (
        _answer(_statement(r), after=b"\n"), _answer(_statement(r)), "malformed"
    ),
}


@pytest.mark.parametrize("twin", [False, True], ids=["hostile", "twin"])
@pytest.mark.parametrize("form", sorted(EXTENDED_FORMS))
def test_extended_hostile_notary_beside_a_genuine_one(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, genuine: FakeNotary, form: str,
    twin: bool,
) -> None:
    def respond(head: bytes, body: bytes) -> bytes:
        assert head.startswith(b"POST /v2/answer ")
        hostile, twin_answer, _ = EXTENDED_FORMS[form](body)
        return _http(200, twin_answer if twin else hostile, MEDIA_TYPE)

    votes = _check_pair(tmp_path, pki, target, genuine, respond, extended=True)
    kind = EXTENDED_FORMS[form](json.dumps(
        {"host": "h", "port": 1, "alg": "sha1", "fingerprint": "x"}).encode())[2]
    assert votes["Genuine"] == ("success", "listed")
    assert votes["Hostile"] == (("success", "match") if twin else ("failure", kind))
