"""The extended format end to end over loopback, beside unaffected legacy clients. The
notary's answers are checked with the client's verifier (``converge.extended``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import ssl
from typing import TYPE_CHECKING

import aiohttp
from converge.extended import AnswerRejected, verify_answer
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from notary import keys
from notary.cli import make_bundle
from notary.core import extended, legacy
from notary.core.fingerprint import colon_hex
from notary.core.signing import verify_legacy

if TYPE_CHECKING:
    from tests.extended.conftest import Notary, Target

NONCE = "bm9uY2Utb25lLTEyMw"


def bundle_keys(n: Notary) -> dict[str, Ed25519PublicKey]:
    doc = make_bundle(n.identity.cert_pem, "localhost", 443, 80, "Test", None, None)
    doc["signing_keys"] = keys.bundle_signing_keys(n.settings.signing_key_path, now=int(n.clock[0]))
    return {
        k["key_id"]: Ed25519PublicKey.from_public_bytes(extended.unb64url(k["public_key"]))
        for k in doc["signing_keys"]
    }


async def ask(n: Notary, **doc: object) -> tuple[int, bytes, str]:
    async with aiohttp.ClientSession() as s, s.post(
        n.url + "/v2/answer", data=json.dumps(doc), ssl=False
    ) as r:
        return r.status, await r.read(), r.headers.get("Cache-Status", "")


def sha256(der: bytes) -> str:
    return colon_hex(hashlib.sha256(der).digest())


async def test_match_then_cached_answer_verifies_and_binds(
    notary: Notary, tls_target: Target
) -> None:
    fp = sha256(tls_target.der)
    status, raw, cache = await ask(notary, host="site.test", port=tls_target.port,
                                   fingerprint=fp, nonce=NONCE)
    assert (status, cache) == (200, "converge-notary; fwd=miss")
    ok = verify_answer(raw, bundle_keys(notary), host="site.test",
                                port=tls_target.port, nonce=NONCE, now=int(notary.clock[0]))
    assert ok.verdict == "match"
    assert ok.statement["address"] == "127.0.0.1"
    assert ok.statement["observations"][0]["sha256"] == fp

    status, raw2, cache = await ask(notary, host="site.test", port=tls_target.port,
                                    fingerprint=fp.lower().replace(":", ""))
    assert (status, cache) == (200, "converge-notary; hit")
    assert len(tls_target.handshakes) == 1  # the hit did not probe
    hit = verify_answer(raw2, bundle_keys(notary), host="site.test",
                                 port=tls_target.port, now=int(notary.clock[0]))
    assert hit.statement["cache"] == "hit" and hit.statement["request"]["nonce"] is None
    # twin: the same answer presented for another target or nonce is rejected
    twins = (({"host": "other.test"}, "wrong-target"), ({"nonce": NONCE}, "nonce-mismatch"))
    for kw, kind in twins:
        args = {"host": "site.test", "port": tls_target.port, **kw}
        try:
            verify_answer(raw2, bundle_keys(notary), **args)  # type: ignore[arg-type]
        except AnswerRejected as exc:
            assert exc.kind == kind
        else:
            raise AssertionError(f"{kind} answer accepted")


async def test_mismatch_is_a_signed_409(notary: Notary, tls_target: Target) -> None:
    status, raw, _ = await ask(notary, host="site.test", port=tls_target.port,
                               fingerprint="00" * 32)
    assert status == 409
    ok = verify_answer(raw, bundle_keys(notary), host="site.test", port=tls_target.port)
    assert ok.verdict == "mismatch"
    assert ok.statement["observations"][0]["sha256"] == sha256(tls_target.der)


async def test_refused_and_unreachable_are_signed(notary: Notary, tls_target: Target) -> None:
    status, raw, cache = await ask(notary, host="private.test", port=443, fingerprint="00" * 32)
    assert status == 403 and cache.endswith("fwd=miss")
    ok = verify_answer(raw, bundle_keys(notary), host="private.test", port=443)
    assert ok.verdict == "refused" and "address policy" in ok.statement["detail"]
    # the signed refusal names neither the address the notary's resolver gave nor its kind
    assert ok.statement["address"] is None
    assert "10.1.2.3" not in raw.decode() and "private-use" not in raw.decode()

    status, raw, _ = await ask(notary, host="site.test", port=1, fingerprint="00" * 32)
    assert status == 503
    assert verify_answer(raw, bundle_keys(notary)).verdict == "unreachable"


async def test_hits_without_nonce_reuse_one_signature_per_window(
    notary: Notary, tls_target: Target
) -> None:
    fp = sha256(tls_target.der)
    await ask(notary, host="site.test", port=tls_target.port, fingerprint=fp)
    _, a, _ = await ask(notary, host="site.test", port=tls_target.port, fingerprint=fp)
    _, b, _ = await ask(notary, host="site.test", port=tls_target.port, fingerprint=fp)
    assert a == b  # reused within the window: no new signature
    notary.clock[0] += 1
    _, c, _ = await ask(notary, host="site.test", port=tls_target.port, fingerprint=fp)
    assert c != a and json.loads(c)["statement"]["answered_at"] == int(notary.clock[0])
    # with nonces every answer is fresh
    _, d, _ = await ask(notary, host="site.test", port=tls_target.port, fingerprint=fp,
                        nonce=NONCE)
    _, e, _ = await ask(notary, host="site.test", port=tls_target.port, fingerprint=fp,
                        nonce=NONCE + "x")
    assert json.loads(d)["statement"]["request"]["nonce"] == NONCE
    assert json.loads(e)["statement"]["request"]["nonce"] == NONCE + "x"


async def test_rotation_keeps_old_answers_valid_for_the_overlap(
    notary: Notary, tls_target: Target
) -> None:
    fp = sha256(tls_target.der)
    _, old_answer, _ = await ask(notary, host="site.test", port=tls_target.port, fingerprint=fp)
    now = int(notary.clock[0])
    keys.rotate_signing_key(notary.settings.signing_key_path, now=now)
    trusted = bundle_keys(notary)
    assert len(trusted) == 2
    assert verify_answer(old_answer, trusted).verdict == "match"
    later = keys.bundle_signing_keys(
        notary.settings.signing_key_path, now=now + keys.DEFAULT_OVERLAP + 1
    )
    assert [k["status"] for k in later] == ["current"]  # twin: the overlap ends


async def test_bad_requests_are_400_plain_text(notary: Notary) -> None:
    async with aiohttp.ClientSession() as s:
        for body in (b"{", b"[]", json.dumps({"host": "a.test", "port": 1}).encode()):
            async with s.post(notary.url + "/v2/answer", data=body, ssl=False) as r:
                assert r.status == 400
                assert r.content_type == "text/plain"


async def legacy_exchange(url: str, path: str, body: bytes) -> bytes:
    """Exactly what the 2011 add-on sends: HTTP/1.0, no Host, read until close."""
    host, port = url.removeprefix("https://").split(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    reader, writer = await asyncio.open_connection(host, int(port), ssl=ctx)
    writer.write(
        f"POST {path} HTTP/1.0\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data


async def test_legacy_clients_unaffected_on_the_same_notary(
    notary: Notary, tls_target: Target
) -> None:
    fp256 = sha256(tls_target.der)
    await ask(notary, host="site.test", port=tls_target.port, fingerprint=fp256)
    sha1 = colon_hex(hashlib.sha1(tls_target.der).digest())
    raw = await legacy_exchange(notary.url, f"/target/site.test+{tls_target.port}",
                                f"fingerprint={sha1}".encode())
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0]
    assert b"chunked" not in head.lower() and b"content-length" in head.lower()
    payload, sig = legacy.split_body(body)
    assert payload == legacy.reserialise_without_signature(body)
    cert = x509.load_pem_x509_certificate(notary.identity.cert_pem.encode())
    assert verify_legacy(cert.public_key(), payload, sig)  # type: ignore[arg-type]
    assert f'"fingerprint": "{sha1}"'.encode() in body
    assert not verify_legacy(cert.public_key(), payload.replace(b"1", b"2", 1), sig)  # type: ignore[arg-type]
