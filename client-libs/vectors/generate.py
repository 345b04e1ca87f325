#!/usr/bin/env python3
"""Build the shared client test vectors from the Python reference implementation.

    python client-libs/vectors/generate.py            # (re)write the *.json files
    python client-libs/vectors/generate.py --verify   # exit 1 if a file differs or a case fails

Every case below states its expected result by hand (or, for the exhaustive consensus tables,
by an independent brute-force restatement of the rules). The generator runs each case through
``converge.vectors.run_case`` and refuses to write when the implementation disagrees, so a
vector file is both the specification and proof that the reference passes it.

Signatures are RSASSA-PKCS1-v1_5 (deterministic) with the TEST-ONLY keys in ``keys/``; the
real 2011 responses come from ``legacy-2011/``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import itertools
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from converge.vectors import compare, run_case
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


# ----------------------------------------------------------------------------- fingerprints


def fingerprints() -> dict[str, Any]:
    sha1 = "8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB"
    sha256 = FP_A256
    ok = "valid"
    cases: list[Case] = [
        {"comment": "canonical SHA-1", "input": sha1, "result": ok},
        {
            "comment": "lower case with colons",
            "input": sha1.lower(),
            "result": ok,
            "flags": ["case"],
        },
        {"comment": "no separators, upper", "input": sha1.replace(":", ""), "result": ok},
        {
            "comment": "no separators, lower",
            "input": sha1.replace(":", "").lower(),
            "result": ok,
            "flags": ["case"],
        },
        {
            "comment": "mixed case",
            "input": "8f:C0:79:e8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2a:F7:1A:EB",
            "result": ok,
            "flags": ["case"],
        },
        {
            "comment": "surrounding whitespace is ignored",
            "input": f" {sha1}\n",
            "result": ok,
            "flags": ["whitespace"],
        },
        {"comment": "canonical SHA-256", "input": sha256, "result": ok, "flags": ["sha256"]},
        {
            "comment": "SHA-256 lower, no separators",
            "input": sha256.replace(":", "").lower(),
            "result": ok,
            "flags": ["sha256", "case"],
        },
        {"comment": "empty", "input": "", "result": "invalid", "error": "fingerprint"},
        {"comment": "only whitespace", "input": "  ", "result": "invalid", "error": "fingerprint"},
        {
            "comment": "19 bytes",
            "input": sha1[:-3],
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["length"],
        },
        {
            "comment": "21 bytes",
            "input": sha1 + ":00",
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["length"],
        },
        {
            "comment": "MD5-sized (16 bytes)",
            "input": "00" * 16,
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["length"],
        },
        {
            "comment": "SHA-512-sized (64 bytes)",
            "input": "00" * 64,
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["length"],
        },
        {
            "comment": "odd number of hex digits",
            "input": sha1.replace(":", "")[:-1],
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["length"],
        },
        {
            "comment": "non-hex character",
            "input": "G" + sha1[1:],
            "result": "invalid",
            "error": "fingerprint",
        },
        {
            "comment": "separators only between some pairs",
            "input": sha1.replace(":", "", 3),
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["separators"],
        },
        {
            "comment": "dash separators",
            "input": sha1.replace(":", "-"),
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["separators"],
        },
        {
            "comment": "space separators",
            "input": sha1.replace(":", " "),
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["separators"],
        },
        {
            "comment": "single-digit groups",
            "input": "8:C0" + sha1[4:],
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["separators"],
        },
        {
            "comment": "trailing colon",
            "input": sha1 + ":",
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["separators"],
        },
        {
            "comment": "algorithm prefix is not accepted",
            "input": "sha1:" + sha1,
            "result": "invalid",
            "error": "fingerprint",
        },
        {
            "comment": "over the 200-character input bound",
            "input": " " * 150 + sha1,
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["limit"],
        },
        {
            "comment": "non-ASCII digit",
            "input": "\u0660" * 40,
            "result": "invalid",
            "error": "fingerprint",
        },
    ]
    for c in cases:
        if c["result"] == "valid":
            hexd = c["input"].strip().replace(":", "").upper()
            c["algorithm"] = "sha1" if len(hexd) == 40 else "sha256"
            c["canonical"] = ":".join(hexd[i : i + 2] for i in range(0, len(hexd), 2))
    return {
        "schema": "converge-vectors/fingerprints/1",
        "description": "Parsing certificate fingerprints given by users and notaries. Output "
        "for valid input: the algorithm and the canonical form (upper-case, colon-separated).",
        "notes": {
            "case": "hex digits in any case are accepted",
            "whitespace": "surrounding ASCII whitespace is stripped",
            "sha256": "SHA-256 fingerprints (32 bytes) are accepted besides SHA-1",
            "length": "only 20 and 32 byte digests are fingerprints",
            "separators": "a colon between every pair of digits, or no separator at all",
            "limit": "inputs over 200 characters are refused before parsing",
        },
        "tests": numbered(cases),
    }


# ----------------------------------------------------------------------------- requests


def requests_() -> dict[str, Any]:
    def req(host: str, port: int, fpr: str) -> str:
        body = f"fingerprint={fpr}"
        return (
            f"POST /target/{host}+{port} HTTP/1.0\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}"
        )

    cases: list[Case] = [
        {
            "comment": "the add-on's request",
            "host": "www.example.com",
            "port": 443,
            "fingerprint": FP_A,
            "result": "valid",
            "request": req("www.example.com", 443, FP_A),
        },
        {
            "comment": "fingerprint normalised to canonical form",
            "host": "example.org",
            "port": 8443,
            "fingerprint": FP_A.replace(":", "").lower(),
            "result": "valid",
            "request": req("example.org", 8443, FP_A),
            "flags": ["normalise"],
        },
        {
            "comment": "host name lower-cased",
            "host": "WWW.Example.COM",
            "port": 443,
            "fingerprint": FP_A,
            "result": "valid",
            "request": req("www.example.com", 443, FP_A),
            "flags": ["normalise"],
        },
        {
            "comment": "SHA-256 sent as is (canonical)",
            "host": "127.0.0.1",
            "port": 4433,
            "fingerprint": FP_A256,
            "result": "valid",
            "request": req("127.0.0.1", 4433, FP_A256),
            "flags": ["sha256"],
        },
        {
            "comment": "slash in host",
            "host": "a/b",
            "port": 443,
            "fingerprint": FP_A,
            "result": "invalid",
            "error": "target",
        },
        {
            "comment": "space in host",
            "host": "a b",
            "port": 443,
            "fingerprint": FP_A,
            "result": "invalid",
            "error": "target",
        },
        {
            "comment": "plus in host",
            "host": "a+b",
            "port": 443,
            "fingerprint": FP_A,
            "result": "invalid",
            "error": "target",
        },
        {
            "comment": "empty host",
            "host": "",
            "port": 443,
            "fingerprint": FP_A,
            "result": "invalid",
            "error": "target",
        },
        {
            "comment": "port 0",
            "host": "example.com",
            "port": 0,
            "fingerprint": FP_A,
            "result": "invalid",
            "error": "target",
            "flags": ["limit"],
        },
        {
            "comment": "port 65536",
            "host": "example.com",
            "port": 65536,
            "fingerprint": FP_A,
            "result": "invalid",
            "error": "target",
            "flags": ["limit"],
        },
        {
            "comment": "port 65535",
            "host": "example.com",
            "port": 65535,
            "fingerprint": FP_A,
            "result": "valid",
            "request": req("example.com", 65535, FP_A),
            "flags": ["limit"],
        },
    ]
    return {
        "schema": "converge-vectors/requests/1",
        "description": "The exact bytes of a legacy notary request (HTTP/1.0, no Host header, "
        "Connection: close, form body with the canonical fingerprint, colons unescaped).",
        "notes": {
            "normalise": "host names are lower-cased, fingerprints made canonical",
            "sha256": "SHA-256 fingerprints are sent in their canonical form",
            "limit": "ports must be 1..65535",
        },
        "tests": numbered(cases),
    }


# ----------------------------------------------------------------------------- signatures


def signatures() -> dict[str, Any]:
    good = (LEGACY / "response-good.json").read_bytes().rstrip(b"\n")
    corrupted = (LEGACY / "response-corrupted.json").read_bytes().rstrip(b"\n")
    e1 = [(1323389219, 1324691510, FP_A)]
    e3 = [
        (1323389219, 1324691510, FP_A),
        (1322677148, 1323388979, FP_B),
        (1320812239, 1322677016, FP_C),
    ]
    p3 = signed_payload(e3)
    compact = json.dumps(json.loads(p3), separators=(",", ":")).encode()
    sorted_keys = json.dumps(json.loads(p3), sort_keys=True).encode()
    tampered = body_for(p3, sign(TEST_KEY, p3)).replace(b"1324691510", b"1324691511")
    reindented_obj = json.loads(body_for(p3, sign(TEST_KEY, p3)))
    reindented = json.dumps(reindented_obj, indent=2).encode()
    sig_good = sign(TEST_KEY, p3)
    bad_b64 = body_for(p3, sig_good[:-4] + "!!!!")
    truncated_sig = body_for(p3, base64.b64encode(base64.b64decode(sig_good)[:-1]).decode())
    malformed_entry = legacy_body([(1, 2, "zz")])

    def valid(comment: str, body: bytes, cert: str, flags: list[str] | None = None) -> Case:
        i = body.rfind(b', "signature"')
        cut = (body[:i] + b"}").decode() if i >= 0 else None
        obj = json.loads(body)
        del obj["signature"]
        return {
            "comment": comment,
            "body": body.decode(),
            "certificate": cert,
            "result": "valid",
            "signed_bytes": cut,
            "signed_bytes_reserialised": json.dumps(obj),
            "flags": flags or [],
        }

    def invalid(
        comment: str, body: bytes, cert: str, error: str, flags: list[str] | None = None
    ) -> Case:
        return {
            "comment": comment,
            "body": body.decode(),
            "certificate": cert,
            "result": "invalid",
            "error": error,
            "flags": flags or [],
        }

    cases = [
        valid(
            "real 2011 response from notary.thoughtcrime.org", good, "thoughtcrime-1", ["real-2011"]
        ),
        invalid(
            "real 2011 response with a corrupted signature",
            corrupted,
            "thoughtcrime-1",
            "signature",
            ["real-2011"],
        ),
        invalid(
            "real 2011 response checked against the other host's certificate",
            good,
            "thoughtcrime-2",
            "signature",
            ["real-2011", "wrong-key"],
        ),
        invalid(
            "real 2011 response checked against an unrelated key",
            good,
            "test-notary",
            "signature",
            ["real-2011", "wrong-key"],
        ),
        valid("one entry", legacy_body(e1), "test-notary"),
        valid("three entries, newest first", body_for(p3, sig_good), "test-notary"),
        valid("empty history", legacy_body([]), "test-notary"),
        valid(
            "body re-indented after signing: recipe (b) fails, recipe (a) verifies",
            reindented,
            "test-notary",
            ["recipe-a-only"],
        ),
        invalid(
            "signed by another notary's key",
            legacy_body(e3, OTHER_KEY),
            "test-notary",
            "signature",
            ["wrong-key"],
        ),
        invalid(
            "a timestamp changed after signing", tampered, "test-notary", "signature", ["tampered"]
        ),
        invalid(
            "signature over compact separators",
            body_for(p3, sign(TEST_KEY, compact)),
            "test-notary",
            "signature",
            ["wrong-bytes"],
        ),
        invalid(
            "signature over sorted keys",
            body_for(p3, sign(TEST_KEY, sorted_keys)),
            "test-notary",
            "signature",
            ["wrong-bytes"],
        ),
        invalid("signature one byte short", truncated_sig, "test-notary", "signature"),
        invalid("signature is not base64", bad_b64, "test-notary", "response"),
        invalid("no signature member", p3, "test-notary", "response"),
        invalid("signature is a number", p3[:-1] + b', "signature": 5}', "test-notary", "response"),
        invalid("not JSON", b"<html>hello</html>", "test-notary", "response"),
        invalid("a JSON array", b"[]", "test-notary", "response"),
        invalid(
            "history entry with a malformed fingerprint, validly signed",
            malformed_entry,
            "test-notary",
            "response",
        ),
        invalid(
            "fingerprintList is an object",
            body_for(b'{"fingerprintList": {}}', sig_good),
            "test-notary",
            "response",
        ),
    ]
    return {
        "schema": "converge-vectors/legacy-signatures/1",
        "description": "Signature verification of legacy (v1) notary bodies: RSASSA-PKCS1-v1_5 "
        "with SHA-1 over the body without its signature member. Recipe (b): cut at the last "
        "', \"signature\"' and append '}' (signed_bytes). Recipe (a): parse keeping key "
        "order, drop signature, re-serialise with Python json.dumps defaults "
        "(signed_bytes_reserialised). A body verifies if either recipe's bytes verify. "
        "`certificate` names an entry of `certificates`.",
        "notes": {
            "real-2011": "bytes recorded from notary.thoughtcrime.org in December 2011",
            "wrong-key": "verified against a key that did not sign it",
            "wrong-bytes": "a signer that serialised differently; must not verify",
            "recipe-a-only": "only the re-serialisation recipe reproduces the signed bytes",
            "tampered": "signed content changed after signing",
        },
        "certificates": CERTS,
        "tests": numbered(cases),
    }


# ----------------------------------------------------------------------------- responses


def responses() -> dict[str, Any]:
    good_2011 = (LEGACY / "response-good.json").read_bytes().rstrip(b"\n")
    bad_2011 = (LEGACY / "response-corrupted.json").read_bytes().rstrip(b"\n")
    fp_2011 = "8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB"
    hist = [(1323389219, 1324691510, FP_A), (1322677148, 1323388979, FP_B)]
    b_ok = legacy_body(hist)
    b_other = legacy_body([(1323389219, 1324691510, FP_C)])
    b_badsig = legacy_body(hist, OTHER_KEY)
    lower = signed_payload([(1, 2, FP_A.lower())])
    b_lower = body_for(lower, sign(TEST_KEY, lower))

    def case(
        comment: str,
        raw: str,
        result: str,
        kind: str,
        *,
        fps: list[str] | None = None,
        cert: str = "test-notary",
        flags: list[str] | None = None,
    ) -> Case:
        return {
            "comment": comment,
            "raw": raw,
            "fingerprints": fps or [FP_A],
            "certificate": cert,
            "result": result,
            "kind": kind,
            "flags": flags or [],
        }

    cases = [
        case("200, fingerprint listed, good signature", http(200, b_ok), "success", "listed"),
        case(
            "200, fingerprint listed in lower case",
            http(200, b_lower),
            "success",
            "listed",
            flags=["normalise"],
        ),
        case(
            "200 without Content-Length (read until close)",
            http(200, b_ok, content_length=False),
            "success",
            "listed",
            flags=["framing"],
        ),
        case(
            "200 with bare LF line endings",
            http(200, b_ok, eol="\n"),
            "success",
            "listed",
            flags=["framing"],
        ),
        case(
            "bytes after Content-Length are ignored",
            http(200, b_ok) + "garbage",
            "success",
            "listed",
            flags=["framing"],
        ),
        case(
            "200 with Cache-Status and extra headers",
            http(200, b_ok, headers=["Cache-Status: converge-notary; hit", "Server: x"]),
            "success",
            "listed",
        ),
        case(
            "200 but the fingerprint is not in the signed list",
            http(200, b_other),
            "failure",
            "not-listed",
        ),
        case("200 with an empty list", http(200, legacy_body([])), "failure", "not-listed"),
        case(
            "200 with a signature by another key",
            http(200, b_badsig),
            "failure",
            "signature",
            flags=["signature"],
        ),
        case(
            "200 with a malformed body", http(200, b'{"fingerprintList": ['), "failure", "response"
        ),
        case("200 with an HTML body", http(200, b"<html></html>"), "failure", "response"),
        case(
            "200 with chunked transfer coding",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            f"{len(b_ok):x}\r\n{b_ok.decode()}\r\n0\r\n\r\n",
            "failure",
            "response",
            flags=["framing"],
        ),
        case(
            "Content-Length longer than the body (truncated)",
            http(200, b_ok).replace(
                f"Content-Length: {len(b_ok)}", f"Content-Length: {len(b_ok) + 10}"
            ),
            "failure",
            "response",
            flags=["framing"],
        ),
        case(
            "no end of headers",
            "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n",
            "failure",
            "response",
            flags=["framing"],
        ),
        case(
            "not HTTP at all",
            "SSH-2.0-OpenSSH_9.6\r\n\r\n",
            "failure",
            "response",
            flags=["framing"],
        ),
        case(
            "HTTP/2-style status line",
            "HTTP/2 200\r\n\r\n" + b_ok.decode(),
            "failure",
            "response",
            flags=["framing"],
        ),
        case(
            "asked by SHA-256 alone: a v1 list holds SHA-1 only, the pinned 200 decides",
            http(200, b_ok),
            "success",
            "status-only",
            fps=[FP_A256],
            flags=["sha256"],
        ),
        case(
            "asked by SHA-256 with the SHA-1 alias known, alias listed",
            http(200, b_ok),
            "success",
            "listed",
            fps=[FP_A256, FP_A],
            flags=["sha256"],
        ),
        case(
            "asked by SHA-256 with the SHA-1 alias known, alias not listed",
            http(200, b_other),
            "failure",
            "not-listed",
            fps=[FP_A256, FP_A],
            flags=["sha256"],
        ),
        case("409 with a signed list", http(409, b_other), "failure", "mismatch"),
        case(
            "409 with a bad signature is still a failure",
            http(409, b_badsig),
            "failure",
            "signature",
            flags=["signature"],
        ),
        case("409 with an empty body", http(409, b""), "failure", "response"),
        case(
            "303 inconclusive (never sent by real servers)",
            http(303, b""),
            "unreachable",
            "inconclusive",
            flags=["stand-aside"],
        ),
        case(
            "real 2011 response, good",
            http(200, good_2011),
            "success",
            "listed",
            fps=[fp_2011],
            cert="thoughtcrime-1",
            flags=["real-2011"],
        ),
        case(
            "real 2011 response, corrupted signature",
            http(200, bad_2011),
            "failure",
            "signature",
            fps=[fp_2011],
            cert="thoughtcrime-1",
            flags=["real-2011"],
        ),
        case(
            "real 2011 response, fingerprint asked in lower case without colons",
            http(200, good_2011),
            "success",
            "listed",
            fps=[fp_2011.replace(":", "").lower()],
            cert="thoughtcrime-1",
            flags=["real-2011", "normalise"],
        ),
    ]
    for status in (
        100,
        201,
        204,
        301,
        302,
        304,
        400,
        401,
        403,
        404,
        405,
        408,
        413,
        429,
        500,
        502,
        503,
        504,
    ):
        extra = ["Retry-After: 1"] if status in (429, 503) else []
        cases.append(
            case(
                f"status {status} is a connectivity failure",
                http(status, b"error", headers=extra),
                "unreachable",
                "status",
                flags=["stand-aside"],
            )
        )
    return {
        "schema": "converge-vectors/notary-responses/1",
        "description": "Whole HTTP responses from a pinned notary (read until the server "
        "closes) reduced to a vote: success, failure or unreachable, with a kind. "
        "`fingerprints` are the forms of the asked certificate's fingerprint the client "
        "knows, the asked one first. `certificate` names the notary's certificate.",
        "notes": {
            "framing": "HTTP framing rules: no chunked coding, Content-Length honoured",
            "normalise": "fingerprints compare after normalisation",
            "sha256": "SHA-256 queries against SHA-1-only v1 lists",
            "signature": "a bad signature is a failure, never ignored",
            "stand-aside": "votes of kind unreachable may stand aside (consensus.json)",
            "real-2011": "bytes recorded from notary.thoughtcrime.org in December 2011",
        },
        "certificates": CERTS,
        "tests": numbered(cases),
    }


# ----------------------------------------------------------------------------- bundles


def bundles() -> dict[str, Any]:
    tc = (LEGACY / "thoughtcrime.notary").read_text().rstrip("\n")
    cert = CERTS["test-notary"]
    host = {"host": "notary-a.test", "ssl_port": 443, "http_port": 80, "certificate": cert}
    v1 = {
        "version": 1,
        "name": "Test Org",
        "bundle_location": "https://notary-a.test/a.notary",
        "hosts": [host],
    }

    def with_(obj: dict[str, Any], **kw: Any) -> str:
        o = dict(obj)
        for k, v in kw.items():
            if v is ...:
                o.pop(k, None)
            else:
                o[k] = v
        return json.dumps(o)

    def hosts_out(*names: tuple[str, int, int, str]) -> list[dict[str, Any]]:
        return [{"host": h, "ssl_port": s, "http_port": p, "pin": pin} for h, s, p, pin in names]

    import hashlib as _h

    from cryptography import x509

    def pin(pem: str) -> str:
        der = x509.load_pem_x509_certificate(pem.encode()).public_bytes(serialization.Encoding.DER)
        return ":".join(f"{b:02X}" for b in _h.sha1(der).digest())

    a = ("notary-a.test", 443, 80, pin(cert))
    bad = {"result": "invalid", "error": "bundle"}
    cases: list[Case] = [
        {
            "comment": "the real 2011 thoughtcrime bundle (v1, two hosts)",
            "bundle": tc,
            "result": "valid",
            "name": "Thoughtcrime Labs",
            "version": 1,
            "hosts": hosts_out(
                *[
                    (h["host"], h["ssl_port"], h["http_port"], pin(h["certificate"]))
                    for h in TC_BUNDLE["hosts"]
                ]
            ),
            "flags": ["real-2011"],
        },
        {
            "comment": "v1, one host",
            "bundle": json.dumps(v1),
            "result": "valid",
            "name": "Test Org",
            "version": 1,
            "hosts": hosts_out(a),
        },
        {
            "comment": "v1 with a region",
            "bundle": with_(v1, region="de"),
            "result": "valid",
            "name": "Test Org",
            "version": 1,
            "hosts": hosts_out(a),
        },
        {
            "comment": "v1 without bundle_location",
            "bundle": with_(v1, bundle_location=...),
            "result": "valid",
            "name": "Test Org",
            "version": 1,
            "hosts": hosts_out(a),
        },
        {
            "comment": "v0: a single host, named after it",
            "bundle": json.dumps(host),
            "result": "valid",
            "name": "notary-a.test",
            "version": 0,
            "hosts": hosts_out(a),
            "flags": ["v0"],
        },
        {
            "comment": "v0 with explicit version 0",
            "bundle": json.dumps({"version": 0, **host}),
            "result": "valid",
            "name": "notary-a.test",
            "version": 0,
            "hosts": hosts_out(a),
            "flags": ["v0"],
        },
        {"comment": "version 2", "bundle": with_(v1, version=2), **bad, "flags": ["version"]},
        {
            "comment": "version as a string",
            "bundle": with_(v1, version="1"),
            **bad,
            "flags": ["version"],
        },
        {"comment": "version true", "bundle": with_(v1, version=True), **bad, "flags": ["version"]},
        {"comment": "no name", "bundle": with_(v1, name=...), **bad},
        {"comment": "empty name", "bundle": with_(v1, name=" "), **bad},
        {"comment": "no hosts", "bundle": with_(v1, hosts=[]), **bad},
        {"comment": "17 hosts", "bundle": with_(v1, hosts=[host] * 17), **bad, "flags": ["limit"]},
        {
            "comment": "16 hosts",
            "bundle": with_(v1, hosts=[host] * 16),
            "result": "valid",
            "name": "Test Org",
            "version": 1,
            "hosts": hosts_out(*[a] * 16),
            "flags": ["limit"],
        },
        {
            "comment": "host without certificate",
            "bundle": with_(v1, hosts=[{k: v for k, v in host.items() if k != "certificate"}]),
            **bad,
        },
        {
            "comment": "certificate is not PEM",
            "bundle": with_(v1, hosts=[{**host, "certificate": "hello"}]),
            **bad,
        },
        {
            "comment": "certificate PEM with a broken body",
            "bundle": with_(v1, hosts=[{**host, "certificate": cert.replace("M", "A", 40)}]),
            **bad,
        },
        {
            "comment": "two certificates in one PEM",
            "bundle": with_(v1, hosts=[{**host, "certificate": cert + cert}]),
            **bad,
        },
        {
            "comment": "ssl_port 0",
            "bundle": with_(v1, hosts=[{**host, "ssl_port": 0}]),
            **bad,
            "flags": ["limit"],
        },
        {
            "comment": "ssl_port 65536",
            "bundle": with_(v1, hosts=[{**host, "ssl_port": 65536}]),
            **bad,
            "flags": ["limit"],
        },
        {
            "comment": "ssl_port as a string",
            "bundle": with_(v1, hosts=[{**host, "ssl_port": "443"}]),
            **bad,
        },
        {
            "comment": "http_port missing",
            "bundle": with_(v1, hosts=[{k: v for k, v in host.items() if k != "http_port"}]),
            **bad,
        },
        {
            "comment": "host name with a slash",
            "bundle": with_(v1, hosts=[{**host, "host": "a/b"}]),
            **bad,
        },
        {
            "comment": "bundle_location over http",
            "bundle": with_(v1, bundle_location="http://notary-a.test/a.notary"),
            **bad,
        },
        {
            "comment": "bundle_location not ending in .notary",
            "bundle": with_(v1, bundle_location="https://notary-a.test/a.json"),
            **bad,
        },
        {"comment": "region of three letters", "bundle": with_(v1, region="DEU"), **bad},
        {"comment": "not JSON", "bundle": "{version: 1}", **bad},
        {"comment": "a JSON array", "bundle": "[]", **bad},
        {
            "comment": "larger than 64 KiB",
            "bundle": with_(v1, padding="x" * 65536),
            **bad,
            "flags": ["limit"],
        },
    ]
    return {
        "schema": "converge-vectors/bundles/1",
        "description": "Parsing .notary bundles (v1 and the v0 single-host form). Output for "
        "valid bundles: name, version and each host with its pin (SHA-1 of the DER "
        "certificate, canonical form).",
        "notes": {
            "real-2011": "the bundle published by Thoughtcrime Labs in 2011",
            "v0": "the version-less single-host form",
            "version": "only versions 0 and 1 (integers) are accepted",
            "limit": "bounds: 16 hosts, ports 1..65535, 64 KiB per bundle",
        },
        "tests": numbered(cases),
    }


# ----------------------------------------------------------------------------- consensus


def _reference(policy: str, votes: tuple[str, ...], stand_aside: bool) -> bool:
    """The rules restated independently of converge.policy."""
    counted = [v for v in votes if not (stand_aside and v == "unreachable")]
    s = sum(1 for v in counted if v == "success")
    if s == 0:
        return False
    if policy == "consensus":
        return s == len(counted)
    if policy == "majority":
        return s >= math.ceil(len(counted) / 2)
    return True


def _reference_settled(policy: str, votes: tuple[str, ...], pending: int, stand_aside: bool) -> str:
    finals = {
        _reference(policy, votes + rest, stand_aside)
        for rest in itertools.product(("success", "failure", "unreachable"), repeat=pending)
    }
    if len(finals) > 1:
        return "unsettled"
    return "trusted" if finals.pop() else "untrusted"


def consensus() -> dict[str, Any]:
    cases: list[Case] = []
    hand = [
        ("majority", ["success", "success", "failure"], False, "trusted", "2 of 3"),
        ("majority", ["success", "failure"], False, "trusted", "1 of 2 is ceil(2/2)"),
        ("majority", ["success", "failure", "failure"], False, "untrusted", "1 of 3"),
        (
            "consensus",
            ["success", "success", "unreachable"],
            True,
            "trusted",
            "the unreachable notary stands aside",
        ),
        (
            "consensus",
            ["success", "success", "unreachable"],
            False,
            "untrusted",
            "the unreachable notary counts as a failure",
        ),
        ("majority", ["success", "unreachable", "unreachable"], True, "trusted", "1 of 1 counted"),
        (
            "majority",
            ["success", "unreachable", "unreachable"],
            False,
            "untrusted",
            "1 of 3 counted",
        ),
        (
            "minority",
            ["unreachable", "unreachable", "unreachable"],
            True,
            "untrusted",
            "nobody answered: never trusted",
        ),
        ("consensus", [], True, "untrusted", "no notary asked: never trusted"),
        ("minority", ["failure", "failure", "success"], False, "trusted", "one is enough"),
    ]
    for pol, votes, sa, res, why in hand:
        cases.append(
            {
                "comment": why,
                "policy": pol,
                "stand_aside": sa,
                "votes": votes,
                "result": res,
                "flags": ["example"],
            }
        )
    outcomes = ("success", "failure", "unreachable")
    for pol in ("consensus", "majority", "minority"):
        for sa in (True, False):
            for n in range(1, 5):
                for votes in itertools.combinations_with_replacement(outcomes, n):
                    cases.append(
                        {
                            "comment": f"truth table: {pol}, stand-aside {'on' if sa else 'off'}",
                            "policy": pol,
                            "stand_aside": sa,
                            "votes": list(votes),
                            "result": "trusted" if _reference(pol, votes, sa) else "untrusted",
                            "flags": ["truth-table"],
                        }
                    )
    for pol in ("consensus", "majority", "minority"):
        for sa in (True, False):
            for total in (3, 4):
                for done in range(total):
                    for votes in itertools.combinations_with_replacement(outcomes, done):
                        cases.append(
                            {
                                "comment": f"early return: {pol}, {total - done} pending",
                                "policy": pol,
                                "stand_aside": sa,
                                "votes": list(votes),
                                "pending": total - done,
                                "result": _reference_settled(pol, votes, total - done, sa),
                                "flags": ["early-return"],
                            }
                        )
    return {
        "schema": "converge-vectors/consensus/1",
        "description": "Verdicts from votes. n = notaries that count (all asked, minus "
        "unreachable ones when stand_aside), s = successes. consensus: s == n and s >= 1; "
        "majority: s >= ceil(n/2) and s >= 1; minority: s >= 1. With `pending` > 0 the "
        "result is the verdict if every outcome of the pending notaries gives the same one "
        "(early return is safe), else 'unsettled'.",
        "notes": {
            "example": "hand-written cases from the add-on's documented rules",
            "truth-table": "every multiset of 1..4 votes (expected values from an independent "
            "restatement of the rules in generate.py)",
            "early-return": "whether the verdict is settled while notaries are pending "
            "(expected values by brute force over 3^pending outcomes)",
        },
        "tests": numbered(cases),
    }


# ----------------------------------------------------------------------------- cache


def cache() -> dict[str, Any]:
    now = 1_700_000_000
    week = 604800
    rows = [
        ("no entry", None, week, "miss", []),
        ("fresh entry", now - 60, week, "hit", []),
        ("exactly one lifetime old", now - week, week, "hit", ["boundary"]),
        ("one second past the lifetime", now - week - 1, week, "stale", ["boundary"]),
        (
            "old entry, no lifetime (the 2011 add-on never expired)",
            now - 10 * week,
            None,
            "hit",
            ["no-expiry"],
        ),
        ("lifetime 0, written this second", now, 0, "hit", ["boundary"]),
        ("lifetime 0, one second later", now - 1, 0, "stale", ["boundary"]),
        ("300 s in the future (clock skew tolerated)", now + 300, week, "hit", ["future"]),
        ("301 s in the future", now + 301, week, "stale", ["future"]),
        ("far future, no lifetime", now + 86400, None, "stale", ["future"]),
        ("milliseconds timestamp, fresh", (now - 60) * 1000, week, "hit", ["milliseconds"]),
        (
            "milliseconds timestamp, stale",
            (now - week - 60) * 1000,
            week,
            "stale",
            ["milliseconds"],
        ),
        ("timestamp 0", 0, week, "stale", []),
        ("timestamp 0, no lifetime", 0, None, "hit", ["no-expiry"]),
    ]
    cases = [
        {"comment": c, "timestamp": ts, "now": now, "lifetime": lt, "result": r, "flags": f}
        for c, ts, lt, r, f in rows
    ]
    return {
        "schema": "converge-vectors/cache/1",
        "description": "Local cache decisions for a (location, fingerprint) entry written at "
        "`timestamp` (unix seconds), checked at `now` with a lifetime in seconds (null = "
        "never expires): hit, stale (ask the notaries again) or miss (no entry).",
        "notes": {
            "boundary": "age == lifetime is still a hit",
            "no-expiry": "lifetime null keeps entries forever",
            "future": "entries more than 300 s in the future are stale",
            "milliseconds": "timestamps above 1e11 are milliseconds",
        },
        "tests": numbered(cases),
    }


FILES: dict[str, Callable[[], dict[str, Any]]] = {
    "fingerprints.json": fingerprints,
    "requests.json": requests_,
    "legacy-signatures.json": signatures,
    "notary-responses.json": responses,
    "bundles.json": bundles,
    "consensus.json": consensus,
    "cache.json": cache,
}


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=True) + "\n"


def check_against_implementation(name: str, doc: dict[str, Any]) -> list[str]:
    problems = []
    for case in doc["tests"]:
        for p in compare(case, run_case(doc, case)):
            problems.append(f"{name} #{case['id']} ({case['comment']}): {p}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--verify",
        action="store_true",
        help="do not write; exit 1 if a file is stale or a case fails",
    )
    args = ap.parse_args(argv)
    status = 0
    for name, build in FILES.items():
        doc = build()
        problems = check_against_implementation(name, doc)
        for p in problems:
            print(f"FAIL {p}", file=sys.stderr)
        if problems:
            status = 1
            continue
        text = render(doc)
        path = HERE / name
        if args.verify:
            if not path.exists() or path.read_text() != text:
                print(f"STALE {name}: run client-libs/vectors/generate.py", file=sys.stderr)
                status = 1
            else:
                print(f"ok    {name}: {len(doc['tests'])} cases")
        else:
            path.write_text(text)
            print(f"wrote {name}: {len(doc['tests'])} cases")
    return status


if __name__ == "__main__":
    sys.exit(main())
