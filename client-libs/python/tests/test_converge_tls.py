"""The TLS hooks against a loopback HTTPS server: each stack accepts the genuine server when
the notaries confirm it, and refuses it (twin) when they see another certificate."""

from __future__ import annotations

import asyncio
import http.client
import socket
import ssl
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from converge import Client, NotTrusted
from converge.tls import (
    converge_ssl_context,
    fetch_certificate,
    prefetch,
    requests_session,
    urllib3_pool_manager,
    urlopen,
    verify_server,
)
from converge_fixtures import FakeNotary, TlsTarget, make_config


@pytest.fixture()
def trusting(tmp_path: Path, notaries: list[FakeNotary]) -> Client:
    """A client whose notaries see the genuine target certificate."""
    return Client(
        make_config(tmp_path / "t", [n.bundle(f"Org {i}") for i, n in enumerate(notaries)])
    )


@pytest.fixture()
def distrusting(tmp_path: Path, pki: dict[str, Any], target: TlsTarget) -> Iterator[Client]:
    """A client whose notaries all see a forged certificate for the target."""
    ns = [
        FakeNotary(
            pki["notaries"][i], pki["tmp"], seen={f"127.0.0.1:{target.port}": pki["forged"]}
        ).start()
        for i in range(3)
    ]
    yield Client(make_config(tmp_path / "d", [n.bundle(f"Org {i}") for i, n in enumerate(ns)]))
    for n in ns:
        n.stop()


def _raw_get(ctx: ssl.SSLContext, port: int) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s,
    ):
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
        return data


def test_ssl_socket(trusting: Client, target: TlsTarget) -> None:
    data = _raw_get(converge_ssl_context(trusting), target.port)
    assert data.endswith(b"hello")


def test_ssl_socket_refused(distrusting: Client, target: TlsTarget) -> None:
    with pytest.raises(NotTrusted) as exc:
        _raw_get(converge_ssl_context(distrusting), target.port)
    assert isinstance(exc.value, ssl.SSLCertVerificationError)
    assert exc.value.verdict is not None and not exc.value.verdict


def test_plain_context_without_converge_is_refused(target: TlsTarget) -> None:
    from converge.tls import ConvergeSSLContext

    ctx = ConvergeSSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with pytest.raises(NotTrusted):
        _raw_get(ctx, target.port)


def test_http_client(trusting: Client, distrusting: Client, target: TlsTarget) -> None:
    conn = http.client.HTTPSConnection(
        "127.0.0.1", target.port, timeout=5, context=converge_ssl_context(trusting)
    )
    conn.request("GET", "/")
    assert conn.getresponse().read() == b"hello"
    conn.close()
    conn = http.client.HTTPSConnection(
        "127.0.0.1", target.port, timeout=5, context=converge_ssl_context(distrusting)
    )
    with pytest.raises(NotTrusted):
        conn.request("GET", "/")
    conn.close()


def test_urllib(trusting: Client, distrusting: Client, target: TlsTarget) -> None:
    with urlopen(f"https://127.0.0.1:{target.port}/", config=trusting) as resp:
        assert resp.read() == b"hello"
    with pytest.raises(urllib.error.URLError) as exc:
        urlopen(f"https://127.0.0.1:{target.port}/", config=distrusting)
    assert isinstance(exc.value.reason, NotTrusted)


def test_requests(trusting: Client, distrusting: Client, target: TlsTarget) -> None:
    requests = pytest.importorskip("requests")
    with requests_session(trusting) as s:
        r = s.get(f"https://127.0.0.1:{target.port}/", timeout=5)
        assert r.text == "hello"
    with requests_session(distrusting) as s, pytest.raises(requests.exceptions.SSLError):
        s.get(f"https://127.0.0.1:{target.port}/", timeout=5)


def test_urllib3(trusting: Client, distrusting: Client, target: TlsTarget) -> None:
    urllib3 = pytest.importorskip("urllib3")
    pm = urllib3_pool_manager(trusting)
    r = pm.request("GET", f"https://127.0.0.1:{target.port}/", retries=False)
    assert r.data == b"hello"
    pm = urllib3_pool_manager(distrusting)
    with pytest.raises(urllib3.exceptions.SSLError):
        pm.request("GET", f"https://127.0.0.1:{target.port}/", retries=False)


def test_httpx(trusting: Client, distrusting: Client, target: TlsTarget) -> None:
    httpx = pytest.importorskip("httpx")
    with httpx.Client(verify=converge_ssl_context(trusting)) as c:
        assert c.get(f"https://127.0.0.1:{target.port}/").text == "hello"
    with (
        httpx.Client(verify=converge_ssl_context(distrusting)) as c,
        pytest.raises(httpx.ConnectError),
    ):
        c.get(f"https://127.0.0.1:{target.port}/")


async def test_httpx_async(trusting: Client, distrusting: Client, target: TlsTarget) -> None:
    httpx = pytest.importorskip("httpx")
    ctx = converge_ssl_context(trusting, port=target.port)
    async with httpx.AsyncClient(verify=ctx) as c:
        r = await c.get(f"https://127.0.0.1:{target.port}/")
        assert r.text == "hello"
    ctx = converge_ssl_context(distrusting, port=target.port)
    async with httpx.AsyncClient(verify=ctx) as c:
        with pytest.raises(httpx.ConnectError):
            await c.get(f"https://127.0.0.1:{target.port}/")


async def test_aiohttp(trusting: Client, distrusting: Client, target: TlsTarget) -> None:
    aiohttp = pytest.importorskip("aiohttp")
    url = f"https://127.0.0.1:{target.port}/"
    # prefetch asks the notaries without blocking the loop; the handshake is then a cache hit
    assert await prefetch("127.0.0.1", target.port, config=trusting)
    conn = aiohttp.TCPConnector(ssl=converge_ssl_context(trusting, port=target.port))
    async with aiohttp.ClientSession(connector=conn) as s, s.get(url) as r:
        assert await r.text() == "hello"
    assert not await prefetch("127.0.0.1", target.port, config=distrusting)
    conn = aiohttp.TCPConnector(ssl=converge_ssl_context(distrusting, port=target.port))
    async with aiohttp.ClientSession(connector=conn) as s:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await s.get(url)


async def test_asyncio_streams(trusting: Client, distrusting: Client, target: TlsTarget) -> None:
    ctx = converge_ssl_context(trusting, port=target.port)
    _, w = await asyncio.open_connection(
        "127.0.0.1", target.port, ssl=ctx, server_hostname="127.0.0.1"
    )
    w.close()
    await w.wait_closed()
    ctx = converge_ssl_context(distrusting, port=target.port)
    with pytest.raises(NotTrusted):
        await asyncio.open_connection(
            "127.0.0.1", target.port, ssl=ctx, server_hostname="127.0.0.1"
        )


def test_require_ca(
    trusting: Client, target: TlsTarget, ca: trustme.CA, other_ca: trustme.CA, tmp_path: Path
) -> None:
    good = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(good))
    data = _raw_get(converge_ssl_context(trusting, require_ca=True, cafile=str(good)), target.port)
    assert data.endswith(b"hello")
    # twin: converge trusts it but the CA check fails
    bad = tmp_path / "other.pem"
    other_ca.cert_pem.write_to_path(str(bad))
    with pytest.raises(ssl.SSLCertVerificationError) as exc:
        _raw_get(converge_ssl_context(trusting, require_ca=True, cafile=str(bad)), target.port)
    assert not isinstance(exc.value, NotTrusted)


def test_verify_server_and_fetch(
    trusting: Client, distrusting: Client, pki: dict[str, Any], target: TlsTarget
) -> None:
    assert fetch_certificate("127.0.0.1", target.port) == pki["target"].der
    v, der = verify_server("127.0.0.1", target.port, config=trusting)
    assert v and der == pki["target"].der
    v, _ = verify_server("127.0.0.1", target.port, config=distrusting)
    assert not v


def test_no_byte_moves_before_converge_answers_without_an_explicit_handshake(
        distrusting: Client, trusting: Client, target: TlsTarget) -> None:
    """OpenSSL completes a handshake not yet done inside the first read or write: a socket
    wrapped with ``do_handshake_on_connect=False`` and a memory BIO written before
    ``do_handshake`` once exchanged data with a peer converge had never checked. Each data
    method now does the handshake and the check first. The twin: a trusted peer's data
    flows on both paths."""
    for client, trusted in ((distrusting, False), (trusting, True)):
        ctx = converge_ssl_context(client)
        with (socket.create_connection(("127.0.0.1", target.port), timeout=5) as raw,
              ctx.wrap_socket(raw, server_hostname="127.0.0.1",
                              do_handshake_on_connect=False) as s):
            if not trusted:
                for op in (lambda: s.sendall(b"GET / HTTP/1.0\r\n\r\n"), lambda: s.recv(10),
                           lambda: s.write(b"x"), lambda: s.read(10)):
                    with pytest.raises(NotTrusted):
                        op()
                assert s.converge_verdict is None
                continue
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
            assert data.endswith(b"hello") and s.converge_verdict
        # the memory BIO: write first, pumping the handshake's bytes by hand
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = converge_ssl_context(client, port=target.port).wrap_bio(
            incoming, outgoing, server_hostname="127.0.0.1")
        with socket.create_connection(("127.0.0.1", target.port), timeout=5) as raw:
            got: bytes | Exception = b""
            for _ in range(50):
                try:
                    obj.write(b"GET / HTTP/1.0\r\n\r\n")
                    break
                except ssl.SSLWantReadError:
                    raw.sendall(outgoing.read())
                    incoming.write(raw.recv(65536))
                except NotTrusted as exc:
                    got = exc
                    break
            if trusted:
                raw.sendall(outgoing.read())
                assert obj.converge_verdict and got == b""
            else:
                assert isinstance(got, NotTrusted) and obj.converge_verdict is None
                with pytest.raises(NotTrusted):
                    obj.read(10)
