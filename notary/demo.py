"""``notary demo``: a notary and a local TLS site to ask it about, with no internet.

The site, ``site.test``, is served on loopback with its own self-signed certificate (kept in
the data directory, so its fingerprint stays the same from run to run). The notary is the
ordinary one with two settings a public notary must not have: loopback targets allowed and
``site.test`` resolved to 127.0.0.1. It prints the commands of the README's "Try it".
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import sys
from pathlib import Path

from notary import keys
from notary.config import Settings
from notary.errors import BadConfig
from notary.server import _cannot_listen, prepare, serve, server_ssl_context

SITE = "site.test"
PAGE = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello from site.test\r\n"


async def _site(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError):
        async with asyncio.timeout(5):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(PAGE)
            await writer.drain()
    writer.close()


def _commands(port: int, site_port: int, sha1: str) -> str:
    n = f"https://127.0.0.1:{port}"
    zero = ":".join(["00"] * 20)
    return f"""notary demo: a notary on {n} and a TLS site {SITE}:{site_port} (127.0.0.1)
Try, in another shell:
  .venv/bin/notary check {SITE}:{site_port} --resolve {SITE}=127.0.0.1
  curl -sk -i -d "fingerprint={sha1}" {n}/target/{SITE}+{site_port}   # 200: the notary agrees
  curl -sk -i -d "fingerprint={zero}" {n}/target/{SITE}+{site_port}   # 409
  curl -sk -H 'Accept: application/json' {n}/   # the pin, version and policy
Ctrl-C stops both."""


async def _run(settings: Settings, site_port: int) -> None:
    site_id = keys.ensure(settings.data_dir / "site.key", settings.data_dir / "site.pem", SITE,
                          now=dt.datetime.now(dt.UTC))
    try:
        server = await asyncio.start_server(_site, "127.0.0.1", site_port,
                                            ssl=server_ssl_context(site_id))
    except OSError as exc:
        raise _cannot_listen("the demo site", "127.0.0.1", site_port, exc) from exc
    async with server:
        port = int(settings.listen[0].rpartition(":")[2])
        notary_id = keys.load(settings.key_path, settings.cert_path)

        def ready(urls: list[str]) -> None:
            print(_commands(port, site_port, site_id.pin_sha1), file=sys.stderr, flush=True)

        await serve(settings, notary_id, on_ready=ready)


def run_demo(data_dir: Path, port: int, site_port: int) -> int:
    """Serve the demo until SIGINT/SIGTERM (raises :class:`BadConfig` for a start-up error)."""
    settings = Settings(data_dir=data_dir, listen=[f"127.0.0.1:{port}"],
                        allow_target=["127.0.0.0/8"], resolve=[f"{SITE}=127.0.0.1"])
    if not 0 < site_port < 65536 or site_port == port:
        raise BadConfig("--site-port must be a port from 1 to 65535 other than the notary's")
    prepare(settings)
    asyncio.run(_run(settings, site_port))
    return 0


__all__ = ["run_demo"]
