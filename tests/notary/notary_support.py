"""Test support for the notary suites: real TLS targets, a raw HTTP client, app runners.

Everything here talks over real sockets on loopback. Nothing patches library internals.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import socket
import ssl
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

import trustme
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from loopback import free_port  # noqa: F401  (re-exported for the tests)

from notary import keys
from notary.config import Settings
from notary.core import legacy
from notary.core.signing import verify_legacy
from notary.keys import Identity
from notary.server import serve, server_ssl_context
from notary.web import SERVICE, create_app

# -- certificates -------------------------------------------------------------------------


def leaf_der(cert: trustme.LeafCert) -> bytes:
    """The DER bytes of a trustme leaf certificate."""
    return ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode("ascii"))


def sha1_fp(der: bytes) -> str:
    return hashlib.sha1(der).digest().hex(":").upper()


def sha256_fp(der: bytes) -> str:
    return hashlib.sha256(der).digest().hex(":").upper()


def server_context(
    cert: trustme.LeafCert, max_version: ssl.TLSVersion | None = None
) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)
    if max_version is not None:
        with warnings.catch_warnings():  # old versions are deprecated: that is the point
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
            ctx.maximum_version = max_version
    return ctx


def no_verify_client() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def ipv6_loopback_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


# -- a TLS target ---------------------------------------------------------------------------


class _TargetConn(asyncio.Protocol):
    def __init__(self, target: TLSTarget) -> None:
        self.target = target

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        # Hold the ClientHello in the kernel until the target decides to answer it.
        transport.pause_reading()
        self.target._accepted(transport, self)

    def data_received(self, data: bytes) -> None:
        pass


class TLSTarget:
    """A TLS server on loopback that counts what happens at it.

    * ``accepted``: TCP connections accepted; ``hellos``: ClientHellos seen (with their SNI in
      ``sni_seen``); ``handshakes``: handshakes completed.
    * ``by_sni`` picks a certificate per SNI name, else the default certificate.
    * ``gate``: connections wait for it before the handshake starts (set by default).
    * ``stall=True``: accept TCP connections but never start the handshake.
    """

    def __init__(
        self,
        cert: trustme.LeafCert,
        *,
        by_sni: dict[str, trustme.LeafCert] | None = None,
        host: str = "127.0.0.1",
        stall: bool = False,
        gated: bool = False,
        max_version: ssl.TLSVersion | None = None,
    ) -> None:
        self.host = host
        self.port = 0
        self.stall = stall
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self.accepted = 0
        self.hellos = 0
        self.handshakes = 0
        self.sni_seen: list[str | None] = []
        self._max_version = max_version
        self._default = server_context(cert, max_version)
        self._by_sni = {
            name: server_context(c, max_version) for name, c in (by_sni or {}).items()
        }
        self._listen_ctx = server_context(cert, max_version)
        self._listen_ctx.sni_callback = self._on_hello
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.BaseTransport] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def use(self, cert: trustme.LeafCert) -> None:
        """Present ``cert`` (to clients without a matching SNI name) from now on."""
        self._default = server_context(cert, self._max_version)

    def _on_hello(self, sslobj: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
        self.hellos += 1
        self.sni_seen.append(name)
        chosen = self._by_sni.get(name, self._default) if name else self._default
        sslobj.context = chosen

    def _accepted(self, transport: asyncio.Transport, proto: _TargetConn) -> None:
        self.accepted += 1
        self._transports.add(transport)
        task = asyncio.get_running_loop().create_task(self._handle(transport, proto))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, transport: asyncio.Transport, proto: _TargetConn) -> None:
        await self.gate.wait()
        if self.stall or transport.is_closing():
            return  # keep the connection open without a handshake; closed at stop()
        loop = asyncio.get_running_loop()
        try:
            tls = await loop.start_tls(
                transport, proto, self._listen_ctx, server_side=True, ssl_handshake_timeout=10
            )
        except (OSError, ssl.SSLError, TimeoutError, RuntimeError):
            transport.abort()
            return
        if tls is None:
            return
        self.handshakes += 1
        self._transports.add(tls)

    async def start(self) -> TLSTarget:
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _TargetConn(self), self.host, 0
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.gate.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for tr in self._transports:
            tr.abort()
        await asyncio.sleep(0.01)
        if self._server is not None:
            await self._server.wait_closed()


# -- a raw HTTP client ----------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    reason: str
    headers: dict[str, str]
    body: bytes
    raw: bytes
    peer_cert: bytes | None = None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def cache_status(self) -> str | None:
        return self.header("Cache-Status")

    def json(self) -> Any:
        return json.loads(self.body)

    def fingerprints(self) -> list[str]:
        return [e["fingerprint"] for e in self.json()["fingerprintList"]]


def parse_reply(raw: bytes, peer_cert: bytes | None = None) -> Reply:
    """Parse like the legacy add-on: the body is everything after the first blank line."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise AssertionError(f"no complete HTTP response head in {raw[:200]!r}")
    lines = head.decode("latin-1").split("\r\n")
    version, status, *reason = lines[0].split(" ", 2)
    assert version.startswith("HTTP/1."), lines[0]
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Reply(int(status), reason[0] if reason else "", headers, body, raw, peer_cert)


async def exchange(
    port: int,
    request: bytes,
    *,
    host: str = "127.0.0.1",
    tls: bool = True,
    timeout: float = 20.0,
) -> tuple[bytes, bytes | None]:
    """Send ``request`` on a new connection and read until the server closes it."""
    chunks: list[bytes] = []
    peer: bytes | None = None
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(
            host, port, ssl=no_verify_client() if tls else None
        )
        try:
            ssl_obj = writer.get_extra_info("ssl_object")
            if ssl_obj is not None:
                peer = ssl_obj.getpeercert(binary_form=True)
            writer.write(request)
            await writer.drain()
            while True:
                try:
                    data = await reader.read(65536)
                except (ConnectionResetError, ssl.SSLError):
                    break
                if not data:
                    break
                chunks.append(data)
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()
    return b"".join(chunks), peer


def legacy_post_request(path: str, body: bytes) -> bytes:
    """Exactly what the legacy add-on sends: HTTP/1.0, no Host header."""
    return (
        f"POST {path} HTTP/1.0\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        "Connection: close\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    ).encode("latin-1") + body


def get_request(path: str, headers: dict[str, str] | None = None) -> bytes:
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return f"GET {path} HTTP/1.0\r\nConnection: close\r\n{extra}\r\n".encode("latin-1")


# -- verification of legacy bodies ----------------------------------------------------------


def verifies_recipe_a(body: bytes, key: rsa.RSAPublicKey) -> bool:
    signed = legacy.reserialise_without_signature(body)
    sig = base64.b64decode(json.loads(body)["signature"])
    return verify_legacy(key, signed, sig)


def verifies_recipe_b(body: bytes, key: rsa.RSAPublicKey) -> bool:
    signed, sig = legacy.split_body(body)
    return verify_legacy(key, signed, sig)


def public_key_of_pem(pem: str) -> rsa.RSAPublicKey:
    key = x509.load_pem_x509_certificate(pem.encode("ascii")).public_key()
    assert isinstance(key, rsa.RSAPublicKey)
    return key


# -- counting the notary's signatures -------------------------------------------------------


class CountingKey:
    """Wraps an RSA private key and counts ``sign`` calls (the signer's only use of it)."""

    def __init__(self, key: rsa.RSAPrivateKey) -> None:
        self._key = key
        self.signs = 0

    def sign(self, data: bytes, pad: Any, algorithm: Any) -> bytes:
        self.signs += 1
        return self._key.sign(data, pad, algorithm)

    def public_key(self) -> rsa.RSAPublicKey:
        return self._key.public_key()


def counting_identity(identity: Identity) -> tuple[Identity, CountingKey]:
    key = CountingKey(identity.key)
    return replace(identity, key=key), key  # type: ignore[arg-type]


# -- running the notary ---------------------------------------------------------------------


class FakeClock:
    """A clock the test advances by hand (passed to ``create_app``)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Notary:
    """A running notary under test."""

    port: int
    identity: Identity
    settings: Settings
    host: str = "127.0.0.1"
    app: web.Application | None = None
    _stop: Callable[[], Coroutine[Any, Any, None]] | None = field(default=None, repr=False)

    async def post(self, spec: str, fingerprint: str | None) -> Reply:
        body = b"" if fingerprint is None else f"fingerprint={fingerprint}".encode("latin-1")
        return await self.send(legacy_post_request(f"/target/{spec}", body))

    async def get(self, spec: str) -> Reply:
        return await self.send(get_request(f"/target/{spec}"))

    async def send(self, request: bytes, timeout: float = 20.0) -> Reply:
        raw, peer = await exchange(
            self.port, request, host=self.host, tls=self.settings.tls, timeout=timeout
        )
        return parse_reply(raw, peer)

    @property
    def service(self) -> Any:
        assert self.app is not None, "only apps started with create_app expose the service"
        return self.app[SERVICE]

    async def stop(self) -> None:
        if self._stop is not None:
            stop, self._stop = self._stop, None
            await stop()


async def start_app(settings: Settings, identity: Identity, **create_kw: Any) -> Notary:
    """``create_app`` behind an AppRunner/TCPSite with TLS on ``settings.listen[0]``."""
    app = create_app(settings, identity, **create_kw)
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log=None,
        max_line_size=settings.max_line,
        max_field_size=settings.max_field,
        max_headers=settings.max_headers,
    )
    await runner.setup()
    host, port = settings.listen_addrs()[0]
    ctx = server_ssl_context(identity) if settings.tls else None
    site = web.TCPSite(runner, host, port, ssl_context=ctx)
    await site.start()
    bound = runner.addresses[0][1]
    return Notary(bound, identity, settings, host, app, runner.cleanup)


async def start_served(settings: Settings, identity: Identity) -> Notary:
    """``notary.server.serve`` (the production entry point) as a task in this loop."""
    keys.ensure_signing_key(settings.signing_key_path)  # what prepare() does before serve()
    stop = asyncio.Event()
    ready: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()

    def on_ready(urls: list[str]) -> None:
        if not ready.done():
            ready.set_result(urls)

    task = asyncio.get_running_loop().create_task(
        serve(settings, identity, stop=stop, on_ready=on_ready)
    )
    done, _ = await asyncio.wait({task, ready}, timeout=15, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # raises the start-up error
    urls = ready.result()
    port = int(urls[0].rsplit(":", 1)[1])

    async def _stop() -> None:
        stop.set()
        await asyncio.wait_for(task, 15)

    host = settings.listen_addrs()[0][0]
    return Notary(port, identity, settings, host, None, _stop)


def record_statements(store: Any) -> list[str]:
    """Every SQL statement a :class:`~notary.store.sqlite.SQLiteStore` runs from now on (its
    driver connection wrapped), in order."""
    statements: list[str] = []
    real = store._db.fetchall
    real_batch = store._db.batch

    async def counting(sql: str, params: object = ()) -> Any:
        statements.append(sql)
        return await real(sql, params)

    async def counting_batch(ops: Any, writes: Any) -> Any:
        statements.extend(sql for sql, _ in ops)
        return await real_batch(ops, writes)

    store._db.fetchall = counting
    store._db.batch = counting_batch
    return statements
