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
    fp,
    http,
    legacy_body,
    legacy_signed,
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
        i = body.rfind(b', "signature": "')
        return {
            "comment": comment,
            "body": body.decode(),
            "certificate": cert,
            "result": "valid",
            "signed_bytes": (body[:i] + b"}").decode(),
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
        invalid(
            "body re-indented after signing: not the signed bytes plus the signature member",
            reindented,
            "test-notary",
            "response",
            ["shape"],
        ),
        invalid(
            "compact separators before the signature member",
            p3[:-1] + b',"signature":"' + sig_good.encode() + b'"}',
            "test-notary",
            "response",
            ["shape"],
        ),
        invalid(
            "a newline after the closing brace",
            body_for(p3, sig_good) + b"\n",
            "test-notary",
            "response",
            ["shape"],
        ),
        invalid(
            "a member after the signature",
            p3[:-1] + b', "signature": "' + sig_good.encode() + b'", "x": 1}',
            "test-notary",
            "response",
            ["shape", "splice"],
        ),
        invalid(
            "a second signature member: the last one is checked, over bytes that hold the first",
            p3[:-1] + (b', "signature": "' + sig_good.encode() + b'"') * 2 + b"}",
            "test-notary",
            "signature",
            ["shape"],
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
            "fingerprintList is an object, validly signed",
            legacy_signed(b'{"fingerprintList": {}}'),
            "test-notary",
            "response",
        ),
        invalid(
            "fingerprintList is an object, signed bytes of another body",
            body_for(b'{"fingerprintList": {}}', sig_good),
            "test-notary",
            "signature",
        ),
    ]
    return {
        "schema": "converge-vectors/legacy-signatures/1",
        "description": "Signature verification of legacy (v1) notary bodies "
        "(docs/wire-format.md, 'Verifying a legacy answer'): the body must be the signed "
        "bytes S without their final '}', then ', \"signature\": \"<base64>\"}' as its "
        "last bytes (else error response); RSASSA-PKCS1-v1_5 with SHA-1 over S (signed_bytes; "
        "else error signature); then S alone is parsed with a stock JSON parser after the "
        "bounds scan and its shape checked (else error response). `certificate` names an "
        "entry of `certificates`.",
        "notes": {
            "real-2011": "bytes recorded from notary.thoughtcrime.org in December 2011",
            "wrong-key": "verified against a key that did not sign it",
            "wrong-bytes": "a signer that serialised differently; must not verify",
            "shape": "the body is not exactly the signed bytes plus the signature member",
            "splice": "bytes added outside the signed bytes",
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
    cases += hostile_cases(case)
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
            "splice": "bytes outside the signed bytes: the answer is refused whatever they say",
            "hostile": "hostile JSON inside validly signed bytes: refused as response or "
            "answered cleanly, the same in every language",
            "bounds": "the bounds scan: at most 32 open levels, integers of at most 15 digits",
            "boundary": "exactly at a limit, or one past it",
        },
        "certificates": CERTS,
        "tests": numbered(cases),
    }


FP_E = fp("site-e: never vouched for")


def _entry(f: str) -> str:
    return (
        f'{{"timestamp": {{"start": "1323389219", "finish": "1324691510"}}, "fingerprint": "{f}"}}'
    )


def _list(*fps: str, extra: str = "") -> bytes:
    return (
        '{"fingerprintList": [' + ", ".join(_entry(f) for f in fps) + "]" + extra + "}"
    ).encode()


def hostile_cases(case: Any) -> list[Case]:
    """Bodies built to make a client act on bytes it did not verify, or to break its parser."""
    s_a = _list(FP_A)
    sig_a = sign(TEST_KEY, s_a)
    ok = legacy_signed(s_a)
    spliced = (
        s_a[:-1]
        + b', "signature": "'
        + sig_a.encode()
        + b'", "fingerprintList": ['
        + _entry(FP_E).encode()
        + b"]}"
    )

    def signed_extra(extra: str) -> str:
        return http(200, legacy_signed(_list(FP_A, extra=extra)))

    deep = 31  # "d" sits at level 2: 31 arrays reach level 32
    lone = FP_A.replace(FP_A[0], "\\ud800", 1)
    escaped = FP_A.replace(FP_A[0], f"\\u{ord(FP_A[0]):04x}", 1)
    return [
        case(
            "splice: a second list after the signature, asked about the spliced fingerprint",
            http(200, spliced),
            "failure",
            "response",
            fps=[FP_E],
            flags=["splice"],
        ),
        case(
            "splice: a second list after the signature, asked about the signed fingerprint",
            http(200, spliced),
            "failure",
            "response",
            flags=["splice"],
        ),
        case(
            "twin of the splice: the signed list alone does not list the other fingerprint",
            http(200, ok),
            "failure",
            "not-listed",
            fps=[FP_E],
            flags=["splice"],
        ),
        case(
            "another list under the signature of the signed one",
            http(200, body_for(_list(FP_E), sig_a)),
            "failure",
            "signature",
            fps=[FP_E],
            flags=["splice"],
        ),
        case(
            "twin: that list signed for itself",
            http(200, legacy_signed(_list(FP_E))),
            "success",
            "listed",
            fps=[FP_E],
        ),
        case(
            "a member after the signature",
            http(200, s_a[:-1] + b', "signature": "' + sig_a.encode() + b'", "x": 1}'),
            "failure",
            "response",
            flags=["splice"],
        ),
        case(
            "malformed JSON after the signature",
            http(200, s_a[:-1] + b', "signature": "' + sig_a.encode() + b'",}'),
            "failure",
            "response",
            flags=["splice"],
        ),
        case(
            "a closing bracket instead of the brace",
            http(200, s_a[:-1] + b', "signature": "' + sig_a.encode() + b'"]'),
            "failure",
            "response",
            flags=["splice"],
        ),
        case(
            "a byte after the closing brace (within Content-Length)",
            http(200, ok + b"x"),
            "failure",
            "response",
            flags=["splice"],
        ),
        case(
            "a second closing brace", http(200, ok + b"}"), "failure", "response", flags=["splice"]
        ),
        case(
            "a newline after the closing brace",
            http(200, ok + b"\n"),
            "failure",
            "response",
            flags=["splice"],
        ),
        case(
            "a NUL byte after the closing brace",
            http(200, ok + b"\x00"),
            "failure",
            "response",
            flags=["splice"],
        ),
        case(
            "repeated fingerprintList inside the signed bytes: the last counts (listed)",
            http(
                200,
                legacy_signed(s_a[:-1] + b', "fingerprintList": [' + _entry(FP_E).encode() + b"]}"),
            ),
            "success",
            "listed",
            fps=[FP_E],
            flags=["hostile"],
        ),
        case(
            "repeated fingerprintList inside the signed bytes: the first does not count",
            http(
                200,
                legacy_signed(s_a[:-1] + b', "fingerprintList": [' + _entry(FP_E).encode() + b"]}"),
            ),
            "failure",
            "not-listed",
            flags=["hostile"],
        ),
        case(
            "a 5000-digit integer inside the signed bytes",
            signed_extra(', "n": ' + "7" * 5000),
            "failure",
            "response",
            flags=["hostile", "bounds"],
        ),
        case(
            "a 15-digit integer inside the signed bytes",
            signed_extra(', "n": ' + "9" * 15),
            "success",
            "listed",
            flags=["hostile", "bounds", "boundary"],
        ),
        case(
            "a negative 15-digit integer inside the signed bytes",
            signed_extra(', "n": -' + "9" * 15),
            "success",
            "listed",
            flags=["hostile", "bounds", "boundary"],
        ),
        case(
            "a 16-digit integer inside the signed bytes",
            signed_extra(', "n": 1' + "0" * 15),
            "failure",
            "response",
            flags=["hostile", "bounds", "boundary"],
        ),
        case(
            "a fraction inside the signed bytes",
            signed_extra(', "n": 1.5'),
            "failure",
            "response",
            flags=["hostile", "bounds"],
        ),
        case(
            "an exponent inside the signed bytes",
            signed_extra(', "n": 1e2'),
            "failure",
            "response",
            flags=["hostile", "bounds"],
        ),
        case(
            "a leading zero inside the signed bytes",
            signed_extra(', "n": 01'),
            "failure",
            "response",
            flags=["hostile", "bounds"],
        ),
        case(
            "the fingerprint is a number",
            http(
                200,
                legacy_signed(
                    b'{"fingerprintList": [{"timestamp": {"start": "1", "finish": "2"}, '
                    b'"fingerprint": 12345}]}'
                ),
            ),
            "failure",
            "response",
            flags=["hostile"],
        ),
        case(
            "a number as a member name inside the signed bytes",
            signed_extra(", 1.5: 1"),
            "failure",
            "response",
            flags=["hostile"],
        ),
        case(
            "twin: the same name as a string",
            signed_extra(', "1.5": 1'),
            "success",
            "listed",
            flags=["hostile"],
        ),
        case(
            "nesting: 32 levels open at once inside the signed bytes",
            signed_extra(', "d": ' + "[" * deep + "]" * deep),
            "success",
            "listed",
            flags=["hostile", "bounds", "boundary"],
        ),
        case(
            "nesting: 33 levels open at once inside the signed bytes",
            signed_extra(', "d": ' + "[" * (deep + 1) + "]" * (deep + 1)),
            "failure",
            "response",
            flags=["hostile", "bounds", "boundary"],
        ),
        case(
            "nesting: 5000 levels inside the signed bytes",
            signed_extra(', "d": ' + "[" * 5000 + "]" * 5000),
            "failure",
            "response",
            flags=["hostile", "bounds"],
        ),
        case(
            "brackets inside strings do not count as levels",
            signed_extra(', "d": "' + "[{" * 100 + '\\"]"'),
            "success",
            "listed",
            flags=["hostile", "bounds"],
        ),
        case(
            "a lone surrogate in the signed fingerprint",
            http(200, legacy_signed(_list(lone))),
            "failure",
            "response",
            flags=["hostile"],
        ),
        case(
            "twin: an escaped ordinary character in the signed fingerprint (parsed, listed)",
            http(200, legacy_signed(_list(escaped))),
            "success",
            "listed",
            flags=["hostile"],
        ),
        case(
            "NaN inside the signed bytes",
            signed_extra(', "n": NaN'),
            "failure",
            "response",
            flags=["hostile"],
        ),
        case(
            "Infinity inside the signed bytes",
            signed_extra(', "n": -Infinity'),
            "failure",
            "response",
            flags=["hostile"],
        ),
        case(
            "twin: null inside the signed bytes",
            signed_extra(', "n": null'),
            "success",
            "listed",
            flags=["hostile"],
        ),
        case(
            "a comment inside the signed bytes",
            signed_extra(" /* c */"),
            "failure",
            "response",
            flags=["hostile"],
        ),
        case(
            "a trailing comma inside the signed bytes",
            signed_extra(","),
            "failure",
            "response",
            flags=["hostile"],
        ),
        case(
            "a raw control character in a signed string",
            signed_extra(', "x": "a\tb"'),
            "failure",
            "response",
            flags=["hostile"],
        ),
        case(
            "twin: the same character escaped",
            signed_extra(', "x": "a\\tb"'),
            "success",
            "listed",
            flags=["hostile"],
        ),
        case(
            "a raw NUL byte in a signed string",
            signed_extra(', "x": "a\x00b"'),
            "failure",
            "response",
            flags=["hostile"],
        ),
        case(
            "single quotes inside the signed bytes",
            signed_extra(", 'x': 1"),
            "failure",
            "response",
            flags=["hostile"],
        ),
        case(
            "a bad escape inside the signed bytes",
            signed_extra(', "x": "\\q"'),
            "failure",
            "response",
            flags=["hostile"],
        ),
        case(
            "signed bytes that are not an object",
            http(200, body_for(b'["x"}', sign(TEST_KEY, b'["x"}'))),
            "failure",
            "response",
            flags=["hostile"],
        ),
        case(
            "more than 1000 history entries, validly signed",
            http(200, legacy_signed(_list(*([FP_A] * 1001)))),
            "failure",
            "response",
            flags=["hostile", "boundary"],
        ),
        case(
            "exactly 1000 history entries, validly signed",
            http(200, legacy_signed(_list(*([FP_A] * 1000)))),
            "success",
            "listed",
            flags=["hostile", "boundary"],
        ),
    ]
