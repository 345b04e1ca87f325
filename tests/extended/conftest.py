"""Fixtures: a real TLS target and a real notary on 127.0.0.1 (port 0), both in-process."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from notary import keys
from notary.config import Settings
from notary.server import server_ssl_context
from notary.web import create_app


@dataclass
class Target:
    port: int
    der: bytes
    handshakes: list[int]


@dataclass
class Notary:
    url: str
    settings: Settings
    identity: keys.Identity
    clock: list[float]


async def _serve_tls(cert: trustme.LeafCert) -> tuple[asyncio.Server, Target]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)
    target = Target(0, cert.cert_chain_pems[0].bytes(), [])
    target.der = ssl.PEM_cert_to_DER_cert(target.der.decode())

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target.handshakes.append(1)
        writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0, ssl=ctx)
    target.port = server.sockets[0].getsockname()[1]
    return server, target


@pytest.fixture
async def tls_target() -> AsyncIterator[Target]:
    ca = trustme.CA()
    server, target = await _serve_tls(ca.issue_cert("site.test"))
    yield target
    server.close()
    await server.wait_closed()


@pytest.fixture
async def notary(tmp_path: Path) -> AsyncIterator[Notary]:
    settings = Settings(
        data_dir=tmp_path,
        listen=["127.0.0.1:0"],
        allow_target=["127.0.0.0/8"],
        resolve=["site.test=127.0.0.1", "private.test=10.1.2.3"],
        probe_timeout=2.0,
    )
    identity = keys.generate(
        settings.key_path, settings.cert_path, "localhost", now=dt.datetime.now(dt.UTC)
    )
    signing = keys.ensure_signing_key(settings.signing_key_path)
    clock = [1_800_000_000.0]
    app = create_app(settings, identity, clock=lambda: clock[0], signing_key=signing)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl_context(identity))
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield Notary(f"https://127.0.0.1:{port}", settings, identity, clock)
    await runner.cleanup()
