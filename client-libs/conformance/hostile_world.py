"""Hostile notaries for the conformance runner: servers holding a real notary's own keys (so
every signature they make verifies against its bundle) that answer each check with bytes
built to make a client act on what it did not verify, or to break its parser.

Each form answers the question actually asked (the genuine fingerprint listed, the statement
echoing host, port, fingerprint, nonce and time) and adds one hostile element: a client that
ignored the element would count the answer as a success, so a failure vote of the documented
kind shows the element was refused, and the two honest notaries beside it show that one
hostile notary cannot take a verdict down (docs/wire-format.md, "One parse boundary").
``honest`` is the twin: the same server without a hostile element is a success vote.
"""

from __future__ import annotations

import base64
import json
import socketserver
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from notary.core.canonical import canonical_json

DEEP = 5000
HUGE = "7" * 5000
Legacy = Callable[[str, str, Callable[[bytes], bytes]], bytes]


@dataclass(frozen=True)
class Form:
    """One hostile answer: ``legacy`` builds a v1 body, ``statement`` rewrites the canonical
    extended statement bytes, ``splice`` goes between the signed statement and the body's
    final brace, ``trailer`` after it. ``kinds`` = the expected (legacy, extended) kinds."""

    legacy: Legacy
    statement: Callable[[bytes], bytes]
    kinds: tuple[str, str]
    splice: bytes = b""
    trailer: bytes = b""


def _entry(fingerprint: str) -> str:
    return (
        '{"timestamp": {"start": "1323389219", "finish": "1324691510"}, '
        f'"fingerprint": "{fingerprint}"}}'
    )


def _payload(fingerprint: str, extra: str = "") -> bytes:
    return ('{"fingerprintList": [' + _entry(fingerprint) + "]" + extra + "}").encode()


def _with_signature(payload: bytes, sign: Callable[[bytes], bytes]) -> bytes:
    return payload[:-1] + b', "signature": "' + sign(payload) + b'"}'


def _extra(text: str) -> Legacy:
    return lambda genuine, _forged, sign: _with_signature(_payload(genuine, text), sign)


def _member(text: str) -> Callable[[bytes], bytes]:
    """Insert ``text`` as the statement's first member."""
    return lambda stmt: b"{" + text.encode() + b"," + stmt[1:]


def _splice(genuine: str, forged: str, sign: Callable[[bytes], bytes]) -> bytes:
    signed = _payload(forged)  # the signed list holds another fingerprint ...
    return (  # ... and the asked one is spliced after the signature
        signed[:-1] + b', "signature": "' + sign(signed) + b'", "fingerprintList": ['
        + _entry(genuine).encode() + b"]}"
    )


def _lone_surrogate(genuine: str, _forged: str, sign: Callable[[bytes], bytes]) -> bytes:
    return _with_signature(_payload("\\ud800" + genuine[1:]), sign)


FORMS: dict[str, Form] = {
    "honest": Form(_extra(""), lambda s: s, ("listed", "match")),
    "splice": Form(_splice, lambda s: s, ("response", "bad-signature"),
                   splice=b',"statement":{"verdict":"match"}'),
    "after-brace": Form(
        lambda g, _f, sign: _with_signature(_payload(g), sign) + b"x", lambda s: s,
        ("response", "malformed"), trailer=b"x",
    ),
    "huge-number": Form(_extra(', "n": ' + HUGE), _member('"n":' + HUGE),
                        ("response", "malformed")),
    "deep-nesting": Form(_extra(', "d": ' + "[" * DEEP + "]" * DEEP),
                         _member('"d":' + "[" * DEEP + "]" * DEEP), ("response", "malformed")),
    "nan": Form(_extra(', "n": NaN'), _member('"n":NaN'), ("response", "malformed")),
    "number-key": Form(_extra(", 1.5: 1"), _member("1.5:1"), ("response", "malformed")),
    "lone-surrogate": Form(
        _lone_surrogate,
        lambda s: s.replace(b'"verdict":"match"', b'"verdict":"\\ud800"'),
        ("response", "malformed"),
    ),
    "control-char": Form(_extra(', "x": "a\tb"'), _member('"x":"a\tb"'),
                         ("response", "malformed")),
}


class _Threaded(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@dataclass
class HostileNotary:
    """A TLS server with a real notary's certificate and keys answering with ``form``."""

    form: Form
    genuine_sha1: str
    forged_sha1: str
    tls_key: rsa.RSAPrivateKey
    signing_key: Ed25519PrivateKey
    key_id: str

    def sign_legacy(self, payload: bytes) -> bytes:
        sig = self.tls_key.sign(payload, padding.PKCS1v15(), hashes.SHA1())
        return base64.b64encode(sig)

    def answer(self, request: bytes) -> bytes:
        head, _, body = request.partition(b"\r\n\r\n")
        if head.startswith(b"POST /v2/answer"):
            return self._extended(json.loads(body))
        payload = self.form.legacy(self.genuine_sha1, self.forged_sha1, self.sign_legacy)
        return _http(200, "application/json", payload)

    def _extended(self, req: dict[str, Any]) -> bytes:
        stmt = {
            "type": "converge-answer/1",
            "target": {"host": req.get("host"), "port": req.get("port"), "ip": req.get("ip")},
            "address": "127.0.0.1",
            "request": {"alg": req.get("alg"), "fingerprint": req.get("fingerprint"),
                        "nonce": req.get("nonce")},
            "verdict": "match",
            "detail": None,
            "observations": [],
            "answered_at": int(time.time()),
            "cache": "hit",
            "key_id": self.key_id,
        }
        t = self.form.statement(canonical_json(stmt))
        value = base64.urlsafe_b64encode(self.signing_key.sign(t)).rstrip(b"=")
        prefix = b'{"signature":{"alg":"ed25519","key_id":"' + self.key_id.encode()
        prefix += b'","value":"' + value + b'"},"statement":'
        return _http(200, "application/vnd.converge.answer+json",
                     prefix + t + self.form.splice + b"}" + self.form.trailer)


def _http(status: int, ctype: str, body: bytes) -> bytes:
    head = f"HTTP/1.0 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def start_hostile(
    name: str,
    form: Form,
    data_dir: Path,
    bundle: dict[str, Any],
    genuine_sha1: str,
    forged_sha1: str,
    read_request: Callable[[ssl.SSLSocket], bytes],
    tls_server: Callable[..., socketserver.TCPServer],
) -> tuple[socketserver.TCPServer, dict[str, Any]]:
    """Start ``form`` with the keys in ``data_dir``; return the server and its bundle (the
    notary's own bundle pointing at the hostile port)."""
    tls_key = serialization.load_pem_private_key(
        (data_dir / "notary.key").read_bytes(), password=None
    )
    signing_key = serialization.load_pem_private_key(
        (data_dir / "signing.key").read_bytes(), password=None
    )
    assert isinstance(tls_key, rsa.RSAPrivateKey)
    assert isinstance(signing_key, Ed25519PrivateKey)
    current = [k for k in bundle["signing_keys"] if k["status"] == "current"]
    hostile = HostileNotary(form, genuine_sha1, forged_sha1, tls_key, signing_key,
                            current[0]["key_id"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(data_dir / "notary.pem"), str(data_dir / "notary.key"))

    def handle(s: ssl.SSLSocket) -> None:
        s.sendall(hostile.answer(read_request(s)))

    server = tls_server(("127.0.0.1", 0), ctx, handle)
    # the hostile server answers without log proofs, so its bundle names no log: what its
    # answers are judged on is the statement alone
    doc = {k: v for k, v in bundle.items() if k != "transparency"}
    doc["name"] = name
    doc["hosts"] = [{**bundle["hosts"][0], "ssl_port": server.server_address[1]}]
    return server, doc
