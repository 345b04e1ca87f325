"""The replayer's HTTP/1.1 client against real loopback servers (plain and trustme TLS)."""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trustme
from replay_support import free_port

from replay.httpclient import MAX_BODY_BYTES, HTTPClient, HTTPClientError


class Scripted(asyncio.Protocol):
    """Answers each request (headers + Content-Length body) with ``reply(n)`` bytes."""

    def __init__(self, reply: Callable[[int], bytes], stats: dict[str, int]) -> None:
        self.reply = reply
        self.stats = stats
        self.buf = bytearray()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.stats["connections"] += 1

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in bytes(self.buf[:end]).split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.lower() == b"content-length":
                    length = int(v)
            if len(self.buf) < end + 4 + length:
                return
            del self.buf[:end + 4 + length]
            self.stats["requests"] += 1
            out = self.reply(self.stats["requests"])
            if out:
                self.transport.write(out)
            else:
                self.transport.close()


def ok(body: bytes = b"{}", extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nCache-Status: converge-notary; hit\r\n" + extra
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


@pytest.fixture()
def mk() -> Any:
    """Make clients that are closed (idle connections too) when the test ends."""
    made: list[HTTPClient] = []

    def make(**kw: Any) -> HTTPClient:
        c = HTTPClient(**kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture()
async def serve() -> AsyncIterator[Callable[..., Any]]:
    servers: list[asyncio.base_events.Server] = []

    async def start(reply: Callable[[int], bytes], tls: ssl.SSLContext | None = None,
                    ) -> tuple[int, dict[str, int]]:
        stats = {"connections": 0, "requests": 0}
        port = free_port()
        loop = asyncio.get_running_loop()
        servers.append(await loop.create_server(lambda: Scripted(reply, stats), "127.0.0.1",
                                                port, ssl=tls))
        return port, stats

    yield start
    for s in servers:
        s.close()
        await s.wait_closed()


async def test_keep_alive_reuses_one_connection_and_counts_bytes(serve: Any, mk: Any) -> None:
    port, stats = await serve(lambda n: ok(b'{"n": %d}' % n))
    client = mk()
    base = f"http://127.0.0.1:{port}"
    for i in range(1, 6):
        resp = await client.request(base, "POST", "/target/a.test+443", b"fingerprint=AA")
        assert resp.status == 200 and resp.body == b'{"n": %d}' % i
        assert resp.headers["cache-status"] == "converge-notary; hit"
        assert resp.bytes_received == len(ok(b'{"n": %d}' % i))
        assert resp.bytes_sent > len(b"fingerprint=AA")
    assert stats == {"connections": 1, "requests": 5}


async def test_chunked_body(serve: Any, mk: Any) -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"4\r\nconv\r\n5\r\nerge!\r\n0\r\n\r\n")
    port, _ = await serve(lambda n: chunked)
    resp = await mk().request(f"http://127.0.0.1:{port}", "GET", "/target/a+443")
    assert resp.body == b"converge!"


async def test_body_at_the_limit_and_one_past(serve: Any, mk: Any) -> None:
    port, _ = await serve(lambda n: ok(b"x" * (MAX_BODY_BYTES + (n - 1))))
    client = mk()
    base = f"http://127.0.0.1:{port}"
    resp = await client.request(base, "GET", "/target/a+443")
    assert len(resp.body) == MAX_BODY_BYTES
    with pytest.raises(HTTPClientError) as info:
        await client.request(base, "GET", "/target/a+443")
    assert info.value.kind == "too-large"


async def test_stale_keep_alive_connection_is_retried_once(serve: Any, mk: Any) -> None:
    # the server answers request 1, drops the connection on request 2 without answering,
    # and answers request 3 (on a new connection): the client retries transparently
    port, stats = await serve(lambda n: b"" if n == 2 else ok())
    client = mk()
    base = f"http://127.0.0.1:{port}"
    assert (await client.request(base, "GET", "/target/a+443")).status == 200
    assert (await client.request(base, "GET", "/target/a+443")).status == 200
    assert stats["connections"] == 2 and stats["requests"] == 3


async def test_fresh_connection_dropped_is_a_reset(serve: Any, mk: Any) -> None:
    port, _ = await serve(lambda n: b"")
    with pytest.raises(HTTPClientError) as info:
        await mk().request(f"http://127.0.0.1:{port}", "GET", "/target/a+443")
    assert info.value.kind == "reset"


async def test_refused_connection_is_a_connect_error(mk: Any) -> None:
    with pytest.raises(HTTPClientError) as info:
        await mk().request(f"http://127.0.0.1:{free_port()}", "GET", "/")
    assert info.value.kind == "connect"


async def test_garbage_response_is_a_protocol_error(serve: Any, mk: Any) -> None:
    port, _ = await serve(lambda n: b"SMTP ready\r\n\r\n")
    with pytest.raises(HTTPClientError) as info:
        await mk().request(f"http://127.0.0.1:{port}", "GET", "/")
    assert info.value.kind == "protocol"


async def test_pool_limit_queues_requests(serve: Any, mk: Any) -> None:
    port, stats = await serve(lambda n: ok())
    client = mk(limit_per_origin=2)
    base = f"http://127.0.0.1:{port}"
    results = await asyncio.gather(*(client.request(base, "GET", "/") for _ in range(10)))
    assert all(r.status == 200 for r in results)
    assert stats["connections"] <= 2 and stats["requests"] == 10


@pytest.fixture()
def ca() -> trustme.CA:
    return trustme.CA()


async def test_tls_pin_accepts_the_pinned_certificate_and_refuses_another(
        serve: Any, ca: trustme.CA, mk: Any) -> None:
    cert = ca.issue_cert("127.0.0.1")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    port, _ = await serve(lambda n: ok(), tls=server_ctx)
    der = ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    base = f"https://127.0.0.1:{port}"
    good = mk(tls=unverified, pin_sha256=hashlib.sha256(der).digest())
    assert (await good.request(base, "GET", "/")).status == 200
    other = trustme.CA().issue_cert("127.0.0.1")
    other_der = ssl.PEM_cert_to_DER_cert(other.cert_chain_pems[0].bytes().decode())
    bad = mk(tls=unverified, pin_sha256=hashlib.sha256(other_der).digest())
    with pytest.raises(HTTPClientError) as info:
        await bad.request(base, "GET", "/")
    assert info.value.kind == "tls"


async def test_tls_verified_by_ca_and_refused_without_it(serve: Any, ca: trustme.CA,
                                                         mk: Any) -> None:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    port, _ = await serve(lambda n: ok(), tls=server_ctx)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    base = f"https://127.0.0.1:{port}"
    assert (await mk(tls=trusting).request(base, "GET", "/")).status == 200
    with pytest.raises(HTTPClientError) as info:
        await mk().request(base, "GET", "/")  # system store: unknown CA
    assert info.value.kind == "tls"


async def _started(client: HTTPClient, base: str, path: str = "/t") -> tuple[Any, ...]:
    """One request on the callback path; its (response, error, stale) once done (the context
    given to ``start`` comes back with them)."""
    got: asyncio.Future[tuple[Any, ...]] = asyncio.get_running_loop().create_future()
    context = object()
    ex = client.start(base, "GET", path, b"", lambda *a: got.set_result(a), context)
    assert ex is not None
    *answer, back = await asyncio.wait_for(got, 5)
    assert back is context
    return tuple(answer)


async def test_callback_path_needs_an_idle_connection_and_parses_answers(
        serve: Any, mk: Any) -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    port, stats = await serve(lambda n: chunked if n == 3 else ok(b'{"n": %d}' % n))
    base = f"http://127.0.0.1:{port}"
    c = mk()
    assert c.start(base, "GET", "/t", b"", lambda *a: None) is None  # nothing idle yet
    await c.request(base, "GET", "/t")
    resp, err, stale = await _started(c, base)
    assert err is None and not stale
    assert resp.status == 200 and resp.body == b'{"n": 2}'
    assert resp.headers["cache-status"] == "converge-notary; hit"
    assert resp.bytes_received == len(ok(b'{"n": 2}')) and resp.bytes_sent > 0
    resp, err, _ = await _started(c, base)  # chunked: finished by the coroutine reader
    assert err is None and resp.body == b"abcde" and resp.bytes_received == len(chunked)
    resp, err, _ = await _started(c, base)
    assert err is None and resp.body == b'{"n": 4}'
    assert stats == {"connections": 1, "requests": 4}



async def test_callback_path_remembers_heads_read_only_and_bounded(serve: Any, mk: Any) -> None:
    """Answers with the same head share one parsed, read-only header map; a different head
    (another Cache-Status) is parsed on its own; a long head is never kept; the table stays
    bounded whatever heads a server invents."""
    from replay import httpclient

    def reply(n: int) -> bytes:
        if n in (2, 3):
            return ok(b"{}")
        if n == 4:
            return ok(b"{}").replace(b"; hit", b"; fwd=miss")
        if n == 5:
            return ok(b"{}", b"X-Pad: " + b"a" * httpclient.HEAD_CACHE_BYTES + b"\r\n")
        return ok(b"{}", b"X-N: %d\r\n" % n)

    port, _ = await serve(reply)
    base = f"http://127.0.0.1:{port}"
    c = mk()
    httpclient._HEADS.clear()
    await c.request(base, "GET", "/t")
    a, _, _ = await _started(c, base)
    b, _, _ = await _started(c, base)
    assert a.headers is b.headers and b.headers["cache-status"] == "converge-notary; hit"
    with pytest.raises(TypeError):
        a.headers["cache-status"] = "changed"  # type: ignore[index]
    d, _, _ = await _started(c, base)
    assert d.headers["cache-status"] == "converge-notary; fwd=miss"  # twin: another head
    assert a.headers["cache-status"] == "converge-notary; hit"
    kept = len(httpclient._HEADS)
    e, _, _ = await _started(c, base)
    assert e.headers["x-pad"] == "a" * httpclient.HEAD_CACHE_BYTES
    assert len(httpclient._HEADS) == kept  # the long head was parsed, not kept
    for _ in range(httpclient.HEAD_CACHE + 10):
        await _started(c, base)
    assert 0 < len(httpclient._HEADS) <= httpclient.HEAD_CACHE


async def test_callback_path_reports_a_dropped_kept_alive_connection_as_stale(
        serve: Any, mk: Any) -> None:
    port, stats = await serve(lambda n: ok() if n == 1 else b"")  # closes after the first
    base = f"http://127.0.0.1:{port}"
    c = mk()
    await c.request(base, "GET", "/t")
    resp, err, stale = await _started(c, base)
    assert resp is None and err.kind == "reset" and stale


async def test_callback_path_garbage_is_a_protocol_error(serve: Any, mk: Any) -> None:
    port, _ = await serve(lambda n: ok() if n == 1 else b"NOT HTTP\r\n\r\n")
    base = f"http://127.0.0.1:{port}"
    c = mk()
    await c.request(base, "GET", "/t")
    resp, err, stale = await _started(c, base)
    assert resp is None and err.kind == "protocol" and not stale


@pytest.mark.parametrize("length", [b"\xb2", b"-1", b"+2", b"1_0", b"0x2", b""])
async def test_bad_content_length_is_a_protocol_error_on_both_paths(
        serve: Any, mk: Any, length: bytes) -> None:
    """A Content-Length that is not ASCII digits (a latin-1 superscript two, which
    ``str.isdigit`` takes and ``int`` refuses; a sign; underscores; hex; empty) is a typed
    protocol error on the coroutine path and the callback path alike."""
    bad = b"HTTP/1.1 200 OK\r\nContent-Length: " + length + b"\r\n\r\n{}"
    port, _ = await serve(lambda n: ok() if n == 1 else bad)
    base = f"http://127.0.0.1:{port}"
    c = mk()
    await c.request(base, "GET", "/t")
    resp, err, stale = await _started(c, base)
    assert resp is None and err.kind == "protocol" and not stale
    with pytest.raises(HTTPClientError) as info:
        await asyncio.wait_for(c.request(base, "GET", "/t"), 5)
    assert info.value.kind == "protocol"


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 200 OK\r\nCache-Status: a\rb\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nCache-Status: a\nb\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nX-Nul: \x00\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 +200 OK\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}",
])
async def test_control_characters_and_odd_statuses_are_protocol_errors(
        serve: Any, mk: Any, head: bytes) -> None:
    """A lone CR or LF, or a NUL, in a header value (RFC 9110 allows none; a lone CR would
    reach the results file and end its row early), and a status that is not three digits,
    are protocol errors on both paths. The twin: a tab in a value is allowed."""
    port, _ = await serve(lambda n: ok() if n == 1 else head)
    base = f"http://127.0.0.1:{port}"
    c = mk()
    await c.request(base, "GET", "/t")
    resp, err, _ = await _started(c, base)
    assert resp is None and err.kind == "protocol"
    with pytest.raises(HTTPClientError) as info:
        await asyncio.wait_for(c.request(base, "GET", "/t"), 5)
    assert info.value.kind == "protocol"
    tab = b"HTTP/1.1 200 OK\r\nCache-Status: a\tb\r\nContent-Length: 2\r\n\r\n{}"
    port, _ = await serve(lambda n: tab)
    resp = await mk().request(f"http://127.0.0.1:{port}", "GET", "/t")
    assert resp.headers["cache-status"] == "a\tb"


async def test_plain_content_length_keeps_the_connection(serve: Any, mk: Any) -> None:
    """The twin: digits are read on the callback path and the connection stays in the pool
    (one connection for three answers), unless the answer says ``Connection: close``."""
    port, stats = await serve(lambda n: ok(b"{}", b"Connection: close\r\n") if n == 3
                              else ok(b"12"))
    base = f"http://127.0.0.1:{port}"
    c = mk()
    await c.request(base, "GET", "/t")
    resp, err, _ = await _started(c, base)
    assert err is None and resp.body == b"12"
    resp, err, _ = await _started(c, base)
    assert err is None and resp.headers["connection"] == "close"
    await c.request(base, "GET", "/t")
    assert stats == {"connections": 2, "requests": 4}


async def test_warm_opens_idle_connections_that_requests_then_use(serve: Any, mk: Any) -> None:
    """``warm`` opens connections before any request (within the pool's limit) and the
    callback path, which needs an idle connection, can send at once; the twin: a cold
    client has none."""
    port, stats = await serve(lambda n: ok())
    base = f"http://127.0.0.1:{port}"
    cold = mk()
    assert cold.start(base, "GET", "/t", b"", lambda *a: None) is None
    assert stats["connections"] == 0
    warm = mk(limit_per_origin=3)
    assert await warm.warm([base], 8) == 3  # at most the limit
    await asyncio.sleep(0.05)  # let the server's accepts run
    assert stats["connections"] == 3 and stats["requests"] == 0
    assert await warm.warm([base], 8) == 0  # the pool is full
    results = await asyncio.gather(*(_started(warm, base) for _ in range(3)))
    assert all(err is None and resp.status == 200 for resp, err, _ in results)
    assert stats == {"connections": 3, "requests": 3}


async def test_warm_leaves_failures_to_the_requests(mk: Any) -> None:
    """A notary that refuses connections: ``warm`` opens none and raises nothing; the
    request after it gets the connect error it always got, and the pool's count is right."""
    base = f"http://127.0.0.1:{free_port()}"
    client = mk(limit_per_origin=2)
    assert await client.warm([base], 4) == 0
    assert client.origin(base).open == 0 and not client.origin(base).idle
    with pytest.raises(HTTPClientError) as info:
        await client.request(base, "GET", "/")
    assert info.value.kind == "connect"
