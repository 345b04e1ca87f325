"""Vector cases for the legacy wire format: signed bytes and signatures, whole notary responses."""

from __future__ import annotations

import base64
import json
from typing import Any

from _common import (
    CERTS,
    FP_A,
    FP_A256,
    FP_B,
    FP_C,
    LEGACY,
    OTHER_KEY,
    TEST_KEY,
    Case,
    body_for,
    http,
    legacy_body,
    numbered,
    sign,
    signed_payload,
)

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
