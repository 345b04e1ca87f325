"""The production server (``server.serve``) spoken to like the legacy add-on, bad input,
and the address policy end to end."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trustme
from notary_support import (
    Notary,
    TLSTarget,
    exchange,
    get_request,
    leaf_der,
    legacy_post_request,
    no_verify_client,
    parse_reply,
    sha1_fp,
    verifies_recipe_a,
    verifies_recipe_b,
)

MakeTarget = Callable[..., Awaitable[TLSTarget]]
MakeNotary = Callable[..., Awaitable[Notary]]


async def test_legacy_addon_request_gets_a_plain_closed_response(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    notary = await make_notary(served=True)
    fp = sha1_fp(leaf_der(site_cert))
    # exactly the add-on's bytes: HTTP/1.0, no Host, colons unescaped, Connection: close
    r = await notary.send(
        legacy_post_request(f"/target/site.test+{target.port}", f"fingerprint={fp}".encode())
    )
    # the reply was read to EOF: the server closed the connection after answering
    assert r.status == 200
    assert r.header("Transfer-Encoding") is None
    assert r.header("Content-Length") == str(len(r.body))
    doc = json.loads(r.body)  # everything after the first blank line is the JSON body
    assert [e["fingerprint"] for e in doc["fingerprintList"]] == [fp]
    # the add-on pins the notary's certificate by SHA-1
    assert r.peer_cert is not None
    assert sha1_fp(r.peer_cert) == notary.identity.pin_sha1
    key = notary.identity.cert.public_key()
    assert verifies_recipe_a(r.body, key) and verifies_recipe_b(r.body, key)  # type: ignore[arg-type]


async def test_legacy_client_lower_case_fingerprint_answered_canonically(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    notary = await make_notary(served=True)
    fp = sha1_fp(leaf_der(site_cert))
    r = await notary.post(f"site.test+{target.port}", fp.lower())
    assert r.status == 200
    assert r.fingerprints() == [fp]
    flipped = ("1" if fp[0] == "0" else "0") + fp[1:]
    wrong = await notary.post(f"site.test+{target.port}", flipped.lower())
    assert wrong.status == 409


async def test_info_page_json_and_html(make_notary: MakeNotary) -> None:
    notary = await make_notary(served=True)
    r = await notary.send(get_request("/", {"Accept": "application/json"}))
    assert r.status == 200
    info = r.json()
    assert info["pin_sha1"] == notary.identity.pin_sha1 == sha1_fp(r.peer_cert or b"")
    assert info["pin_sha256"] == notary.identity.pin_sha256
    assert info["policy"]["allowed_target_ranges"] == ["127.0.0.0/8", "::1/128"]
    html = await notary.send(get_request("/"))
    assert html.status == 200
    assert (html.header("Content-Type") or "").startswith("text/html")
    assert notary.identity.pin_sha1.encode() in html.body


BAD_PATHS = [
    ("/target/site.test443", "You must specify a destination port."),
    ("/target/site.test", "You must specify a destination port."),
    ("/target/a+b+443", "more than one '+'"),
    ("/target/site.test+0", "1 to 65535"),
    ("/target/site.test+65536", "1 to 65535"),
    ("/target/site.test+abc", "1 to 65535"),
    ("/target/+443", "You must specify a target."),
    ("/target/site.test+%20443", "1 to 65535"),
    ("/target/", "You must specify a target."),
    ("/target", "You must specify a target."),
    ("/target/" + "a" * 64 + ".test+443", "label"),
    ("/target/" + ("a" * 60 + ".") * 5 + "test+443", "253"),
    ("/target/b%C3%BCcher.test+443", "characters"),
    ("/target/ex%00ample.test+443", "characters"),
    ("/target/..%2F..%2Fetc%2Fpasswd+443", ""),
    ("/target/site.test+443/not-an-ip", "IP address"),
    ("/target/site.test+443/127.0.0.1/extra", "too many segments"),
    ("/target/[::1+443", "characters"),
    ("/target/" + "x" * 700 + "+443", "too long"),
]


@pytest.mark.parametrize(("path", "message"), BAD_PATHS)
async def test_bad_paths_get_400_with_a_reason(
    make_notary: MakeNotary, path: str, message: str
) -> None:
    notary = await make_notary(served=True)
    r = await notary.send(legacy_post_request(path, b"fingerprint=" + b"00" * 20))
    assert r.status == 400, (r.status, r.body)
    assert message.encode() in r.body
    assert r.cache_status == "converge-notary; fwd=bypass"


BAD_BODIES = [
    (b"", b"You must specify a fingerprint."),
    (b"other=1", b"You must specify a fingerprint."),
    (b"fingerprint=", b"You must specify a fingerprint."),
    (b"fingerprint=zz", b"hexadecimal"),
    (b"fingerprint=" + b"00" * 19, b"19 bytes"),
    (b"fingerprint=" + b"00" * 21, b"21 bytes"),
    (b"fingerprint=0:00" + b":00" * 18, b"byte pairs"),
    (b"fingerprint=1&fingerprint=2", b"more than one"),
    (b"fingerprint=" + "é".encode(), b"ASCII"),
]


@pytest.mark.parametrize(("body", "message"), BAD_BODIES)
async def test_bad_fingerprints_get_400(
    make_notary: MakeNotary, body: bytes, message: bytes
) -> None:
    notary = await make_notary(served=True)
    r = await notary.send(legacy_post_request("/target/site.test+443", body))
    assert r.status == 400
    assert message in r.body


async def test_hostile_input_then_the_server_still_answers(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    notary = await make_notary(served=True, max_body=4096)
    fp = sha1_fp(leaf_der(site_cert))
    good_body = f"fingerprint={fp}".encode()
    spec = f"/target/site.test+{target.port}"

    # body at the limit is read (and is a valid form), one past it is 413
    at_limit = good_body + b"&pad=" + b"x" * (4096 - len(good_body) - 5)
    assert len(at_limit) == 4096
    r = await notary.send(legacy_post_request(spec, at_limit))
    assert r.status == 200
    over = at_limit + b"x"
    r = await notary.send(legacy_post_request(spec, over))
    assert r.status == 413
    big = await notary.send(legacy_post_request(spec, b"fingerprint=" + b"0" * 100_000))
    assert big.status == 413

    # request line and header fields beyond the server's limits
    long_line = f"POST /target/{'a' * 9000}+443 HTTP/1.0\r\nContent-Length: 0\r\n\r\n".encode()
    r = await notary.send(long_line)
    assert r.status in (400, 414), r.status
    long_header = (
        f"POST {spec} HTTP/1.0\r\nX-Junk: {'j' * 9000}\r\nContent-Length: 0\r\n\r\n"
    ).encode()
    r = await notary.send(long_header)
    assert r.status in (400, 431), r.status
    many = "".join(f"X-H{i}: v\r\n" for i in range(200))
    r = await notary.send(f"POST {spec} HTTP/1.0\r\n{many}Content-Length: 0\r\n\r\n".encode())
    assert r.status in (400, 431), r.status

    # unknown methods: 405 with Allow
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"):
        r = await notary.send(f"{method} {spec} HTTP/1.0\r\nContent-Length: 0\r\n\r\n".encode())
        assert r.status == 405, (method, r.status)
        assert "POST" in (r.header("Allow") or "")

    # a method the HTTP parser does not know at all is a bad request line
    r = await notary.send(f"BREW {spec} HTTP/1.0\r\nContent-Length: 0\r\n\r\n".encode())
    assert r.status in (400, 405)

    # garbage on the wire
    for junk in (b"\x16\x03\x01\x00\x00\r\n\r\n", b"GET\r\n\r\n", b"\x00" * 64 + b"\r\n\r\n"):
        raw, _ = await exchange(notary.port, junk)
        assert raw == b"" or raw.startswith(b"HTTP/1.")

    # and the server still answers a good request, correctly
    r = await notary.send(legacy_post_request(spec, good_body))
    assert r.status == 200 and r.fingerprints() == [fp]
    assert target.hellos == 1  # none of the bad requests reached the target


# -- address policy end to end --------------------------------------------------------------


async def test_loopback_target_refused_by_default(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    fp = sha1_fp(leaf_der(site_cert))
    strict = await make_notary(served=True, allow_target=[])
    for spec in (
        f"site.test+{target.port}",
        f"127.0.0.1+{target.port}",
        f"anything.test+{target.port}/127.0.0.1",
        f"[::ffff:127.0.0.1]+{target.port}",
        f"anything.test+{target.port}/::ffff:127.0.0.1",
    ):
        r = await strict.post(spec, fp)
        assert r.status == 403, spec
        assert b"refused by the notary's address policy" in r.body
        # the range is named only for an address the client named itself
        assert (b"loopback" in r.body) is (not spec.startswith("site.test")), (spec, r.body)
        assert r.cache_status == "converge-notary; fwd=miss; detail=refused"
    # the system resolver's answer is judged too, and the unspecified address is no way round
    for spec, why in (
        (f"localhost+{target.port}", b"does not resolve to an address this notary may probe"),
        (f"0.0.0.0+{target.port}", b"unspecified"),
        (f"[::]+{target.port}", b"unspecified"),
    ):
        r = await strict.post(spec, fp)
        assert r.status == 403 and why in r.body, (spec, r.status, r.body)
    assert target.accepted == 0
    # twin: allowed by --allow-target
    allowing = await make_notary(served=True, allow_target=["127.0.0.0/8"])
    assert (await allowing.post(f"site.test+{target.port}", fp)).status == 200
    # the IPv4-mapped form of an allowed IPv4 address is allowed too, and reaches the target
    mapped = await allowing.post(f"mapped.test+{target.port}/::ffff:127.0.0.1", fp)
    assert mapped.status == 200
    assert target.accepted == 2


async def test_name_resolving_to_private_address_refused(
    make_notary: MakeNotary, tmp_path: Path
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("# test map\n192.168.7.7 lan.test\nfd00::7 ula.test\n")
    notary = await make_notary(
        served=True,
        resolve=["private.test=10.0.0.1", "shared.test=100.64.0.9", "ll.test=169.254.0.1"],
        hosts_file=hosts,
    )
    for name, addr in (
        ("private.test", b"10.0.0.1"),
        ("shared.test", b"100.64.0.9"),
        ("ll.test", b"169.254.0.1"),
        ("lan.test", b"192.168.7.7"),
        ("ula.test", b"fd00::7"),
    ):
        r = await notary.post(f"{name}+443", "00" * 20)
        assert r.status == 403, name
        # the refusal names the policy, never what the operator's resolver answered
        reason = r.body.split(b": ", 1)[1]
        assert b"address policy" in reason and addr not in reason, (name, r.body)
        for word in (b"private", b"shared", b"link-local", b"unique-local"):
            assert word not in reason, (name, r.body)
    # twin: an address the client named itself is named back, with its range
    r = await notary.post("anything.test+443/10.1.1.1", "00" * 20)
    assert r.status == 403 and b"10.1.1.1" in r.body and b"private-use" in r.body


async def test_refused_address_skipped_when_an_allowed_one_exists(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    notary = await make_notary(
        served=True, resolve=["mixed.test=10.0.0.1", "mixed.test=127.0.0.1"]
    )
    r = await notary.post(f"mixed.test+{target.port}", sha1_fp(leaf_der(site_cert)))
    assert r.status == 200
    assert target.accepted == 1


def test_fingerprint_helpers_agree_with_hashlib(site_cert: trustme.LeafCert) -> None:
    der = leaf_der(site_cert)
    assert sha1_fp(der).replace(":", "").lower() == hashlib.sha1(der).hexdigest()


# -- bounded waits for slow clients ----------------------------------------------------------


async def test_slow_body_gets_408(make_notary: MakeNotary) -> None:
    notary = await make_notary(served=True, body_timeout=0.5)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", notary.port, ssl=no_verify_client()
    )
    try:
        writer.write(
            b"POST /target/site.test+443 HTTP/1.0\r\nContent-Length: 71\r\n\r\nfinger"
        )
        await writer.drain()
        started = time.monotonic()
        # aiohttp then lingers (bounded) to drain the unread body, so read only the head
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        elapsed = time.monotonic() - started
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    r = parse_reply(raw)
    assert r.status == 408
    assert elapsed < 8
    # twin: the same body sent whole is parsed (and refused for what it says, not for time)
    whole = await notary.send(legacy_post_request("/target/site.test+443", b"fingerprint=zz"))
    assert whole.status == 400


async def test_client_that_never_starts_tls_is_dropped(make_notary: MakeNotary) -> None:
    notary = await make_notary(served=True, tls_handshake_timeout=0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", notary.port)  # plain TCP
    try:
        started = time.monotonic()
        data = await asyncio.wait_for(reader.read(), 10)
        assert data == b""  # closed without a word
        assert time.monotonic() - started < 8
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
