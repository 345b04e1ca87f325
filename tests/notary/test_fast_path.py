"""The answer requests dispatched before aiohttp's router (``web.install_fast_path``, what
``server.serve`` runs) answer exactly as the routed handlers do, and really skip the router."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from loopback import free_port
from notary_support import (
    FakeClock,
    Notary,
    TLSTarget,
    exchange,
    get_request,
    leaf_der,
    legacy_post_request,
    parse_reply,
    sha1_fp,
)

from notary import web as notary_web
from notary.config import Settings
from notary.keys import Identity
from notary.service import Answer, CacheOutcome
from notary.web import create_app, install_fast_path

MakeTarget = Callable[..., Awaitable[TLSTarget]]


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    """A plain-HTTP test notary on an ephemeral loopback port (site.test is 127.0.0.1)."""
    settings = Settings(data_dir=data_dir, listen=["127.0.0.1:0"], allow_target=["127.0.0.0/8"],
                        resolve=["site.test=127.0.0.1"], probe_timeout=2.0, **overrides)
    settings.check()
    return settings
Pair = Callable[..., Awaitable[tuple[Notary, Notary]]]


@pytest.fixture
async def pair(tmp_path: Path, identity: Identity) -> AsyncIterator[Pair]:
    """Two notaries alike in everything (key, signing key, clock, settings) but the dispatch:
    the first with the fast path, the second through the router only."""
    runners: list[web.AppRunner] = []

    async def factory(**overrides: Any) -> tuple[Notary, Notary]:
        clock = FakeClock()
        signing = Ed25519PrivateKey.generate()
        out = []
        for fast in (True, False):
            settings = make_settings(tmp_path / f"n{len(runners)}", tls=False, **overrides)
            settings.data_dir.mkdir(parents=True)
            app = create_app(settings, identity, clock=clock, signing_key=signing)
            runner = web.AppRunner(app, handle_signals=False, access_log=None)
            await runner.setup()
            runners.append(runner)
            if fast:
                assert runner.server is not None
                install_fast_path(app, runner.server)
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            out.append(Notary(runner.addresses[0][1], identity, settings, app=app))
        return out[0], out[1]

    yield factory
    for runner in runners:
        await runner.cleanup()


def _head_and_body(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    r = parse_reply(raw)
    headers = {k: v for k, v in r.headers.items() if k != "date"}
    return r.status, headers, r.body


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: n\r\nConnection: close\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body


async def _same(fast: Notary, routed: Notary, request: bytes) -> tuple[int, dict[str, str],
                                                                       bytes]:
    a = _head_and_body((await exchange(fast.port, request, tls=False))[0])
    b = _head_and_body((await exchange(routed.port, request, tls=False))[0])
    assert a == b, request[:120]
    return a


async def test_fast_path_answers_exactly_as_the_router(
    pair: Pair, make_target: MakeTarget, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    fast, routed = await pair(max_body=512)
    fp = sha1_fp(leaf_der(site_cert))
    spec = f"site.test+{target.port}"
    form = f"fingerprint={fp}".encode()
    probe = await _same(fast, routed, legacy_post_request(f"/target/{spec}", form))
    assert probe[0] == 200 and probe[1]["cache-status"] == "converge-notary; fwd=miss"
    statuses = []
    for request in (
        legacy_post_request(f"/target/{spec}", form),  # the cached answer, the add-on's bytes
        _post(f"/target/{spec}", form),  # HTTP/1.1
        _post(f"/target/{spec}?x=1", form),  # a query string is not part of the target
        _post(f"/target/SITE.test%2E+{target.port}", form),  # decoded once, normalised
        get_request(f"/target/{spec}"),
        legacy_post_request(f"/target/{spec}", b"fingerprint=00"),  # bad fingerprint
        legacy_post_request(f"/target/{spec}", b"nothing=here"),  # no fingerprint
        legacy_post_request("/target/", form),  # no target
        legacy_post_request("/target/bad..name+443", form),
        legacy_post_request("/target/site.test+0", form),
        legacy_post_request("/target/10.0.0.1+443", form),  # refused by the address policy
        legacy_post_request(f"/target/{spec}", b"fingerprint=" + b"A" * 600),  # 413
        f"PUT /target/{spec} HTTP/1.0\r\nContent-Length: 0\r\n\r\n".encode(),  # 405
        get_request("/target"),  # not a /target/ path: routed in both
        get_request("/nowhere"),
    ):
        statuses.append((await _same(fast, routed, request))[0])
    assert statuses == [200, 200, 200, 200, 200, 400, 400, 400, 400, 400, 403, 413, 405, 400,
                        404]


async def test_fast_path_extended_answers_exactly_as_the_router(
    pair: Pair, make_target: MakeTarget, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    fast, routed = await pair()
    doc = {"host": "site.test", "port": target.port,
           "fingerprint": sha1_fp(leaf_der(site_cert))}
    body = json.dumps(doc).encode()
    first = await _same(fast, routed, _post("/v2/answer", body))
    assert first[0] == 200
    hit = await _same(fast, routed, _post("/v2/answer", body))
    assert hit[1]["cache-status"] == "converge-notary; hit"
    assert json.loads(hit[2])["statement"]["verdict"] == "match"
    assert (await _same(fast, routed, _post("/v2/answer", b"[1]")))[0] == 400
    # only POST is an answer request: a GET is the router's 405 in both
    assert (await _same(fast, routed, get_request("/v2/answer")))[0] == 405


_DATE = re.compile(rb"\r\nDate: [^\r\n]*\r\n")


async def test_fast_path_writes_the_routers_bytes(
    pair: Pair, make_target: MakeTarget, site_cert: trustme.LeafCert,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The prebuilt answers (``_WireAnswer``) are, byte for byte, what aiohttp writes for the
    routed ``Response``: status line, header order, ``Connection`` by version and keep-alive,
    several answers on one connection. Only the ``Date`` value may differ (a second apart)."""
    written: list[int] = []
    real_prepare = notary_web._WireAnswer.prepare

    async def counting(self: Any, request: web.BaseRequest) -> Any:
        written.append(self.status)
        return await real_prepare(self, request)

    monkeypatch.setattr(notary_web._WireAnswer, "prepare", counting)
    target = await make_target(site_cert)
    fast, routed = await pair()
    fp = sha1_fp(leaf_der(site_cert))
    spec = f"site.test+{target.port}"
    form = f"fingerprint={fp}".encode()
    other = f"fingerprint={'AB:' * 19}AB".encode()  # well formed, not the site's: 409
    ext = json.dumps({"host": "site.test", "port": target.port, "fingerprint": fp}).encode()
    refused = json.dumps({"host": "10.0.0.1", "port": 443, "fingerprint": fp}).encode()
    dead = json.dumps({"host": "127.0.0.1", "port": free_port(), "fingerprint": fp}).encode()

    def post(path: str, body: bytes, version: str = "1.1", connection: str = "") -> bytes:
        head = f"POST {path} HTTP/{version}\r\nHost: n\r\n"
        if connection:
            head += f"Connection: {connection}\r\n"
        return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    answers = f"/target/{spec}"
    conversations = [
        legacy_post_request(answers, form),  # a miss, then the add-on's cached hit
        legacy_post_request(answers, form),
        legacy_post_request(answers, other),  # 409
        get_request(answers),
        # kept connections: HTTP/1.0 asks for keep-alive, HTTP/1.1 has it by default
        post(answers, form, "1.0", "keep-alive") + post(answers, other, "1.0", "keep-alive")
        + post(answers, form, "1.0"),
        post(answers, form) + post(answers, other) + post(answers, form, connection="close"),
        post("/v2/answer", ext) + post("/v2/answer", ext, connection="close"),
        post("/v2/answer", refused, connection="close"),  # a signed 403
        post("/v2/answer", dead, connection="close"),  # a signed 503
        # an upgrade the notary does not take (answered as any request)
        post(answers, form, connection="Upgrade, close\r\nUpgrade: h2c"),
    ]
    for request in conversations:
        a = (await exchange(fast.port, request, tls=False))[0]
        b = (await exchange(routed.port, request, tls=False))[0]
        assert a.startswith(b"HTTP/1."), a[:100]
        assert _DATE.sub(b"\r\nDate: -\r\n", a) == _DATE.sub(b"\r\nDate: -\r\n", b), request
    # every answer above went out prebuilt (none fell back to a Response)
    assert sorted(set(written)) == [200, 403, 409, 503]
    assert len(written) == 15
    # HTTP versions other than 1.0 and 1.1 never reach a handler: aiohttp's parser refuses them
    odd = post(answers, form, "1.2", "close")
    a = (await exchange(fast.port, odd, tls=False))[0]
    assert a.startswith(b"HTTP/1.0 400 Bad Request\r\n") and len(written) == 15


def test_an_answer_outside_the_table_is_a_response() -> None:
    """The twin of the above: what the prebuilt table does not cover (here a status no
    answer has) is answered by aiohttp's ``Response``; what it covers is not."""
    request = make_mocked_request("POST", "/target/site.test+443")
    odd = notary_web._wire_answer(request, Answer(418, b"{}", CacheOutcome.HIT))
    assert isinstance(odd, web.Response) and odd.status == 418
    usual = notary_web._wire_answer(request, Answer(200, b"{}", CacheOutcome.HIT))
    assert isinstance(usual, notary_web._WireAnswer) and usual.keep_alive
    assert usual.body_length == len(usual._data) and usual._data.endswith(b"\r\n\r\n{}")


async def test_fast_path_skips_the_router_and_the_plain_app_does_not(
    pair: Pair, make_target: MakeTarget, site_cert: trustme.LeafCert,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routed_calls: list[str] = []
    real = web.Application._handle

    async def counting(self: web.Application, request: web.Request) -> web.StreamResponse:
        routed_calls.append(request.path)
        return await real(self, request)

    # before the servers are built: each takes the app's handler when it is made
    monkeypatch.setattr(web.Application, "_handle", counting)
    target = await make_target(site_cert)
    fast, routed = await pair()
    spec = f"site.test+{target.port}"
    form = f"fingerprint={sha1_fp(leaf_der(site_cert))}".encode()
    ok = parse_reply((await exchange(fast.port, legacy_post_request(f"/target/{spec}", form),
                                     tls=False))[0])
    assert ok.status == 200
    assert routed_calls == []  # answered without the router
    ok = parse_reply((await exchange(routed.port, legacy_post_request(f"/target/{spec}", form),
                                     tls=False))[0])
    assert ok.status == 200
    assert routed_calls == [f"/target/{spec}"]  # the twin: the routed app does route it


async def test_fast_path_keeps_the_rate_limit_and_the_body_deadline(
    pair: Pair, make_target: MakeTarget, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    fast, _ = await pair(rate_limit=0.001, rate_burst=2, body_timeout=0.5)
    spec = f"site.test+{target.port}"
    form = f"fingerprint={sha1_fp(leaf_der(site_cert))}".encode()
    got = [parse_reply((await exchange(fast.port, legacy_post_request(f"/target/{spec}", form),
                                       tls=False))[0]) for _ in range(3)]
    assert [r.status for r in got] == [200, 200, 429]
    assert got[2].header("Retry-After") is not None
    assert got[2].cache_status == "converge-notary; fwd=bypass; detail=rate-limited"

    fresh, _ = await pair(body_timeout=0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", fresh.port)
    try:
        # a body announced and never finished: 408 once the deadline passes
        writer.write(_post(f"/target/{spec}", form)[:-10])
        await writer.drain()
        raw = b""
        async with asyncio.timeout(10):
            while b"\r\n\r\n" not in raw:  # the answer comes; the connection may linger
                chunk = await reader.read(4096)
                assert chunk, raw
                raw += chunk
    finally:
        writer.close()
    assert parse_reply(raw).status == 408


async def test_fast_path_leaves_expect_to_the_route(pair: Pair) -> None:
    fast, _ = await pair(max_body=512)
    request = (b"POST /target/site.test+443 HTTP/1.1\r\nHost: n\r\nExpect: 100-continue\r\n"
               b"Content-Length: 100000\r\n\r\n")
    reply = parse_reply((await exchange(fast.port, request, tls=False, timeout=5))[0])
    assert reply.status == 413  # at once, without 100 Continue (the route's expect handler)


async def test_fast_path_refuses_an_app_with_middlewares(
    tmp_path: Path, identity: Identity
) -> None:
    settings = make_settings(tmp_path / "m", tls=False)
    app = create_app(settings, identity)

    @web.middleware
    async def mw(request: web.Request, handler: Any) -> web.StreamResponse:
        return await handler(request)  # type: ignore[no-any-return]

    app.middlewares.append(mw)
    server = web.Server(lambda request: None)  # type: ignore[arg-type, return-value]
    with pytest.raises(RuntimeError, match="middlewares"):
        install_fast_path(app, server)
